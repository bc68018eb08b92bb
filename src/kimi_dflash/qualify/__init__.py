"""qualify: is DFlash lossless and worth it on this box, and with which settings (docs/qualify.md)."""
