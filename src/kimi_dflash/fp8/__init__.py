"""FP8 KV-cache workflows: calibrate per-layer scales against a server, validate FP8 KV against BF16 KV.
The runtime side (the KV write hook inside vLLM) is kimi_dflash.kvscale."""
