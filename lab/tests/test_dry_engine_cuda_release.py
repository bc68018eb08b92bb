"""The dry engine with vLLM 0.26.0's CUDA wheel (a venv of its own: `python -m kimi_dflash_lab dry-engine-venv
0.26.0`) on the GPU configs, as committed in benchmarks/results/dry-engine-cuda-0.26.0/ by
`python -m kimi_dflash_lab dry-engine-release 0.26.0 --out ...` (lab/kimi_dflash_lab/dry_engine/release_run.py).

Fast: the committed output says what vLLM 0.26 starts on a simulated Hopper GPU, and it was made from today's
configs (each case's plan is rebuilt and compared). The platform plugin the child registers is visible to
importlib.metadata. Slow, when the venv exists: the run again, same picks.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from kimi_dflash.core.paths import cache_root
from kimi_dflash_lab import LAB_ROOT
from kimi_dflash_lab.dry_engine import child
from kimi_dflash_lab.dry_engine.release_run import CASES, PICKED_KEYS, case_plan, run
from kimi_dflash_lab.dry_engine.venv import venv_python
from repo_paths import REPO_ROOT

RESULTS = REPO_ROOT / "benchmarks" / "results" / "dry-engine-cuda-0.26.0"
VERSION = "0.26.0"


def summary() -> dict:
    return json.loads((RESULTS / "summary.json").read_text(encoding="utf-8"))


def test_the_committed_run_covers_every_case_with_vllm_0_26_on_a_simulated_hopper_gpu() -> None:
    found = summary()
    assert found["vllm"] == VERSION and found["torch"] == "2.11.0"
    assert set(found["cases"]) == set(CASES)
    for name, case in found["cases"].items():
        report = json.loads((RESULTS / f"{name}.json").read_text(encoding="utf-8"))
        assert report["vllm_version"] == VERSION and report["platform"] == "NonNvmlCudaPlatform"
        assert report["host_platform"] == "none"  # no real platform: every fake is listed
        assert any(f"NVIDIA {CASES[name].gpu} (simulated)" in fake for fake in report["simulated"])
        assert {key: report.get(key) for key in PICKED_KEYS if key in report} == {
            key: case[key] for key in PICKED_KEYS if key in case
        }


def test_vllm_0_26_starts_demo_gpu_with_the_backends_the_recipe_expects_on_hopper() -> None:
    demo = summary()["cases"]["demo-gpu"]
    assert demo["starts"] and demo["error"] is None
    assert demo["target_attention"] == "FLASH_ATTN_MLA"  # BF16 KV decode
    assert demo["mla_prefill"] == "FLASH_ATTN"  # FA3 on sm_90
    assert demo["drafter_attention"] == "FLASH_ATTN"  # the DFlash drafter (non-causal, head 96)
    assert demo["moe_method"].startswith("CompressedTensorsWNA16MarlinMoEMethod [MARLIN]")
    assert demo["runner"] == "V1" and demo["cudagraph_mode"] == "NONE" and demo["speculative"]["k"] == 2
    graphs = summary()["cases"]["demo-gpu-graphs"]
    assert graphs["starts"] and graphs["cudagraph_mode"] == "FULL_AND_PIECEWISE"  # what qualify's candidate asks


def test_fp8_kv_needs_flashmla_and_its_blocks_of_64() -> None:
    cases = summary()["cases"]
    assert cases["demo-gpu-fp8kv"]["starts"] and cases["demo-gpu-fp8kv"]["target_attention"] == "FLASHMLA"
    assert cases["demo-gpu-fp8kv"]["kv_cache_dtype"] == "fp8"
    # Blocks of 16: vLLM starts, silently on TRITON_MLA (one decode token per step: a verify goes to prefill).
    block16 = cases["demo-gpu-fp8kv-block16"]
    assert block16["starts"] and block16["target_attention"] == "TRITON_MLA"


def test_the_cpu_miniatures_mla_dims_have_no_prefill_backend_on_hopper() -> None:
    refused = summary()["cases"]["demo-gpu-cpu-miniature"]
    assert not refused["starts"]
    assert "No valid MLA prefill backend" in refused["error"] and "qk_nope_head_dim=64" in refused["error"]


def test_h200_starts_on_0_26_with_marlin_for_kimis_int4_experts() -> None:
    h200 = summary()["cases"]["h200"]
    assert h200["starts"] and h200["target_attention"] == "FLASH_ATTN_MLA" and h200["runner"] == "V1"
    assert h200["moe_method"] == "CompressedTensorsWNA16MarlinMoEMethod [MARLIN] x60"


def _sanitized(argv: list[str]) -> list[str]:
    return [arg.replace(str(cache_root()), "<cache>").replace(str(LAB_ROOT.parent), "<checkout>") for arg in argv]


def test_the_committed_run_judged_todays_configs() -> None:
    """Each case's plan, rebuilt from today's configs, is the plan the committed run judged: a config change
    makes this fail until the run is redone (python -m kimi_dflash_lab dry-engine-release 0.26.0 --out ...)."""
    cases = summary()["cases"]
    for name, case in CASES.items():
        _, plan, overrides = case_plan(case)
        assert overrides == cases[name]["overrides"], name
        assert _sanitized(list(plan.argv)) == cases[name]["argv"], (
            f"{name}: configs changed since benchmarks/results/dry-engine-cuda-0.26.0 was made; rerun "
            "python -m kimi_dflash_lab dry-engine-release 0.26.0 --out benchmarks/results/dry-engine-cuda-0.26.0"
        )


def test_the_platform_plugin_is_an_entry_point_importlib_metadata_finds(tmp_path: Path) -> None:
    """An entry point needs installed metadata: the child's throw-away *.dist-info on sys.path is enough."""
    request = {"fakes": "/nowhere/platform_fakes.py", "device": "cuda", "cuda_gpu": "H100"}
    script = (
        "import importlib.metadata, json, sys; "
        f"sys.path.insert(0, {str(LAB_ROOT)!r}); "
        "from kimi_dflash_lab.dry_engine import child; "
        f"child.install_platform_plugin(json.loads({json.dumps(request)!r}), sys.argv[1]); "
        "print([(e.name, e.value) for e in importlib.metadata.entry_points(group='vllm.platform_plugins')])"
    )
    env = {k: v for k, v in os.environ.items() if k != "VLLM_PLUGINS"}
    found = subprocess.run(
        [sys.executable, "-c", script, str(tmp_path)], capture_output=True, text=True, check=True, env=env
    )
    assert f"('{child.PLUGIN_NAME}', '{child.PLUGIN_MODULE}:plugin')" in found.stdout
    source = (tmp_path / f"{child.PLUGIN_MODULE}.py").read_text()
    assert "'cuda'" in source and "'H100'" in source


@pytest.mark.slow
@pytest.mark.skipif(venv_python(VERSION) is None, reason=f"no dry-engine venv for vLLM {VERSION} (dry-engine-venv)")
def test_the_dry_engine_on_vllm_0_26_says_today_what_was_committed(tmp_path: Path) -> None:
    fresh = run(VERSION, tmp_path)
    committed = summary()
    for name, case in committed["cases"].items():
        picked = {key: case.get(key) for key in (*PICKED_KEYS, "starts", "error")}
        assert {key: fresh["cases"][name].get(key) for key in picked} == picked, name
