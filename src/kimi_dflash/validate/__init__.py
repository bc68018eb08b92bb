"""Compare what two servers generate at T=0: one engine for every candidate (DFlash, FP8 KV, another vLLM).

  engine  token-id agreement per prompt, first divergence, math exact-match, both servers queried alike
  cli     payload/validate.py: reference vs candidate, a one-screen verdict, exit 0 PASS / 1 WARN / 2 FAIL
The FP8-KV check (benchmarks/validate-fp8.sh, kimi_dflash.fp8.validate) runs on the same engine and adds
KV capacity and throughput.
"""
