"""Scale-out past one node: one vLLM replica per 8-GPU node behind vllm-router (launcher and its argv)."""
