"""Plugin delivery: the registry's runtime patches inside a vLLM process (kimi_dflash.vllm_plugin.register()).

Pending runtime patches install when vLLM imports their module; file-only ones warn; unrecognised trees raise
(vLLM does not swallow errors from register()). KIMI_DFLASH_PATCHES=off skips all of it."""

from __future__ import annotations

import logging
import os
from pathlib import Path
from types import ModuleType

from kimi_dflash.core.envvars import PATCHES
from kimi_dflash.core.import_hooks import when_imported
from kimi_dflash.patcher import floor
from kimi_dflash.patcher.engine import StatusTable, read_texts, status_table
from kimi_dflash.patcher.model import Patch, Status
from kimi_dflash.patcher.runtime_patches import INSTALLERS
from kimi_dflash.patcher.status import present

# A child of vLLM's "vllm" logger, so vLLM's own handler prints it at INFO in every process.
logger = logging.getLogger("vllm.plugins.kimi_dflash")

_done = False


def _install_on_import(patch_id: str) -> None:
    module_name, install = INSTALLERS[patch_id]

    def run(module: ModuleType) -> None:
        install(module)
        logger.info("kimi-dflash: runtime patch %s installed in %s", patch_id, module_name)

    when_imported(module_name, run)  # at once if vLLM has imported it already


def _hooks_present(table: StatusTable, patch: Patch) -> bool:
    texts = read_texts(table.root, (patch,))  # once per patch, not per hook: this runs in every vLLM process
    return all(present(probe, texts) for probe in patch.runtime_hooks)


def plan_runtime(table: StatusTable) -> tuple[list[str], list[str], list[str], list[str]]:
    """Split a status table into (runtime ids, file-only pending ids, done lines, failure lines)."""
    runtime, file_only, done, failures = [], [], [], []
    for state in table.states:
        patch = state.patch
        if state.status is Status.RETIRED:
            done.append(f"{patch.id} retired upstream (PR {patch.upstream_pr})")
        elif state.status is Status.APPLIED:
            done.append(f"{patch.id} applied in the source files")
        elif state.status is Status.UNRECOGNISED:
            failures.append(f"{patch.id}: {state.detail}; " + "; ".join(state.problems))
        elif patch.runtime is None:
            file_only.append(patch.id)
        elif patch.runtime in INSTALLERS and _hooks_present(table, patch):
            runtime.append(patch.id)
        else:
            failures.append(f"{patch.id}: pending, but the functions its runtime patch rebinds are missing")
    return runtime, file_only, done, failures


def apply_runtime_patches(vllm_root: Path | None = None) -> None:
    """Raise if a needed patch cannot apply (vLLM does not swallow it)."""
    global _done
    if _done:
        return
    if os.environ.get(PATCHES, "").strip().lower() in {"0", "off", "false", "no"}:
        logger.warning("kimi-dflash patches: disabled by %s; nothing checked", PATCHES)
        _done = True
        return
    table = status_table(vllm_root)
    where = f"vLLM {table.version or '?'} at {table.root}"
    runtime, file_only, done, failures = plan_runtime(table)
    if failures:
        raise RuntimeError(
            f"kimi-dflash patches: cannot patch {where}:\n  "
            + "\n  ".join(failures)
            + f"\nRun `kimi-dflash patch check --vllm-root {table.root}` for "
            f"details, use a vLLM version the patcher knows ({floor.OLDEST} and later), or set "
            f"{PATCHES}=off to start vLLM without the kimi-dflash patches."
        )
    for patch_id in runtime:
        _install_on_import(patch_id)
    if not runtime and not file_only:
        logger.info("kimi-dflash patches (%s): nothing to do: %s", where, "; ".join(done))
    else:
        installed, kept = ", ".join(runtime) or "none", "; ".join(done) or "none"
        logger.info("kimi-dflash patches (%s): runtime: %s; already done: %s", where, installed, kept)
    for patch_id in file_only:
        logger.warning(
            "kimi-dflash patches: %s is pending and can only be applied to the source files "
            "(needed when %s): run `kimi-dflash patch apply --vllm-root %s`",
            patch_id,
            table.by_id()[patch_id].patch.needed_when,
            table.root,
        )
    _done = True
