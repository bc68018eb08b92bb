"""A fresh copy of this checkout (the files git tracks, as they are in the working tree), for tests that must not
leave anything in the repository (an editable install writes src/*.egg-info) or must see a clone nobody ran
`pip install` in."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from repo_paths import REPO_ROOT


def fresh_checkout(destination: Path) -> Path:
    listed = subprocess.run(
        ["git", "-C", str(REPO_ROOT), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        capture_output=True,
        check=True,
    ).stdout.decode()
    for name in filter(None, listed.split("\0")):
        source, target = REPO_ROOT / name, destination / name
        if source.is_symlink():  # e.g. src/kimi_dflash/configs -> ../../configs: keep it a link, as git does
            target.parent.mkdir(parents=True, exist_ok=True)
            target.symlink_to(source.readlink())
        elif source.is_file():
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target)
    return destination
