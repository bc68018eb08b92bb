"""`python -m kimi_dflash.preflight` and the runtime probe against the real vLLM CPU build in this venv."""

from __future__ import annotations

import re
import shutil
import socket
import subprocess
import sys

import pytest

from kimi_dflash.core import options
from kimi_dflash.patcher.floor import package_dir
from kimi_dflash.preflight import cli as preflight_cli
from kimi_dflash.preflight.runtime_probe import installed_vllm, probe_runtime


def test_help_teaches_the_checks_and_the_feature_grammar(capsys):
    with pytest.raises(SystemExit) as stop:
        options.run(preflight_cli, ["--help"])
    assert stop.value.code == 0
    text = capsys.readouterr().out
    for expected in (
        "numa balancing",
        "/dev/shm",
        "model.safetensors.index.json",
        "speculative_method:<method>",
        "cli:--<flag>",
        "--fix-numa",
        "exit status",
        "kimi-dflash preflight --device cpu",
    ):
        assert expected in text
    assert "python -m" not in text


def test_bad_feature_name_is_a_usage_error_not_a_traceback(capsys):
    with pytest.raises(SystemExit) as stop:
        options.run(preflight_cli, ["--device", "cpu", "--feature", "dflash"])
    assert stop.value.code == 2
    assert "unknown vLLM feature probe 'dflash'; write one of:" in capsys.readouterr().err


def test_runtime_probe_reports_an_interpreter_that_cannot_run():
    report = probe_runtime(("speculative_method:dflash",), python="/nonexistent/bin/python")
    assert report.vllm_import_error == "cannot run /nonexistent/bin/python: No such file or directory"
    assert report.features == () and report.vllm_source is None


@pytest.mark.skipif(package_dir() is None, reason="vLLM is not installed in this Python")
def test_a_starts_probe_leaves_importing_vllm_to_vllm():
    """serve's start (Prepared.preflight(starting=True)) asks for no import on CPU: vLLM imports itself first thing."""
    report = probe_runtime((), imports=())
    assert report.vllm_source == str(package_dir()) and report.vllm_distribution and report.vllm_version
    assert report.vllm_import_error is None and report.torch_version is None and report.plugins is not None


@pytest.mark.skipif(package_dir() is None, reason="vLLM is not installed in this Python")
def test_real_preflight_on_this_machine_with_the_cpu_build(tmp_path):
    """One real run (imports vLLM in a child, ~10 s): the CPU build passes, a made-up feature and a taken port
    fail with their fixes."""
    distribution, version = installed_vllm()
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        taken = listener.getsockname()[1]
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "kimi_dflash.preflight",
                "--device",
                "cpu",
                "--port",
                str(taken),
                "--feature",
                "speculative_method:dflash",
                "--feature",
                "speculative_config.attention_backend",
                "--feature",
                "speculative_method:no_such_method",
            ],
            capture_output=True,
            text=True,
            timeout=600,
            cwd=tmp_path,
            check=False,
        )
    out = done.stdout
    assert done.returncode == 1, out + done.stderr
    build = re.escape(f"{distribution} {version}")
    assert re.search(rf"^\[PASS\] vllm +{build} imports \({re.escape(sys.executable)}\)$", out, re.MULTILINE), out
    assert re.search(
        r"^\[PASS\] vllm feature +2 of 3 the plan uses are present: speculative_method:dflash, "
        r"1 speculative_config field$",
        out,
        re.MULTILINE,
    ), out
    assert re.search(r"^\[FAIL\] vllm feature +speculative_method:no_such_method missing from ", out, re.MULTILINE)
    assert re.search(r"^\[PASS\] accelerators +cpu demo: no accelerators needed \(\d+ usable cores?", out, re.MULTILINE)
    assert re.search(rf"^\[FAIL\] port +127\.0\.0\.1:{taken} is in use", out, re.MULTILINE)
    assert f"ss -ltnp 'sport = :{taken}' names it" in out
    assert out.rstrip().splitlines()[-1].startswith("preflight FAILED: ")


def test_interpreter_for_command_follows_what_will_run(tmp_path):
    from kimi_dflash.preflight.runtime_probe import interpreter_for_command

    script = tmp_path / "vllm"
    script.write_text("#!/opt/rocm-venv/bin/python3.12\nfrom vllm.entrypoints.cli.main import main\nmain()\n")
    script.chmod(0o755)
    env_script = tmp_path / "vllm-env"
    env_script.write_text("#!/usr/bin/env python3\n")
    env_script.chmod(0o755)
    assert interpreter_for_command([str(script), "serve", "/models/x"]) == "/opt/rocm-venv/bin/python3.12"
    assert interpreter_for_command([str(env_script)]) == shutil.which("python3")
    assert interpreter_for_command([sys.executable, "-m", "kimi_dflash.vllm_entry", "serve"]) == sys.executable
    assert interpreter_for_command(["/no/such/vllm", "serve"]) == sys.executable
    assert interpreter_for_command([]) == sys.executable


def test_a_trailing_command_line_adds_its_features_and_interpreter(monkeypatch, tmp_path, capsys):
    from kimi_dflash.core.checks import CheckResult
    from kimi_dflash.preflight import cli

    seen = []
    monkeypatch.setattr(cli, "run_preflight", lambda request: seen.append(request) or [CheckResult("x", "pass", "y")])
    code = options.run(
        cli,
        [
            "--device",
            "rocm",
            "--tensor-parallel-size",
            "8",
            "--feature",
            "env:VLLM_PLUGINS",
            "--",
            sys.executable,
            "-m",
            "vllm.entrypoints.cli.main",
            "serve",
            "/m",
            "--moe-backend",
            "aiter",
        ],
    )
    assert code == 0 and capsys.readouterr().out.startswith("[PASS] x")
    [request] = seen
    assert request.required_features == ("env:VLLM_PLUGINS", "cli:--moe-backend", "moe_backend:aiter")
    assert request.python == sys.executable and request.tensor_parallel_size == 8


def test_the_child_needs_nothing_of_ours_in_the_probed_python(tmp_path, monkeypatch):
    """A bare venv (no vllm, no kimi_dflash): the probe still runs there and reports what is missing."""
    import venv

    venv.EnvBuilder(with_pip=False).create(tmp_path / "bare")
    bare_python = str(tmp_path / "bare" / "bin" / "python")
    monkeypatch.delenv("PYTHONPATH", raising=False)
    report = probe_runtime(("speculative_method:dflash",), python=bare_python)
    assert report.python == bare_python
    assert (report.vllm_distribution, report.vllm_source, report.features) == (None, None, ())
    assert report.vllm_import_error == "ModuleNotFoundError: No module named 'vllm'"
    assert report.torch_error == "ModuleNotFoundError: No module named 'torch'"
