"""A key given in any spelling the tools accept never reaches a file, a log, a dry run or a command line; a key in
a URL's userinfo is never echoed."""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from bench_helpers import run_benchmark
from kimi_dflash.config.problems import ConfigError
from kimi_dflash.config.validate import load_config
from kimi_dflash.core import options
from kimi_dflash.core.redaction import (
    MASK,
    SECRET_OPTIONS,
    has_credentials,
    redact_argv,
    redact_url,
    redact_urls,
    secret_option,
    split_secret,
)
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
    assert redact_urls(f"cannot reach http://user:{SECRET}@host:8000/v1 (refused)") == (
        "cannot reach http://***@host:8000/v1 (refused)"
    )
    assert SECRET not in redact_urls(f"user:{SECRET}@localhost:8000 and 'http://u:{SECRET}@h' or x=//u:{SECRET}@h")
    assert redact_urls("https://host/path@x and mail@example.com") == "https://host/path@x and mail@example.com"


@pytest.mark.parametrize(
    "url, shown",
    [
        ('http://user:pa"ss@host:8000/v1', "http://***@host:8000/v1"),  # a quote in the password
        ("http://user:pa ss@host:8000", "http://***@host:8000"),  # a blank
        ("http://user:pass@@host", "http://***@host"),  # @@
        ("//user:pass@host:8000", "//***@host:8000"),  # scheme-relative
        ("http://user:p@ss@host/v1", "http://***@host/v1"),  # an @ in the password: its tail was shown
        ("http://token@host", "http://***@host"),  # a user name alone is a credential too
        ("user:pass@host:8000", "***@host:8000"),  # no scheme
    ],
)
def test_url_credentials_are_found_as_urllib_reads_the_netloc(url: str, shown: str) -> None:
    assert redact_url(url) == shown and has_credentials(url)
    assert not has_credentials("http://host:8000/v1/x@y") and not has_credentials("mail@example.com")


CREDENTIAL_URLS = ['http://u:xq"zv@127.0.0.1:9', "http://u:xq zv@127.0.0.1:9", "//u:xqzv@127.0.0.1:9"]
CREDENTIAL_URLS += ["http://u:xqzv@@127.0.0.1:9", "http://u:xq@zv@127.0.0.1:9"]


URL_OPTIONS = [("bench.cli", "--base-url"), ("bench.cli", "--metrics-url"), ("drafter_training.cli", "--base-url")]
URL_OPTIONS += [("validate.cli", "--reference"), ("fp8.validate", "--bf16-url")]


@pytest.mark.parametrize("url", CREDENTIAL_URLS)
@pytest.mark.parametrize(("verb", "flag"), URL_OPTIONS)
def test_every_url_option_refuses_credentials_without_echoing_them(verb: str, flag: str, url: str, capsys) -> None:
    # Each was taken by the benchmark (it ran, and stored the URL in its result three times); the other verbs took any.
    with pytest.raises(SystemExit) as exited:
        options.parse(f"kimi_dflash.{verb}", [flag, url], prog=verb)
    err = capsys.readouterr().err
    assert exited.value.code == 2 and f"{flag}: '" in err and "carries credentials" in err and "***@127.0.0.1:9" in err
    assert "xq" not in err and "zv" not in err


def test_bench_refuses_a_metrics_url_that_is_no_url(capsys) -> None:
    with pytest.raises(SystemExit) as exited:
        options.parse("kimi_dflash.bench.cli", ["--metrics-url", "nan"], prog="bench")
    assert exited.value.code == 2 and "--metrics-url: 'nan' is not a URL" in capsys.readouterr().err
    assert options.parse("kimi_dflash.bench.cli", ["--metrics-url", "none"], prog="bench").metrics_url == "none"


def test_every_value_of_a_secret_option_is_masked() -> None:
    # vLLM's --api-key takes several keys: the second one was shown (core/options: a repeated one, tested there).
    shown = redact_argv(["serve", "--api-key", "k-one", "k-two", "--hf-token", "--max-num-seqs", "4"])
    assert shown == ["serve", "--api-key", MASK, MASK, "--hf-token", "--max-num-seqs", "4"]


