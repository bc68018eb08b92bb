"""FP8 KV-cache scales for MLA models inside vLLM; import-light: the plugin imports it in every vLLM process."""
