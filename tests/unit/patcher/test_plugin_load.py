"""Issue 8, defect 3: preflight checks, in the Python that will run vLLM and in the environment it will get, that
the project's vLLM plugin will load whenever the plan relies on it (FP8 KV scales, runtime patches).

vLLM finds general plugins only through installed entry-point metadata and honours a VLLM_PLUGINS allowlist;
the child probe does the same lookup. The fresh-clone case (src on PYTHONPATH, nothing installed) runs a real
vLLM CPU server in test_plugin_load_server.py.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from kimi_dflash.checkpoint import read_checkpoint
from kimi_dflash.core.checks import Remedy, passed
from kimi_dflash.preflight.request import PreflightRequest
from kimi_dflash.preflight.runtime_child import PLUGIN_GROUP
from kimi_dflash.preflight.runtime_probe import PluginEntry, RuntimeReport
from kimi_dflash.preflight.vllm_check import check_plugin
from kimi_dflash.rules.deployment import Deployment
from kimi_dflash.rules.engine import Verdict
from repo_paths import REPO_ROOT

PLUGIN = PluginEntry(
    "kimi_dflash", "kimi_dflash.vllm_plugin:register", "/repo/src/kimi_dflash/vllm_plugin.py", "kimi-k26-dflash"
)


def runtime(plugins: tuple[PluginEntry, ...] | None, allow: str | None = None) -> RuntimeReport:
    return RuntimeReport(
        python="/venv/bin/python",
        vllm_distribution="vllm",
        vllm_version="0.33.0",
        vllm_import_error=None,
        vllm_source=None,
        features=(),
        plugins=plugins,
        vllm_plugins_env=allow,
    )


def request(kv_scale_mode: str = "off") -> PreflightRequest:
    env = {} if kv_scale_mode == "off" else {"KIMI_DFLASH_KV_SCALE_MODE": kv_scale_mode}
    deployment = Deployment.from_command("rocm", ["vllm", "serve", "/m"], env)
    return PreflightRequest(device="rocm", deployment=deployment)


def verdict(kv_scale_mode: str = "off") -> Verdict:
    """What the rules find (rules/catalog/kv_cache.py): the KV-scale hook relies on the plugin."""
    relies = () if kv_scale_mode == "off" else (Remedy("plugin", f"FP8 KV-scale hook ({kv_scale_mode})"),)
    finding = passed("MLAAttention writes latents through the wrapped method", relies, name="kv scale hook")
    return Verdict(request(kv_scale_mode).deployment, "vllm", "0.33.0", (finding,))  # type: ignore[arg-type]


def test_a_plan_that_needs_the_plugin_fails_when_no_entry_point_is_installed() -> None:
    result = check_plugin(request("dynamic"), runtime(()), verdict("dynamic"))
    assert result.status == "fail"
    assert "no `vllm.general_plugins` entry point named kimi_dflash" in result.detail
    assert "PYTHONPATH" in result.detail and "FP8 KV-scale hook (dynamic)" in result.detail
    assert result.fix is not None and "pip install --no-deps -e" in result.fix


def test_a_vllm_plugins_allowlist_without_kimi_dflash_fails_with_the_fixed_list() -> None:
    result = check_plugin(request("dynamic"), runtime((PLUGIN,), allow="lora_filesystem_resolver"), verdict("dynamic"))
    assert (
        result.status == "fail" and "VLLM_PLUGINS=lora_filesystem_resolver does not list kimi_dflash" in result.detail
    )
    assert result.fix == "add it: VLLM_PLUGINS=lora_filesystem_resolver,kimi_dflash (or unset VLLM_PLUGINS)"
    assert (
        check_plugin(request("dynamic"), runtime((PLUGIN,), allow="x,kimi_dflash"), verdict("dynamic")).status == "pass"
    )


def test_a_plan_that_does_not_need_the_plugin_only_warns() -> None:
    assert check_plugin(request(), runtime(()), verdict()).status == "warn"
    assert check_plugin(request(), runtime((PLUGIN,)), verdict()).status == "pass"


def test_an_unimportable_plugin_module_fails() -> None:
    broken = PluginEntry(
        "kimi_dflash", "kimi_dflash.vllm_plugin:register", "not importable: ModuleNotFoundError", "kimi-k26-dflash"
    )
    assert check_plugin(request("calibrated"), runtime((broken,)), verdict("calibrated")).status == "fail"


def _child_plugins(env: dict[str, str]) -> dict:
    code = (
        "import json, sys; sys.path.insert(0, sys.argv[1]); "
        "from kimi_dflash.preflight.runtime_child import plugin_report; print(json.dumps(plugin_report()))"
    )
    src = str(REPO_ROOT / "src")
    done = subprocess.run(
        [sys.executable, "-c", code, src], capture_output=True, text=True, check=True, env=env, timeout=120
    )
    import json

    return json.loads(done.stdout)


def test_the_child_sees_the_installed_entry_point_and_the_allowlist_of_the_plan_environment() -> None:
    import os

    report = _child_plugins({k: v for k, v in os.environ.items() if k != "VLLM_PLUGINS"})
    if not any(p["name"] == "kimi_dflash" for p in report["plugins"]):
        pytest.skip("this Python has no kimi-k26-dflash install (pip install -e .)")
    entry = next(p for p in report["plugins"] if p["name"] == "kimi_dflash")
    assert entry["value"] == "kimi_dflash.vllm_plugin:register" and entry["origin"].endswith("vllm_plugin.py")
    assert report["vllm_plugins_env"] is None
    limited = _child_plugins({**os.environ, "VLLM_PLUGINS": "lora_filesystem_resolver"})
    assert limited["vllm_plugins_env"] == "lora_filesystem_resolver"


def test_pyproject_registers_the_plugin_under_the_group_vllm_reads() -> None:
    text = (REPO_ROOT / "pyproject.toml").read_text()
    assert f'[project.entry-points."{PLUGIN_GROUP}"]\nkimi_dflash = "kimi_dflash.vllm_plugin:register"' in text


def test_shipped_facts_are_not_used_for_the_fabricated_demo() -> None:
    from kimi_dflash.config.validate import load_config
    from kimi_dflash.launch.prepare import prepare
    from repo_paths import CONFIGS_DIR

    config = load_config(CONFIGS_DIR / "demo-cpu.env", environ={})
    planned = prepare(config, {}, source=lambda _plan: None, say=lambda _: None).deployment
    assert planned.target is None or not planned.target.shipped
    assert read_checkpoint(None, None, "target") == (None, None)
