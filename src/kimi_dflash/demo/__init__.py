"""The embedded CPU demo models, fabricated locally and deterministically (no model hub) on first use and cached
under the project cache. Importing this package is cheap; the heavy work happens only when a build is needed.

    from kimi_dflash.demo import ensure_demo_models
    models = ensure_demo_models()            # the miniature Kimi K2.6 + DFlash drafter (choice "kimi")
    models = ensure_demo_models(choice="qwen3")   # the first demo: tiny Qwen3 + DFlash drafter
    models.target_dir, models.drafter_dir    # pass to vLLM: serve <target_dir> --speculative-config ...

catalog.CHOICES lists the choices (the values of the FABRICATE_DEMO_MODELS config key).
"""

from kimi_dflash.demo.bundle import DemoModels, demo_model_paths, ensure_demo_models
from kimi_dflash.demo.catalog import CHOICES, DEFAULT

__all__ = ["CHOICES", "DEFAULT", "DemoModels", "demo_model_paths", "ensure_demo_models"]
