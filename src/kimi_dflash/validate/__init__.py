"""Compare what two servers generate at T=0 (`kimi-dflash validate`; kimi_dflash.fp8.validate reuses the engine)."""
