"""vLLM's own start-up code on a plan (engine.py, child.py), on a simulated platform (platform_fakes.py)."""
