"""FP8 KV-cache scales for MLA models inside vLLM: the KV write hook, observe dumps, the scales file and preflight's
checks. Import-light: the vLLM plugin imports it in every vLLM process. Calibration and validation: kimi_dflash.fp8."""
