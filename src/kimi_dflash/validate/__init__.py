"""Compare what two servers generate at T=0 (engine: token ids, first divergence, math exact-match; cli:
`kimi-dflash validate`). The FP8-KV check (kimi_dflash.fp8.validate) runs on the same engine."""
