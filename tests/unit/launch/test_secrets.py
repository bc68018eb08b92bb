"""A key given in any spelling the tools accept never reaches a file, a log, a dry run or a command line; a key in
a URL's userinfo is never echoed."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from bench_helpers import run_benchmark
from kimi_dflash.core.redaction import redact_argv, redact_url, secret_option, split_secret
from repo_paths import CONFIGS_DIR, REPO_ROOT
from serve_helpers import run_serve
from synthetic_server import running

SECRET = "sk-secret-0123456789"


@pytest.mark.parametrize(
    "argv",
    [
        ["--api-key", SECRET],
        ["--api-key=" + SECRET],
        ["--api", SECRET],
        ["--api-k=" + SECRET],
        ["--a", SECRET],
        ["--api_key", SECRET],  # vLLM's parser reads underscores as dashes
        ["--api_key=" + SECRET],
        ["--api_k", SECRET],
        ["--api-key.x", SECRET],  # vLLM turns a dotted sub-key into a JSON value of --api-key
    ],
)
def test_every_spelling_is_redacted(argv: list[str]) -> None:
    shown = redact_argv(["bench", *argv, "--sessions", "2"])
    assert SECRET not in " ".join(shown) and shown[-2:] == ["--sessions", "2"]
    assert split_secret(argv) == ([], SECRET)


def test_only_prefixes_of_the_secret_option_count() -> None:
    assert secret_option("--api-key") == "--api-key"
    assert secret_option("--async-scheduling") is None and secret_option("--max-tokens") is None
    assert secret_option("-a") is None and secret_option("--") is None
    assert secret_option("--api_key_file") is None and secret_option("--max_num_seqs=4") is None


def test_url_userinfo_is_redacted_everywhere_in_a_message() -> None:
    assert redact_url(f"cannot reach http://user:{SECRET}@host:8000/v1 (refused)") == (
        "cannot reach http://***@host:8000/v1 (refused)"
    )
    assert SECRET not in redact_url(f"user:{SECRET}@localhost:8000")
    assert redact_url("https://host/path@x and mail@example.com") == "https://host/path@x and mail@example.com"


@pytest.mark.parametrize("spelling", [["--api", SECRET], ["--api-k=" + SECRET]])
def test_benchmark_refuses_abbreviations(tmp_path: Path, spelling: list[str]) -> None:
    proc = run_benchmark("--base-url", "http://127.0.0.1:9", "--output", str(tmp_path / "r.json"), *spelling,
                         timeout=60)  # fmt: skip
    assert proc.returncode == 2 and "unrecognized arguments" in proc.stderr
    assert SECRET not in proc.stderr + proc.stdout
    assert not (tmp_path / "r.json").exists()


def test_benchmark_refuses_credentials_in_urls_without_echoing_them(tmp_path: Path) -> None:
    for flag in ("--base-url", "--metrics-url"):
        url = f"http://user:{SECRET}@127.0.0.1:9"
        args = [flag, url] if flag == "--base-url" else ["--base-url", "http://127.0.0.1:9", flag, url]
        proc = run_benchmark(*args, "--output", str(tmp_path / "r.json"), timeout=60)
        assert proc.returncode == 2 and "carries credentials" in proc.stderr and "***@" in proc.stderr
        assert SECRET not in proc.stderr + proc.stdout


def test_serve_refuses_a_key_in_extra_vllm_args(tmp_path: Path) -> None:
    for extra in (f"--api-key {SECRET}", f"--api-key={SECRET}", f"--max-num-seqs 4 --api {SECRET}",
                  f"--api_key {SECRET}", f"--max_num_seqs 4 --api_key={SECRET}", f"--api-key.x {SECRET}"):  # fmt: skip
        result = run_serve(str(CONFIGS_DIR / "demo-cpu.env"), "--dry-run", env={"EXTRA_VLLM_ARGS": extra})
        assert result.returncode == 2, result.stderr
        assert "EXTRA_VLLM_ARGS" in result.stderr and "set API_KEY" in result.stderr
        assert SECRET not in result.stdout + result.stderr


def test_sweep_never_stores_or_prints_the_key(tmp_path: Path) -> None:
    out = tmp_path / "sweep"
    command = [sys.executable, "-m", "kimi_dflash.sweep", str(CONFIGS_DIR / "demo-cpu.env"), "--grid",
               "NUM_SPECULATIVE_TOKENS=0,2", "--sessions", "1", "--out", str(out), "--max-tokens", "8"]  # fmt: skip
    for spelling in (["--api-key", SECRET], ["--api-key=" + SECRET]):
        dry = subprocess.run([*command, *spelling, "--dry-run"], capture_output=True, text=True, timeout=120,
                             cwd=REPO_ROOT)  # fmt: skip
        assert dry.returncode == 0, dry.stderr
        assert SECRET not in dry.stdout + dry.stderr and "API key: given (not shown)" in dry.stdout
    abbreviated = subprocess.run([*command, "--api", SECRET, "--dry-run"], capture_output=True, text=True,
                                 timeout=120, cwd=REPO_ROOT)  # fmt: skip
    # an abbreviation is taken for the key too (passed on through the environment), and never shown
    assert SECRET not in abbreviated.stdout + abbreviated.stderr


def test_sweep_signature_holds_no_key() -> None:
    from kimi_dflash.sweep import cli as sweep_cli

    kept, key = split_secret(["--max-tokens", "8", "--api-key", SECRET])
    assert key == SECRET and sweep_cli._bench_args(kept) == ["--max-tokens", "8"]
    assert SECRET not in json.dumps({"benchmark_options": kept})


def test_benchmark_key_never_stored(tmp_path: Path) -> None:
    out = tmp_path / "ok.json"
    with running(["--ttft-ms", "5", "--chunk-interval-ms", "1", "--api-key", SECRET]) as url:
        proc = run_benchmark("--base-url", url, "--output", str(out), "--sessions", "1", "--turns-per-session", "1",
                             "--max-tokens", "4", "--warmup", "0", f"--api-key={SECRET}", timeout=60)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert SECRET not in out.read_text() + proc.stdout + proc.stderr
