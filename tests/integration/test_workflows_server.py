"""validate on the real CPU demo: DFlash vs autoregressive passes (lossless); another model fails with the first
divergence shown. Uses the session demo servers; the other model (tiny Qwen3 demo) is one extra server (~30-60 s).
A bfloat16 candidate cannot show the FAIL here: the demo's logit margins are so wide that its bf16 output is
token-identical to float32 (measured: 16 prompts x 128 tokens)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from repo_paths import REPO_ROOT

ROOT = REPO_ROOT
SMALL = ["--prompts", "4", "--max-tokens", "32", "--math-problems", "4", "--math-max-tokens", "32"]


def _validate(reference: str, candidate: str, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(ROOT / "payload" / "validate.py"), "--reference", reference,
                           "--candidate", candidate, *SMALL, *extra],
                          capture_output=True, text=True, timeout=600, check=False)  # fmt: skip


@pytest.mark.server
def test_dflash_is_lossless_through_validate(demo_server, baseline_demo_server) -> None:  # type: ignore[no-untyped-def]
    result = _validate(baseline_demo_server.base_url, demo_server.base_url)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "4/4 outputs token-identical" in result.stdout
    assert "divergence  none" in result.stdout and "verdict     PASS" in result.stdout
    assert f"candidate   {demo_server.model}" in result.stdout


@pytest.mark.server
def test_another_model_fails_with_the_first_divergence(baseline_demo_server, demo_server_factory) -> None:  # type: ignore[no-untyped-def]
    other = demo_server_factory("demo-qwen3-cpu.env")  # the tiny Qwen3 demo: another model, another tokenizer
    try:
        result = _validate(baseline_demo_server.base_url, other.base_url)
    finally:
        demo_server_factory.stop(other)
    assert result.returncode == 2, result.stdout + result.stderr
    assert "verdict     FAIL" in result.stdout and "0/4 outputs token-identical" in result.stdout
    assert "divergence  first in prompt 0" in result.stdout
    # the divergence is shown as text on both sides (each decoded by its own server), with the token ids
    assert "  reference '" in result.stdout and "  candidate '" in result.stdout and "ids [" in result.stdout
