"""FP8 KV-cache workflows (docs/fp8-kv.md); the runtime side, inside vLLM, is kimi_dflash.kvscale."""
