"""qualify: one command that qualifies a box — is DFlash lossless and worth it here, and with which settings
(docs/qualify.md)."""
