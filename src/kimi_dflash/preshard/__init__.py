"""Checkpoints pre-split for one tensor-parallel size (vLLM's sharded_state format), with a manifest that says
what they were made from, so a server never loads a pre-shard made for another TP size, vLLM or checkpoint."""