def _refusal(extra: str) -> str:
    with pytest.raises(ConfigError) as refused:
        load_config(CONFIGS_DIR / "demo-cpu.env", environ={"EXTRA_VLLM_ARGS": extra})
    return str(refused.value)


@pytest.mark.parametrize(
    "extra, fix",
    [
        (f"--hf-token {SECRET}", "export HF_TOKEN"),
        (f"--max-num-seqs 4 --hf_token={SECRET}", "export HF_TOKEN"),
        (f"--hf-t {SECRET}", "export HF_TOKEN"),
        ("--watermark-config '{\"key\": 12345678}'", "--config FILE.yaml"),
        ("--watermark-config.key 12345678", "--config FILE.yaml"),
        (f"--api-key k-first {SECRET}", "set API_KEY"),  # vLLM's --api-key takes several keys
    ],
)
def test_every_secret_option_of_vllm_is_refused_in_extra_vllm_args(extra: str, fix: str) -> None:
    # --hf-token was taken: it showed in --dry-run, on vLLM's argv, in the stop hint and every stored config.
    message = _refusal(extra)
    assert "EXTRA_VLLM_ARGS" in message and "carries a secret" in message and fix in message
    assert SECRET not in message and "12345678" not in message and "k-first" not in message


def test_the_secret_options_are_vllms_own_and_each_has_its_fix() -> None:
    from kimi_dflash.config.rules import SECRET_FIXES

    assert set(SECRET_FIXES) == set(SECRET_OPTIONS)
    vllm = importlib.util.find_spec("vllm")  # read, not imported: the fields vLLM's own log masks
    if vllm is not None and vllm.submodule_search_locations:
        source = Path(vllm.submodule_search_locations[0], "entrypoints", "serve", "utils", "api_utils.py").read_text()
        fields = re.search(r"_SENSITIVE_ARG_FIELDS = frozenset\(\{([^}]*)\}\)", source)[1]  # type: ignore[index]
        assert {"--" + name.strip(' "').replace("_", "-") for name in fields.split(",")} == set(SECRET_OPTIONS)
    # --watermark (a float of its own) is not an abbreviation of --watermark-config: argparse takes it exactly.
    assert secret_option("--watermark") is None and secret_option("--watermark-c") == "--watermark-config"
    assert load_config(CONFIGS_DIR / "demo-cpu.env", environ={"EXTRA_VLLM_ARGS": "--watermark 0.01"})


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


def test_credentials_in_extra_vllm_args_are_masked_wherever_config_values_are_kept(tmp_path: Path, monkeypatch) -> None:
    # Stored as given: in qualify's environment.json and state.json, every benchmark result's server config and the
    # stop hint; --dry-run showed the password's tail after an @.
    from kimi_dflash.launch.cli import stop_command
    from kimi_dflash.qualify import cli as qualify_cli
    from kimi_dflash.qualify.environment import capture
    from kimi_dflash.sweep.points import _config_values as point_values

    extra = "--otlp-traces-endpoint http://user:xqpw@zvpw@collector:4317"
    environ = {"EXTRA_VLLM_ARGS": extra, "API_KEY": SECRET}
    config = CONFIGS_DIR / "demo-cpu.env"
    monkeypatch.setenv("EXTRA_VLLM_ARGS", extra)
    values, overrides, _ = qualify_cli._config_values(config)  # overrides: the signature in state.json
    kept = [
        run_serve(str(config), "--dry-run", env=environ).stdout,
        stop_command(load_config(config, environ=environ), str(config), environ),
        json.dumps(overrides),
        json.dumps(capture(str(config), values, overrides, {}, None).to_json()),
        json.dumps(point_values(config, environ)),  # a sweep point's result: server_config.values
    ]
    for text in kept:
        assert "http://***@collector:4317" in text and "xqpw" not in text and "zvpw" not in text and SECRET not in text


def test_the_mask_is_declared_once() -> None:
    # It was declared five times, two ways ("***", "<redacted>"): --dry-run and environment.json masked differently.
    literal = re.compile(r"""["'](\*\*\*|<redacted>)["']""")
    declared = [
        p.relative_to(REPO_ROOT).as_posix() for p in (REPO_ROOT / "src").rglob("*.py") if literal.search(p.read_text())
    ]
    assert declared == ["src/kimi_dflash/core/redaction.py"]
