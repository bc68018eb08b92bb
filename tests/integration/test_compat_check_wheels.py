"""The compatibility check (serve.sh --check-vllm, preflight's compat lines) against the vLLM CPU build installed
here - real vLLM source, read in place - and the checkpoint facts it reads. Every other release is in
test_compat_versions.py (slow: wheels from the package index)."""

from __future__ import annotations

from pathlib import Path

import pytest

from compat_fixtures import INT4_KIMI, checkpoint, cpu_command, needs_vllm


@needs_vllm
@pytest.mark.slow  # imports vLLM in a child process (10-30 s on 2 cores)
def test_preflight_runs_the_same_rules_on_the_installed_vllm_before_anything_loads(tmp_path: Path) -> None:
    import subprocess
    import sys

    from server_fixtures import free_port

    model = checkpoint(tmp_path, INT4_KIMI)
    command = [sys.executable, *cpu_command(model, "--moe-backend", "aiter")[1:]]  # the Python that has vLLM
    done = subprocess.run(
        [sys.executable, "-m", "kimi_dflash.preflight", "--device", "cpu", "--port", str(free_port()), "--", *command],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 1, done.stdout + done.stderr
    assert "[FAIL] vllm compat: moe backend" in done.stdout
    assert "is not supported for WNA16 MoE" in done.stdout
