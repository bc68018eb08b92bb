"""`python -m kimi_dflash_lab gpu-prepare` (lab/gpu/prepare.sh): build the offline vLLM 0.26.0 bundle for the GPU
host into .gpu-kit/bundle/ of this checkout, where the package index is reachable.

The bundle is made by the project's GPU kit (shared/tools/gpu-kit/build.sh: ours, read and run, not third-party
code), found in a `shared/tools/gpu-kit` next to this checkout or one of its parents (or --kit DIR). It carries the
kit's install.sh and smoke.py, so the GPU host needs nothing from shared/. Added here: project-whl/, the wheels of
the project's own requirements that a bare PyTorch image may lack (python-dotenv: 20 KB; the run installs it only
where missing). The folder is ignored through .git/info/exclude (not .gitignore: it is this clone's business), so
the device tool carries it only when asked to (carry: [".gpu-kit"]). Checkout + bundle must fit the 64 MiB a copy
to the GPU host may hold: the sizes are printed, and an excess refused.
"""

from __future__ import annotations

import importlib.metadata
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from kimi_dflash.core.options import declare, option, run
from kimi_dflash_lab.gpu_run.context import CHECKOUT
from kimi_dflash_lab.gpu_run.runner import KIT_DIR

KIT = Path("shared") / "tools" / "gpu-kit"
LIMIT_MIB = 64.0
PROJECT_WHEELS = ("python-dotenv",)
EXCLUDE_LINE = "/.gpu-kit/"


def find_kit(start: Path = CHECKOUT) -> Path | None:
    for directory in (start, *start.parents):
        if (directory / KIT / "build.sh").is_file():
            return directory / KIT
    return None


def git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=CHECKOUT, capture_output=True, text=True, check=True).stdout


def exclude_kit_dir() -> Path:
    """Ignore .gpu-kit/ in this clone (every worktree shares the common info/exclude)."""
    exclude = Path(git("rev-parse", "--path-format=absolute", "--git-path", "info/exclude").strip())
    lines = exclude.read_text(encoding="utf-8").splitlines() if exclude.is_file() else []
    if EXCLUDE_LINE not in lines:
        exclude.parent.mkdir(parents=True, exist_ok=True)
        exclude.write_text("\n".join([*lines, EXCLUDE_LINE]) + "\n", encoding="utf-8")
    return exclude


def mib(paths: list[Path]) -> float:
    return sum(p.stat().st_size for p in paths if p.is_file() and not p.is_symlink()) / (1 << 20)


def checkout_mib() -> float:
    """What a copy of the working tree holds: tracked files and untracked ones git does not ignore."""
    names = git("ls-files", "-z", "--cached", "--others", "--exclude-standard").split("\0")
    return mib([CHECKOUT / name for name in names if name])


@dataclass(kw_only=True)
class Options:
    kit: Path | None = option("the GPU kit folder (default: found next to here)")
    no_prune: bool = option("the unpruned fall-back (three lots: too big for one)")
    force: bool = option("rebuild a bundle that is already there")


add_cli_args = declare(Options, __doc__)


def main(args: Options) -> int:
    kit = args.kit or find_kit()
    if kit is None or not (kit / "build.sh").is_file():
        print(f"gpu-prepare: no GPU kit ({KIT}/build.sh) next to {CHECKOUT} or above; pass --kit DIR", file=sys.stderr)
        return 2
    bundle = KIT_DIR / "bundle"
    exclude = exclude_kit_dir()
    if (bundle / "MANIFEST.txt").is_file() and not args.force:
        print(f"gpu-prepare: {bundle} is there (--force rebuilds)", file=sys.stderr)
    else:
        staging = KIT_DIR / "bundle.building"
        shutil.rmtree(staging, ignore_errors=True)
        staging.mkdir(parents=True)
        result = subprocess.run(
            ["bash", str(kit / "build.sh"), str(staging), *(["--no-prune"] if args.no_prune else [])]
        )
        if result.returncode != 0:
            print(f"gpu-prepare: {kit}/build.sh exited {result.returncode}", file=sys.stderr)
            return 1
        wheels = staging / "project-whl"
        for name in PROJECT_WHEELS:
            pin = f"{name}=={importlib.metadata.version(name)}"
            subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:",
                            "-d", str(wheels), pin], check=True)  # fmt: skip
        shutil.rmtree(bundle, ignore_errors=True)
        staging.rename(bundle)
    bundle_size, tree_size = mib(list(bundle.rglob("*"))), checkout_mib()
    total = bundle_size + tree_size
    print(f"bundle {bundle_size:.1f} MiB + checkout {tree_size:.1f} MiB = {total:.1f} MiB (limit {LIMIT_MIB:g}); "
          f"{bundle} is ignored through {exclude}")  # fmt: skip
    if total > LIMIT_MIB:
        print("gpu-prepare: too big for one copy to the GPU host", file=sys.stderr)
        return 1
    print('carry it: run(command="lab/gpu/run.sh .gpu-run ...", carry=[".gpu-kit"])')
    return 0


if __name__ == "__main__":
    sys.exit(run(__name__, prog="python -m kimi_dflash_lab gpu-prepare"))
