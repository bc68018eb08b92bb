"""The checkout the tests run from (the package itself never knows it: see kimi_dflash.core.paths)."""

from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
CONFIGS_DIR = REPO_ROOT / "configs"
