"""python -m kimi_dflash_lab.synthetic: run the synthetic server (see cli.py, --help)."""

from kimi_dflash_lab.synthetic.cli import main

if __name__ == "__main__":
    main()
