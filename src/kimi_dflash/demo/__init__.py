"""The embedded CPU demo models, fabricated locally and deterministically (no model hub) on first use and cached
under the project cache; importing this package is cheap. Usage: docs/demo-models.md (``ensure_demo_models``);
catalog.CHOICES lists the choices (the values of the FABRICATE_DEMO_MODELS config key).
"""

from kimi_dflash.demo.bundle import DemoModels, demo_model_paths, ensure_demo_models
from kimi_dflash.demo.catalog import CHOICES, DEFAULT

__all__ = ["CHOICES", "DEFAULT", "DemoModels", "demo_model_paths", "ensure_demo_models"]
