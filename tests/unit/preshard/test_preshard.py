"""Pre-sharding (payload/preshard_kimi26.py): manifest, refusal of a mismatched pre-shard, staging, the plan."""

from __future__ import annotations

import json
import struct
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from extras import needs_cpu_extra
from kimi_dflash.config.validate import load_config
from kimi_dflash.core.atomic_write import publish_directory
from kimi_dflash.plan import build_plan
from kimi_dflash.preflight.manifest import (
    MANIFEST_NAME,
    Manifest,
    ManifestError,
    checkpoint_fingerprint,
    mismatches,
    read_manifest,
    write_manifest,
)
from kimi_dflash.preflight.model_dir import check_preshard
from kimi_dflash.preflight.request import PreflightRequest
from kimi_dflash.preshard import cli
from repo_paths import CONFIGS_DIR, REPO_ROOT


def fake_checkpoint(directory: Path, header: dict[str, object], config: str = '{"model_type": "kimi_k25"}') -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "config.json").write_text(config)
    raw = json.dumps(header).encode()
    (directory / "model-00001-of-00001.safetensors").write_bytes(struct.pack("<Q", len(raw)) + raw + b"\0" * 16)
    return directory


def finished_preshard(directory: Path, source: Path, tp: int = 8, version: str = "0.32.0") -> Manifest:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "model-rank-0-part-0.safetensors").write_bytes(b"x" * 10)
    manifest = Manifest(
        source_dir=str(source),
        source_fingerprint=checkpoint_fingerprint(source),
        tensor_parallel_size=tp,
        vllm_distribution="vllm",
        vllm_version=version,
        dtype="bfloat16",
        files={"model-rank-0-part-0.safetensors": 10},
    )
    write_manifest(directory, manifest)
    return manifest


HEADER = {"w": {"dtype": "BF16", "shape": [2, 4], "data_offsets": [0, 16]}}


def test_fingerprint_follows_config_and_tensor_layout_not_location(tmp_path: Path) -> None:
    a = checkpoint_fingerprint(fake_checkpoint(tmp_path / "a", HEADER))
    assert checkpoint_fingerprint(fake_checkpoint(tmp_path / "copy", HEADER)) == a
    other_shape = {"w": {"dtype": "BF16", "shape": [4, 2], "data_offsets": [0, 16]}}
    assert checkpoint_fingerprint(fake_checkpoint(tmp_path / "b", other_shape)) != a
    assert checkpoint_fingerprint(fake_checkpoint(tmp_path / "c", HEADER, '{"model_type": "x"}')) != a
    with pytest.raises(ManifestError, match="no \\*.safetensors"):
        checkpoint_fingerprint(tmp_path)


def test_a_matching_preshard_passes_and_each_mismatch_is_named(tmp_path: Path) -> None:
    source = fake_checkpoint(tmp_path / "model", HEADER)
    out = tmp_path / "tp8"
    manifest = finished_preshard(out, source)
    fits = {"source_dir": source, "tensor_parallel_size": 8, "vllm_version": "0.32.0", "dtype": "auto"}
    assert mismatches(read_manifest(out), out, **fits) == []
    assert "made for TP 8, the plan serves TP 4" in mismatches(manifest, out, **{**fits, "tensor_parallel_size": 4})
    assert any(
        "vLLM 0.32.0, this vLLM is 0.33.0" in p for p in mismatches(manifest, out, **{**fits, "vllm_version": "0.33.0"})
    )
    assert any("DTYPE=float32" in p for p in mismatches(manifest, out, **{**fits, "dtype": "float32"}))
    other = fake_checkpoint(tmp_path / "other", {"v": HEADER["w"]})
    assert any("made from another checkpoint" in p for p in mismatches(manifest, out, **{**fits, "source_dir": other}))
    (out / "model-rank-0-part-0.safetensors").write_bytes(b"x")
    assert any("changed size" in p for p in mismatches(manifest, out, **fits))


