import sys

from kimi_dflash.preflight.cli import main

sys.exit(main())
