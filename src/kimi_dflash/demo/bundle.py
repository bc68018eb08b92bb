"""The cached demo bundles on disk: where they live, whether a copy is complete, building one atomically.
Standard library only, so reusing a cached bundle costs a few milliseconds."""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import importlib
import json
import shutil
import sys
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from kimi_dflash.core.atomic_write import publish_directory
from kimi_dflash.core.errors import UserError
from kimi_dflash.demo.catalog import DEFAULT, DemoChoice
from kimi_dflash.demo.catalog import choice as catalog_choice
from kimi_dflash.demo.encoding import json_bytes
from kimi_dflash.demo.kimi.layout import CUDA_FABRICATION_VERSION as KIMI_CUDA_FABRICATION_VERSION
from kimi_dflash.demo.kimi.layout import FABRICATION_VERSION as KIMI_FABRICATION_VERSION
from kimi_dflash.demo.layout import FABRICATION_VERSION as QWEN3_FABRICATION_VERSION

# Kept here, not in kimi/eagle3_drafter.py, so that checking a cached bundle imports no numpy.
KIMI_EAGLE3_FABRICATION_VERSION = f"{KIMI_FABRICATION_VERSION}+eagle3-1"

if TYPE_CHECKING:
    from kimi_dflash.demo.fabricate import Fabrication

MANIFEST = "manifest.json"
LOCK = ".lock"
DRAFTER = "drafter"


@dataclass(frozen=True)
class BundleRecipe:
    fabrication_version: str
    fabricate: str  # "module:function" returning a demo.fabricate.Fabrication; imported only to build


RECIPES: dict[str, BundleRecipe] = {
    "kimi": BundleRecipe(KIMI_FABRICATION_VERSION, "kimi_dflash.demo.kimi.fabricate:fabricate"),
    "kimi-eagle3": BundleRecipe(KIMI_EAGLE3_FABRICATION_VERSION, "kimi_dflash.demo.kimi.eagle3_drafter:fabricate"),
    "kimi-cuda": BundleRecipe(KIMI_CUDA_FABRICATION_VERSION, "kimi_dflash.demo.kimi.fabricate:fabricate_cuda"),
    "qwen3": BundleRecipe(QWEN3_FABRICATION_VERSION, "kimi_dflash.demo.fabricate:fabricate"),
}


@dataclass(frozen=True)
class DemoModels:
    """Paths and facts the launcher and tests need to serve one demo choice."""

    root: Path
    choice: DemoChoice
    bundle_dir: Path
    target_dir: Path
    drafter_dir: Path
    manifest_path: Path
    built: bool = False  # True when this call fabricated the files, False when a cached copy was reused

    def speculative_config(self, num_speculative_tokens: int | None = None) -> dict[str, object]:
        """The --speculative-config object for vLLM."""
        picked = self.choice
        k = picked.recommended_num_speculative_tokens if num_speculative_tokens is None else num_speculative_tokens
        if not 1 <= k <= (most := picked.max_num_speculative_tokens):
            raise ValueError(f"num_speculative_tokens={k}: the demo drafter proposes 1 to {most} tokens per step")
        return {"method": picked.speculative_method, "model": str(self.drafter_dir), "num_speculative_tokens": k}

    def manifest(self) -> dict[str, object]:
        return json.loads(self.manifest_path.read_text(encoding="utf-8"))


def default_root() -> Path:
    from kimi_dflash.core.paths import cache_root

    return cache_root() / "demo"


def demo_model_paths(root: Path | None = None, choice: str = DEFAULT) -> DemoModels:
    """Where a demo choice's models live (or will), without checking or building anything."""
    picked = catalog_choice(choice)
    base = (root if root is not None else default_root()).expanduser().resolve()
    bundle = base / picked.bundle
    return DemoModels(base, picked, bundle, bundle / picked.target, bundle / DRAFTER, bundle / MANIFEST)


