"""The checkout the tests run from (the package itself never knows it: see kimi_dflash.core.paths)."""

from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
CONFIGS_DIR = REPO_ROOT / "configs"


def use_this_checkout() -> None:
    """Every process a test starts imports this checkout's product and lab (pyproject's pytest `pythonpath` covers
    only the test process itself): src/ and lab/ go first on PYTHONPATH."""
    import os

    paths = [str(REPO_ROOT / "src"), str(REPO_ROOT / "lab")]
    inherited = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p and p not in paths]
    os.environ["PYTHONPATH"] = os.pathsep.join(paths + inherited)
