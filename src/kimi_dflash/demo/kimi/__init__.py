"""The miniature Kimi K2.6 demo bundle: a KimiK25ForConditionalGeneration target (MLA + MoE with Kimi's routing),
its INT4 compressed-tensors twin, and a DFlash drafter constructed to agree with it. See layout.py."""
