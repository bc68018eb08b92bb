"""The generators of the repository's docs (maintainer tools, not operator features): `python -m kimi_dflash_lab
docs` regenerates every generated section; the tests compare each section with its generator."""
