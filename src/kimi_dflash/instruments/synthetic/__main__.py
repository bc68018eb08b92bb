"""python -m kimi_dflash.instruments.synthetic: run the synthetic server (see cli.py, --help)."""

from kimi_dflash.instruments.synthetic.cli import main

if __name__ == "__main__":
    main()
