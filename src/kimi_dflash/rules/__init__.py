"""Will this vLLM run this plan? The compatibility rules (catalog/), the vLLM source facts they read (source.py:
vLLM is read as source, never imported) and the engine that judges one deployment (engine.py); docs/architecture.md."""
