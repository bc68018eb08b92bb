"""Studies of the product: each a command (python -m kimi_dflash_lab --help) with a thin script in benchmarks/."""
