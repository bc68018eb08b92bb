"""The demo models, fabricated locally and deterministically on first use and cached (docs/demo-models.md); importing
this package is cheap. catalog.CHOICES: the values of the FABRICATE_DEMO_MODELS config key."""

from kimi_dflash.demo.bundle import DemoModels, demo_model_paths, ensure_demo_models
from kimi_dflash.demo.catalog import CHOICES, DEFAULT

__all__ = ["CHOICES", "DEFAULT", "DemoModels", "demo_model_paths", "ensure_demo_models"]
