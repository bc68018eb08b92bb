"""Scales file and observe dumps: writing, merging across ranks, and refusing files for another model."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from kimi_dflash.core.atomic_write import write_json_atomic
from kimi_dflash.fp8.calibrate import (
    CalibrationError,
    max_relative_change,
    summary_lines,
    wait_for_dumps,
)
from kimi_dflash.kvscale import runtime
from kimi_dflash.kvscale.scales_file import (
    KvScalesFileError,
    ModelIdentity,
    check_model_match,
    load_scales_file,
    merge_observations,
    observe_document,
    read_observe_dumps,
    scale_for_layer,
    scales_document,
)
from kimi_dflash.kvscale.settings import KvScaleConfigError

KIMI = ModelIdentity(
    "moonshotai/Kimi-K2.6",
    {
        "model_type": "kimi_k2",
        "num_hidden_layers": 3,
        "hidden_size": 7168,
        "num_attention_heads": 64,
        "kv_lora_rank": 512,
        "qk_rope_head_dim": 64,
    },
)
LAYERS = {
    f"language_model.model.layers.{i}.self_attn.attn": {"amax": 10.0 + i * 5, "tokens": 51000 + i} for i in (0, 1, 2)
}


def write_scales(tmp_path: Path, identity: ModelIdentity = KIMI, layers=None) -> Path:
    document = scales_document(
        identity=identity,
        vllm_version="0.32.0",
        fp8_format="e4m3fn",
        fp8_max=448.0,
        floor=1e-4,
        layers=layers or LAYERS,
        source={"mode": "test"},
        created="now",
    )
    path = tmp_path / "kv_scales.json"
    write_json_atomic(path, document)
    return path


def test_round_trip_and_scale_is_amax_over_fp8_max(tmp_path: Path) -> None:
    path = write_scales(tmp_path)
    scales = load_scales_file(path)
    assert list(scales.layers) == sorted(LAYERS, key=lambda n: int(n.split(".")[3]))
    written = json.loads(path.read_text(encoding="utf-8"))
    for name, entry in LAYERS.items():
        assert scales.layers[name].amax == entry["amax"]
        assert scales.layers[name].scale == entry["amax"] / 448.0
        assert written["layers"][name]["tokens"] == entry["tokens"]
    assert written["scale_range"] == [10.0 / 448.0, 20.0 / 448.0]
    assert [p.name for p in tmp_path.iterdir()] == ["kv_scales.json"]  # no temp file left behind


def test_layers_sort_numerically() -> None:
    layers = {f"model.layers.{i}.attn": {"amax": 1.0, "tokens": 1} for i in (10, 2, 1)}
    document = scales_document(
        identity=KIMI,
        vllm_version="x",
        fp8_format="e4m3fn",
        fp8_max=448.0,
        floor=1e-4,
        layers=layers,
        source={},
        created="now",
    )
    assert list(document["layers"]) == ["model.layers.1.attn", "model.layers.2.attn", "model.layers.10.attn"]


def test_same_model_from_a_local_path_is_accepted(tmp_path: Path) -> None:
    scales = load_scales_file(write_scales(tmp_path))
    check_model_match(scales, ModelIdentity("/models/Kimi-K2.6/", dict(KIMI.fingerprint)))
    check_model_match(scales, ModelIdentity("moonshotai/Kimi-K2.6", None))  # a hub id: the name decides
    assert scale_for_layer(scales, "language_model.model.layers.1.self_attn.attn").amax == 15.0


def test_a_file_for_another_model_is_refused(tmp_path: Path) -> None:
    scales = load_scales_file(write_scales(tmp_path))
    with pytest.raises(KvScalesFileError, match="Kimi-K2.5.*calibrate this model"):
        check_model_match(scales, ModelIdentity("moonshotai/Kimi-K2.5", dict(KIMI.fingerprint)))
    other_arch = dict(KIMI.fingerprint, num_hidden_layers=61)
    with pytest.raises(KvScalesFileError, match="num_hidden_layers: file 3 vs served 61"):
        check_model_match(scales, ModelIdentity("moonshotai/Kimi-K2.6", other_arch))


def test_layer_count_and_names_are_checked(tmp_path: Path) -> None:
    two_layers = dict(list(LAYERS.items())[:2])
    scales = load_scales_file(write_scales(tmp_path, layers=two_layers))  # a partial run of the 3-layer model
    with pytest.raises(KvScalesFileError, match="2 layers, the served model has 3"):
        check_model_match(scales, KIMI)
    scales = load_scales_file(write_scales(tmp_path))
    with pytest.raises(KvScalesFileError, match="no entry for layer 'model.layers.0.self_attn.attn'"):
        scale_for_layer(scales, "model.layers.0.self_attn.attn")


@pytest.mark.parametrize(
    "content, message",
    [
        ("not json", "not readable JSON"),
        (json.dumps({"format": "other"}), "not a kimi-dflash KV scales file"),
        (json.dumps({"format": "kimi-dflash-kv-scales", "version": 99}), "version 99"),
        (json.dumps({"format": "kimi-dflash-kv-scales", "version": 1, "layers": {}}), "lists no layers"),
        (
            json.dumps(
                {
                    "format": "kimi-dflash-kv-scales",
                    "version": 1,
                    "model": "m",
                    "model_fingerprint": {},
                    "layers": {"a": {"amax": 0.0, "scale": 0.0}},
                }
            ),
            "saw no tokens",
        ),
        (
            json.dumps(
                {
                    "format": "kimi-dflash-kv-scales",
                    "version": 1,
                    "model": "m",
                    "model_fingerprint": {},
                    "num_layers": 2,
                    "layers": {"a": {"amax": 1.0, "scale": 0.1}},
                }
            ),
            "edited or truncated",
        ),
    ],
)
def test_malformed_files_are_refused(tmp_path: Path, content: str, message: str) -> None:
    path = tmp_path / "bad.json"
    path.write_text(content, encoding="utf-8")
    with pytest.raises(KvScalesFileError, match=message):
        load_scales_file(path)


def test_missing_file_names_the_fix(tmp_path: Path) -> None:
    with pytest.raises(KvScalesFileError, match="does not exist.*kimi-dflash calibrate-kv"):
        load_scales_file(tmp_path / "nope.json")


def dump(directory: Path, rank: int, layers: dict, updated: float) -> None:
    document = observe_document(
        identity=KIMI, rank=rank, pid=1000 + rank, vllm_version="0.32.0", seq=1, updated=updated, layers=layers
    )
    write_json_atomic(directory / f"kv-observe-rank{rank}-pid{1000 + rank}.json", document)


def test_merge_takes_the_max_over_tensor_parallel_ranks_and_the_union_over_pipeline_stages(tmp_path: Path) -> None:
    now = time.time()
    dump(tmp_path, 0, {"l0": {"amax": 3.0, "tokens": 100}, "l1": {"amax": 9.0, "tokens": 100}}, now)
    dump(tmp_path, 1, {"l0": {"amax": 4.0, "tokens": 100}, "l1": {"amax": 8.0, "tokens": 100}}, now)
    dump(tmp_path, 2, {"l2": {"amax": 1.5, "tokens": 100}}, now)  # a later pipeline stage
    (tmp_path / "kv-observe-rank9-pid9.json").write_text("{half a fi", encoding="utf-8")  # skipped
    (tmp_path / "kv-observe-rank8-pid8.json").write_text("[]", encoding="utf-8")  # JSON, but no dump: skipped
    (tmp_path / "kv-observe-rank7-pid7.json").write_text("3", encoding="utf-8")  # skipped
    merged = merge_observations(read_observe_dumps(tmp_path))
    assert merged == {
        "l0": {"amax": 4.0, "tokens": 100},
        "l1": {"amax": 9.0, "tokens": 100},
        "l2": {"amax": 1.5, "tokens": 100},
    }


def test_wait_for_dumps_ignores_dead_ranks_and_waits_for_fresh_ones(tmp_path: Path) -> None:
    start = time.time()
    dump(tmp_path, 0, {"l0": {"amax": 1.0, "tokens": 1}}, start - 100)  # a process that exited long ago
    dump(tmp_path, 1, {"l0": {"amax": 2.0, "tokens": 1}}, start + 1)
    dumps = wait_for_dumps(tmp_path, newer_than=start, live_since=start, timeout=1, sleep=lambda s: None)
    assert [d["rank"] for d in dumps] == [1]
    with pytest.raises(CalibrationError, match="stopped updating"):
        wait_for_dumps(tmp_path, newer_than=start + 5, live_since=start, timeout=0.05, sleep=lambda s: None)


def test_wait_for_dumps_explains_a_server_not_in_observe_mode(tmp_path: Path) -> None:
    with pytest.raises(CalibrationError, match="KV_SCALE_MODE=observe"):
        wait_for_dumps(tmp_path, newer_than=0, live_since=time.time(), timeout=0.05, sleep=lambda s: None)


def test_relative_change_and_summary(tmp_path: Path) -> None:
    assert max_relative_change({"a": {"amax": 9.0}}, {"a": {"amax": 10.0}}) == pytest.approx(0.1)
    assert max_relative_change({"a": {"amax": 10.0}}, {"a": {"amax": 10.0}}) == 0.0
    document = json.loads(write_scales(tmp_path).read_text())
    document["source"].update(
        {
            "ranks": 8,
            "num_prompts": 200,
            "prompt_tokens": 9000,
            "completion_tokens": 51200,
            "kv_tokens_observed": 60000,
            "amax_growth_in_second_half": 0.01,
        }
    )
    text = "\n".join(summary_lines(document, tmp_path / "kv_scales.json"))
    assert "0.02232 .. 0.04464" in text and "converged" in text and "ranks 8" in text


def test_install_raises_on_bad_settings_and_bad_files(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(runtime, "_state", None)
    monkeypatch.setenv("KIMI_DFLASH_KV_SCALE_MODE", "sometimes")
    with pytest.raises(KvScaleConfigError):
        runtime.install_kv_scale_hook()
    monkeypatch.setenv("KIMI_DFLASH_KV_SCALE_MODE", "calibrated")
    monkeypatch.setenv("KIMI_DFLASH_KV_SCALES_FILE", str(tmp_path / "missing.json"))
    with pytest.raises(KvScalesFileError, match="does not exist"):
        runtime.install_kv_scale_hook()
    monkeypatch.setenv("KIMI_DFLASH_KV_SCALE_MODE", "off")
    runtime.install_kv_scale_hook()  # off: nothing installed, nothing raised
    assert runtime._state is None
