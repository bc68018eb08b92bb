"""Pre-launch checks of the KV-scale settings (for preflight): pure, against files on disk."""

from __future__ import annotations

import json
from pathlib import Path

from kimi_dflash.checkpoint import read_checkpoint
from kimi_dflash.config.validate import load_config
from kimi_dflash.core.atomic_write import write_json_atomic
from kimi_dflash.kvscale.checks import check_kv_scale_config
from kimi_dflash.kvscale.scales_file import (
    ModelIdentity,
    scales_document,
)
from serve_helpers import write

CONFIG = {
    "model_type": "deepseek_v3",
    "num_hidden_layers": 2,
    "hidden_size": 256,
    "num_attention_heads": 4,
    "kv_lora_rank": 512,
    "qk_rope_head_dim": 64,
}


def model_dir(tmp_path: Path, name: str = "Kimi-K2.6", wrap_text_config: bool = True) -> Path:
    directory = tmp_path / name
    directory.mkdir()
    data = {"model_type": "kimi_k25", "text_config": CONFIG} if wrap_text_config else CONFIG
    (directory / "config.json").write_text(json.dumps(data), encoding="utf-8")
    return directory


def fingerprint(directory: Path) -> dict:
    """The target's architecture facts, as serve passes them (kimi_dflash/checkpoint.py reads config.json)."""
    facts, _ = read_checkpoint(directory, None, "target")
    assert facts is not None and facts.fingerprint is not None
    return facts.fingerprint


def scales_file(tmp_path: Path, model: str = "moonshotai/Kimi-K2.6", layers: int = 2) -> Path:
    path = tmp_path / "kv_scales.json"
    write_json_atomic(
        path,
        scales_document(
            identity=ModelIdentity(model, dict(CONFIG)),
            vllm_version="0.32.0",
            fp8_format="e4m3fn",
            fp8_max=448.0,
            floor=1e-4,
            layers={f"model.layers.{i}.self_attn.attn": {"amax": 20.0, "tokens": 5} for i in range(layers)},
            source={},
            created="now",
        ),
    )
    return path


def levels(findings) -> list[str]:
    return [f.status for f in findings]


def test_calibrated_file_for_the_served_model_passes(tmp_path: Path) -> None:
    env = {"KIMI_DFLASH_KV_SCALE_MODE": "calibrated", "KIMI_DFLASH_KV_SCALES_FILE": str(scales_file(tmp_path))}
    directory = model_dir(tmp_path)
    findings = check_kv_scale_config(
        env, model=str(directory), kv_cache_dtype="fp8", fingerprint=fingerprint(directory)
    )
    assert levels(findings) == ["pass"] and "2 layers" in findings[0].detail


def test_calibrated_file_for_another_model_fails(tmp_path: Path) -> None:
    env = {
        "KIMI_DFLASH_KV_SCALE_MODE": "calibrated",
        "KIMI_DFLASH_KV_SCALES_FILE": str(scales_file(tmp_path, model="moonshotai/Kimi-K2.5")),
    }
    directory = model_dir(tmp_path)
    findings = check_kv_scale_config(
        env, model=str(directory), kv_cache_dtype="fp8", fingerprint=fingerprint(directory)
    )
    assert levels(findings) == ["fail"] and "Kimi-K2.5" in findings[0].detail
    # no local config.json (a hub id): the model name alone decides
    findings = check_kv_scale_config(env, model="moonshotai/Kimi-K2.6", kv_cache_dtype="fp8")
    assert levels(findings) == ["fail"]


def test_layer_count_mismatch_fails(tmp_path: Path) -> None:
    env = {
        "KIMI_DFLASH_KV_SCALE_MODE": "calibrated",
        "KIMI_DFLASH_KV_SCALES_FILE": str(scales_file(tmp_path, layers=1)),
    }
    directory = model_dir(tmp_path, wrap_text_config=False)
    findings = check_kv_scale_config(
        env, model=str(directory), kv_cache_dtype="fp8", fingerprint=fingerprint(directory)
    )
    assert levels(findings) == ["fail"] and "1 layers" in findings[0].detail


def test_fp8_without_scales_warns() -> None:
    assert levels(check_kv_scale_config({}, model="m", kv_cache_dtype="fp8")) == ["warn"]
    assert levels(check_kv_scale_config({"KIMI_DFLASH_KV_SCALE_MODE": "dynamic"}, model="m", kv_cache_dtype="fp8")) == [
        "pass"
    ]


def test_bad_settings_fail_with_the_message() -> None:
    findings = check_kv_scale_config({"KIMI_DFLASH_KV_SCALE_FLOOR": "0"}, model="m", kv_cache_dtype="fp8")
    assert levels(findings) == ["fail"] and "KIMI_DFLASH_KV_SCALE_FLOOR" in findings[0].detail


def test_scales_without_fp8_are_warned_once_per_serve(tmp_path: Path) -> None:
    # Config validation warns (with file:line) on every serve; serve's KV-scale check must not say it again.
    config = load_config(
        write(tmp_path, "DEVICE=rocm\nMODEL_DIR=/m/t\nDRAFT_MODEL_DIR=/m/d\nKV_SCALE_MODE=dynamic\n"), environ={}
    )
    assert [(w.key, "no effect" in w.message) for w in config.warnings] == [("KV_SCALE_MODE", True)]
    findings = check_kv_scale_config({"KIMI_DFLASH_KV_SCALE_MODE": "dynamic"}, model="m", kv_cache_dtype="auto")
    assert not [finding for finding in findings if "no effect" in finding.detail]
