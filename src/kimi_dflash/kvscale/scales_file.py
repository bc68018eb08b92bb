"""The observe dumps and the scales file, and their checks. A scales file stores the *amax* per layer, so one
calibration serves every FP8 format (E4M3FN's 448, gfx942's E4M3FNUZ's 240)."""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kimi_dflash.kvscale.fp8 import E4M3FN, E4M3FNUZ

SCALES_FORMAT = "kimi-dflash-kv-scales"
OBSERVE_FORMAT = "kimi-dflash-kv-observe"
FORMAT_VERSION = 1
OBSERVE_GLOB = "kv-observe-*.json"

# Architecture facts that must agree between the calibrated model and the served one.
FINGERPRINT_KEYS = (
    "model_type",
    "num_hidden_layers",
    "hidden_size",
    "num_attention_heads",
    "kv_lora_rank",
    "qk_rope_head_dim",
)


class KvScalesFileError(ValueError):
    """The scales file is unreadable, malformed, or made for a different model; says how to fix it."""


@dataclass(frozen=True)
class ModelIdentity:
    model: str  # what vLLM was asked to serve (hub id or local path)
    fingerprint: dict[str, Any] | None  # None: unknown (a hub id without a local config.json): the name decides


@dataclass(frozen=True)
class LayerScale:
    amax: float
    scale: float


@dataclass(frozen=True)
class ScalesFile:
    path: Path
    model: ModelIdentity
    layers: dict[str, LayerScale]
    fp8_format: str


def model_basename(model: str) -> str:
    """'moonshotai/Kimi-K2.6' and '/models/Kimi-K2.6/' both name 'Kimi-K2.6'."""
    return Path(model.rstrip("/")).name or model


def fingerprint_from_hf_config(hf_config: Any) -> dict[str, Any]:
    """The architecture facts of an HF config, an object or config.json's dict (text config of a multimodal wrapper)."""
    if isinstance(hf_config, Mapping):
        text = hf_config.get("text_config")
        return {key: (text if isinstance(text, Mapping) else hf_config).get(key) for key in FINGERPRINT_KEYS}
    text = hf_config.get_text_config() if hasattr(hf_config, "get_text_config") else hf_config
    return {key: getattr(text, key, None) for key in FINGERPRINT_KEYS}


def observe_document(
    identity: ModelIdentity, rank: int, pid: int, vllm_version: str, seq: int, updated: float, layers: Mapping[str, Any]
) -> dict[str, Any]:
    return {
        "format": OBSERVE_FORMAT,
        "version": FORMAT_VERSION,
        "model": identity.model,
        "model_fingerprint": identity.fingerprint,
        "vllm_version": vllm_version,
        "rank": rank,
        "pid": pid,
        "seq": seq,
        "updated": updated,
        "layers": {name: dict(values) for name, values in layers.items()},
    }


def read_observe_dumps(directory: Path) -> list[dict[str, Any]]:
    """Every well-formed observe dump in ``directory`` (files being replaced are simply skipped)."""
    dumps = []
    for path in sorted(Path(directory).glob(OBSERVE_GLOB)):
        try:
            document = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError):
            continue
        if (
            isinstance(document, dict)  # `[]` or a bare number is no dump either
            and document.get("format") == OBSERVE_FORMAT
            and document.get("version") == FORMAT_VERSION
        ):
            document["_path"] = str(path)
            dumps.append(document)
    return dumps


def merge_observations(dumps: Iterable[Mapping[str, Any]]) -> dict[str, dict[str, float | int]]:
    """Per layer: amax and tokens = max over ranks (TP ranks hold the same latent; PP stages, disjoint layers)."""
    merged: dict[str, dict[str, float | int]] = {}
    for dump in dumps:
        for name, values in dump.get("layers", {}).items():
            entry = merged.setdefault(name, {"amax": 0.0, "tokens": 0})
            entry["amax"] = max(float(entry["amax"]), float(values["amax"]))
            entry["tokens"] = max(int(entry["tokens"]), int(values["tokens"]))
            if "q_amax" in values:  # the decode query (observe dumps from this version on)
                entry["q_amax"] = max(float(entry.get("q_amax", 0.0)), float(values["q_amax"]))
    return merged


def scales_document(
    *,
    identity: ModelIdentity,
    vllm_version: str,
    fp8_format: str,
    fp8_max: float,
    floor: float,
    layers: Mapping[str, Mapping[str, float | int]],
    source: Mapping[str, Any],
    created: str,
) -> dict[str, Any]:
    """The scales JSON: per-layer amax, scale (for ``fp8_format``), tokens, plus provenance."""
    layer_entries: dict[str, dict[str, float | int]] = {}
    # 'model.layers.10...' after 'model.layers.9...'
    for name in sorted(layers, key=lambda name: tuple(int(p) if p.isdigit() else p for p in name.split("."))):
        amax = float(layers[name]["amax"])
        layer_entries[name] = {"amax": amax, "scale": max(amax / fp8_max, floor), "tokens": int(layers[name]["tokens"])}
        if "q_amax" in layers[name]:
            layer_entries[name]["q_amax"] = float(layers[name]["q_amax"])
    scales = [entry["scale"] for entry in layer_entries.values()]
    return {
        "format": SCALES_FORMAT,
        "version": FORMAT_VERSION,
        "model": identity.model,
        "model_fingerprint": identity.fingerprint,
        "vllm_version": vllm_version,
        "kv_cache_dtype": "fp8",
        "fp8_format": fp8_format,
        "fp8_max": fp8_max,
        "floor": floor,
        "created": created,
        "source": dict(source),
        "num_layers": len(layer_entries),
        "scale_range": [min(scales), max(scales)] if scales else None,
        "decode_query": decode_query_summary(layer_entries),
        "layers": layer_entries,
    }