def test_preflight_refuses_unfinished_and_mismatched_preshards(tmp_path: Path) -> None:
    source = fake_checkpoint(tmp_path / "model", HEADER)
    request = PreflightRequest(device="rocm", tensor_parallel_size=8, model_dir=source, preshard_dir=tmp_path / "p")
    runtime = type("Runtime", (), {"vllm_version": "0.32.0"})()
    (tmp_path / "p").mkdir()
    unfinished = check_preshard(request, runtime)  # type: ignore[arg-type]
    assert unfinished.status == "fail" and "not a finished pre-shard" in unfinished.detail
    finished_preshard(tmp_path / "p", source)
    assert check_preshard(request, runtime).status == "pass"  # type: ignore[arg-type]
    wrong_tp = check_preshard(replace(request, tensor_parallel_size=4), runtime)  # type: ignore[arg-type]
    assert wrong_tp.status == "fail" and "TP 8" in wrong_tp.detail and "--force" in (wrong_tp.fix or "")
    newer = type("Runtime", (), {"vllm_version": "0.33.0"})()
    assert check_preshard(request, newer).status == "fail"  # type: ignore[arg-type]


def test_staging_resumes_only_the_same_work_and_publishes_atomically(tmp_path: Path) -> None:
    staging = tmp_path / "out.partial"
    key = {"source_fingerprint": "abc", "tensor_parallel_size": 8, "vllm_version": "0.32.0", "dtype": "auto"}
    assert cli._resume(staging, key) == []
    cli._mark(staging, key, [], "copied")
    assert cli._resume(staging, key) == ["copied"]
    (staging / "leftover").write_text("from the first run")
    assert cli._resume(staging, {**key, "tensor_parallel_size": 4}) == []  # another job: started over
    assert not (staging / "leftover").exists()
    with pytest.raises(ManifestError, match="not a finished pre-shard.*; run kimi-dflash preshard CONFIG --output"):
        read_manifest(staging)  # a staging dir is never mistaken for a pre-shard
    (staging / MANIFEST_NAME).write_text("{}")
    with pytest.raises(
        ManifestError, match="unreadable manifest.*; re-run kimi-dflash preshard CONFIG --output .* --force"
    ):
        read_manifest(staging)
    publish_directory(staging, tmp_path / "out")  # what run() does last
    assert (tmp_path / "out" / MANIFEST_NAME).is_file() and not staging.exists()


def test_plan_loads_the_preshard_with_sharded_state_and_keeps_the_drafter_on_the_default_loader() -> None:
    config = load_config(CONFIGS_DIR / "production.env", environ={"PRESHARD_DIR": "/models/Kimi-K2.6-tp8"})
    argv = build_plan(config, python_executable="/usr/bin/python3", cache_dir="/cache").argv
    assert argv[2] == "/models/Kimi-K2.6-tp8"
    assert argv[argv.index("--load-format") + 1] == "sharded_state"
    spec = json.loads(argv[argv.index("--speculative-config") + 1])
    assert spec["draft_load_config"] == {"load_format": "auto"}
    plain = build_plan(load_config(CONFIGS_DIR / "production.env", environ={}), "/usr/bin/python3", "/cache").argv
    assert "--load-format" not in plain and plain[2] == "/models/Kimi-K2.6"


@needs_cpu_extra
def test_preshard_help_teaches_and_bad_output_is_refused(tmp_path: Path) -> None:
    script = str(REPO_ROOT / "payload" / "preshard_kimi26.py")
    env = {"PYTHONPATH": str(REPO_ROOT / "src"), "PATH": "/usr/bin:/bin"}
    help_text = subprocess.run(
        [sys.executable, script, "--help"], capture_output=True, text=True, env=env, check=True
    ).stdout
    for needle in ("sharded_state", "PRESHARD_DIR", ".partial", "--output", "resumes"):
        assert needle in help_text
    (tmp_path / "taken").mkdir()
    (tmp_path / "taken" / "x").write_text("")
    source = fake_checkpoint(tmp_path / "model", HEADER)
    config = tmp_path / "c.env"
    config.write_text(
        f"DEVICE=cpu\nTENSOR_PARALLEL_SIZE=1\nBLOCK_SIZE=32\nMODEL_DIR={source}\nSPECULATIVE_METHOD=none\n"
    )
    refused = subprocess.run(
        [sys.executable, script, str(config), "--output", str(tmp_path / "taken")],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    assert refused.returncode == 1 and "is not a finished pre-shard" in refused.stderr
