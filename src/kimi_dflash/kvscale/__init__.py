"""FP8 KV-cache scales for MLA models (Kimi K2.6) inside vLLM: the hook on MLA's KV write path, observe dumps, the
scales file, and preflight's checks of them. Import-light on purpose: the vLLM plugin imports it in every vLLM
process. Calibration and validation are kimi_dflash.fp8; the instruments that measure the hook are in the lab.
"""
