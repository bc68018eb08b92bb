"""The demo models, fabricated deterministically on first use and cached (docs/demo-models.md); cheap to import."""

from kimi_dflash.demo.bundle import DemoModels, demo_model_paths, ensure_demo_models
from kimi_dflash.demo.catalog import CHOICES, DEFAULT

__all__ = ["CHOICES", "DEFAULT", "DemoModels", "demo_model_paths", "ensure_demo_models"]
