"""What leaves the box: OUT/results/ (each grid result under a name ready for benchmarks/results/) and one
archive, OUT.tar.gz, to attach to an issue."""

from __future__ import annotations

import re
import shutil
import socket
import tarfile
from pathlib import Path

from kimi_dflash.qualify.plan import SPEC_TOKENS
from kimi_dflash.sweep.state import finished_results


def result_name(config: str, k: str, host: str | None = None) -> str:
    """'production-mi300x-box1-k2.json': config stem, host, k; file-name safe."""
    stem = Path(config).name.removesuffix(".env")
    name = f"{stem}-{host or socket.gethostname()}-qualify-k{k}"
    return re.sub(r"[^A-Za-z0-9._-]+", "_", name) + ".json"


def copy_results(out: Path, config: str) -> list[Path]:
    target = out / "results"
    target.mkdir(parents=True, exist_ok=True)
    copied = []
    for path, result in finished_results(out / "grid"):
        overrides = result.server_config.overrides if result.server_config else {}
        if set(overrides) != {SPEC_TOKENS}:
            continue  # a test-only candidate with other overrides is not a result of this config
        destination = target / result_name(config, overrides[SPEC_TOKENS])
        shutil.copyfile(path, destination)
        copied.append(destination)
    return copied


def archive(out: Path) -> Path:
    """OUT.tar.gz beside OUT (written to a temporary name, then renamed: never half-written)."""
    out = out.resolve()
    final = out.with_name(out.name + ".tar.gz")
    partial = out.with_name(out.name + ".tar.gz.partial")
    with tarfile.open(partial, "w:gz") as tar:
        tar.add(out, arcname=out.name, filter=lambda info: None if info.name.endswith(".pid") else info)
    partial.replace(final)
    return final