def bundle_problem(bundle: Path, fabrication_version: str) -> str | None:
    """Why the bundle at `bundle` cannot be reused, or None when it is complete and current."""
    manifest_path = bundle / MANIFEST
    try:
        manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return "not built yet"
    except (OSError, ValueError) as error:
        return f"unreadable manifest ({error})"
    version = manifest.get("fabrication_version") if isinstance(manifest, dict) else None
    if version != fabrication_version:
        return f"fabrication version {version!r}, this code makes {fabrication_version!r}"
    files = manifest.get("files")
    if not isinstance(files, dict) or not files:
        return "manifest lists no files"
    for relative, expected in files.items():
        path = bundle / relative
        if not path.is_file():
            return f"{relative} is missing"
        if hashlib.sha256(path.read_bytes()).hexdigest() != expected:  # bundle files are at most ~15 MB
            return f"{relative} does not match its sha256"
    return None


def write_tree(directory: Path, files: dict[str, bytes]) -> None:
    for relative, content in files.items():
        path = directory / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content)


@contextlib.contextmanager
def exclusive(root: Path) -> Iterator[None]:
    """Serialize builders (two launchers starting at once would otherwise race on the swap)."""
    root.mkdir(parents=True, exist_ok=True)
    with (root / LOCK).open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)  # released when the file is closed
        yield


def install(root: Path, name: str, files: dict[str, bytes]) -> None:
    """Write a complete bundle beside the live one, then swap it in; the old one is removed afterwards."""
    staging = Path(tempfile.mkdtemp(prefix=".building-", dir=root))
    try:
        write_tree(staging, files)
        publish_directory(staging, root / name)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


FABRICATION_LIBRARIES = ("tokenizers", "safetensors")  # the cpu extra; numpy is a base dependency


def _require_fabrication_libraries() -> None:
    import importlib.util

    missing = [name for name in FABRICATION_LIBRARIES if importlib.util.find_spec(name) is None]
    if missing:
        raise UserError(
            f"fabricating the demo models needs {' and '.join(missing)} (the cpu extra), not installed in "
            f"{sys.executable}: run launchers/setup-cpu.sh, or pip install 'kimi-k26-dflash[cpu]'",
            exit_code=1,
        )


def ensure_bundle(
    root: Path, name: str, recipe: BundleRecipe, force: bool = False, progress: Callable[[str], None] | None = None
) -> bool:
    """Make <root>/<name> a complete, current copy of `recipe`'s bundle; True when this call fabricated it."""
    say = progress or (lambda message: None)
    bundle = root / name
    if not force and bundle_problem(bundle, recipe.fabrication_version) is None:
        return False
    with exclusive(root):
        problem = "rebuild requested (--force)" if force else bundle_problem(bundle, recipe.fabrication_version)
        if problem is None:  # another process finished it while we waited for the lock
            return False
        say(f"fabricating the demo models in {bundle} ({problem})")
        _require_fabrication_libraries()
        module, function = recipe.fabricate.split(":")
        fabrication: Fabrication = getattr(importlib.import_module(module), function)(say)
        manifest = {
            "fabrication_version": recipe.fabrication_version,
            "files": {path: hashlib.sha256(content).hexdigest() for path, content in sorted(fabrication.files.items())},
            "summary": fabrication.summary,
        }
        install(root, name, {**fabrication.files, MANIFEST: json_bytes(manifest)})
    leftover = bundle_problem(bundle, recipe.fabrication_version)
    if leftover is not None:
        raise RuntimeError(f"the freshly built demo bundle in {bundle} failed its own check: {leftover}")
    return True


def ensure_demo_models(
    root: Path | None = None, force: bool = False, progress: Callable[[str], None] | None = None, choice: str = DEFAULT
) -> DemoModels:
    """A demo choice's target + drafter, fabricating its bundle first unless a complete, current copy is cached."""
    paths = demo_model_paths(root, choice)
    built = ensure_bundle(paths.root, paths.choice.bundle, RECIPES[paths.choice.bundle], force, progress)
    return replace(paths, built=built)