# The FP8 formats a decode query can be quantised to (E4M3FN on MI325/MI355 and NVIDIA, E4M3FNUZ on gfx942).
QUERY_FP8_MAX = {f.name: f.max_value for f in (E4M3FN, E4M3FNUZ)}


def decode_query_summary(layers: Mapping[str, Mapping[str, float | int]]) -> dict[str, Any] | None:
    """What the decode-query amax means at q_scale 1.0 (above the FP8 maximum it saturates); None without stats."""
    q_amax = [float(entry["q_amax"]) for entry in layers.values() if "q_amax" in entry]
    if not q_amax:
        return None
    top = max(q_amax)
    return {
        "amax_range": [min(q_amax), top],
        "q_scale_in_vllm": 1.0,
        "clips_at_q_scale_1": {name: top > fp8_max for name, fp8_max in QUERY_FP8_MAX.items()},
        "layers_clipping_e4m3fnuz": sum(1 for v in q_amax if v > QUERY_FP8_MAX["e4m3fnuz"]),
    }


def _positive_finite(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value > 0


def load_scales_file(path: Path) -> ScalesFile:
    """Read and check a scales file's shape; raise KvScalesFileError naming the problem and the fix."""
    path = Path(path)
    fix = "re-run kimi-dflash calibrate-kv to produce it"
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise KvScalesFileError(f"KV scales file {path} does not exist; {fix}, or set KV_SCALES_FILE") from None
    except (OSError, json.JSONDecodeError) as error:
        raise KvScalesFileError(f"KV scales file {path} is not readable JSON ({error}); {fix}") from None
    if not isinstance(document, dict) or document.get("format") != SCALES_FORMAT:
        raise KvScalesFileError(f"{path} is not a kimi-dflash KV scales file (format != {SCALES_FORMAT!r}); {fix}")
    if document.get("version") != FORMAT_VERSION:
        raise KvScalesFileError(f"{path} has format version {document.get('version')!r}, not {FORMAT_VERSION}; {fix}")
    layers_raw = document.get("layers")
    if not isinstance(layers_raw, dict) or not layers_raw:
        raise KvScalesFileError(f"{path} lists no layers; {fix}")
    layers = {}
    for name, entry in layers_raw.items():
        if not isinstance(entry, dict) or not all(_positive_finite(entry.get(key)) for key in ("amax", "scale")):
            why = f"has no positive finite amax/scale ({entry!r}) - the calibration saw no tokens for it"
            raise KvScalesFileError(f"{path}: layer {name!r} {why}; {fix} with more prompts")
        layers[name] = LayerScale(amax=float(entry["amax"]), scale=float(entry["scale"]))
    if document.get("num_layers", len(layers)) != len(layers):
        listed = f"num_layers={document.get('num_layers')} but {len(layers)} layers are listed"
        raise KvScalesFileError(f"{path}: {listed}; the file was edited or truncated; {fix}")
    fingerprint = document.get("model_fingerprint")
    if not isinstance(document.get("model"), str) or not isinstance(fingerprint, dict):
        raise KvScalesFileError(f"{path} does not say which model it was calibrated on; {fix}")
    model = ModelIdentity(document["model"], fingerprint)
    return ScalesFile(path=path, model=model, layers=layers, fp8_format=str(document.get("fp8_format", "")))


def check_model_match(scales: ScalesFile, served: ModelIdentity) -> None:
    """Refuse a file calibrated on another model (by name or by architecture) or for another set of MLA layers."""
    fix = (
        f"calibrate this model with kimi-dflash calibrate-kv, or point KV_SCALES_FILE at the file "
        f"made for {served.model!r}"
    )
    facts, file_facts = served.fingerprint, scales.model.fingerprint or {}
    if facts is not None:
        mismatched = {
            key: (file_facts.get(key), facts.get(key))
            for key in FINGERPRINT_KEYS
            if file_facts.get(key) != facts.get(key)
        }
        if mismatched:
            details = ", ".join(f"{key}: file {a!r} vs served {b!r}" for key, (a, b) in mismatched.items())
            other = f"was calibrated on {scales.model.model!r}, another architecture than the served {served.model!r}"
            raise KvScalesFileError(f"KV scales file {scales.path} {other} ({details}); {fix}")
    if model_basename(scales.model.model) != model_basename(served.model):
        other = f"was calibrated on {scales.model.model!r}, but this server runs {served.model!r}"
        raise KvScalesFileError(f"KV scales file {scales.path} {other}; {fix}")
    layers = None if facts is None else int(facts.get("num_hidden_layers") or 0)
    if layers is not None and len(scales.layers) != layers:
        counts = f"{len(scales.layers)} layers, the served model has {layers} MLA layers"
        why = "it was calibrated on a different model or a partial run - re-run kimi-dflash calibrate-kv"
        raise KvScalesFileError(f"KV scales file {scales.path} has {counts}; {why}")


def scale_for_layer(scales: ScalesFile, layer_name: str) -> LayerScale:
    try:
        return scales.layers[layer_name]
    except KeyError:
        sample = ", ".join(list(scales.layers)[:3])
        why = "it was calibrated on another model or vLLM layer naming - re-run kimi-dflash calibrate-kv on this server"
        missing = f"KV scales file {scales.path} has no entry for layer {layer_name!r} (it lists e.g. {sample})"
        raise KvScalesFileError(f"{missing}; {why}") from None
