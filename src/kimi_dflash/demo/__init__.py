"""The embedded CPU demo models: a tiny Qwen3 target and a tiny DFlash drafter that agrees with it.

Both are fabricated locally and deterministically (no model hub) on first use and cached under the
project cache. Importing this package is cheap; the heavy work happens only when a build is needed.

    from kimi_dflash.demo import ensure_demo_models
    models = ensure_demo_models()          # builds once (about a second), then reuses the cached copy
    models.target_dir, models.drafter_dir  # pass to vLLM: serve <target_dir> --speculative-config ...
"""

from kimi_dflash.demo.bundle import DemoModels, demo_model_paths, ensure_demo_models

__all__ = ["DemoModels", "demo_model_paths", "ensure_demo_models"]
