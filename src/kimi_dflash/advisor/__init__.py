"""Speculative-token advisor: predict tok/s for every k from a few measured runs (model: pure; cli: the verb)."""
