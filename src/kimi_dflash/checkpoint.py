"""The target's and the drafter's facts, read once per start from MODEL_DIR / DRAFT_MODEL_DIR config.json or, before
the download, from the facts shipped for the configured repo (reports say which). The one reader of a checkpoint's
config.json: the guarded reader's refusal is kept as the checkpoint's problem (preflight's model-dir check reports
it), and a value of the wrong type reads as unknown. Every other module takes these facts."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kimi_dflash.core.user_files import UnreadableFile, parse_user_json, read_user_json
from kimi_dflash.kvscale.scales_file import fingerprint_from_hf_config

if TYPE_CHECKING:
    from kimi_dflash.config.schema import ConfigValues

CONFIG_FILE = "config.json"
EXPERT_KEYS = ("n_routed_experts", "num_experts", "num_local_experts")  # the routed experts' count, as models name it
# Hugging Face repo -> file under kimi_dflash/data/checkpoints (a subset of that repo's config.json).
SHIPPED: dict[str, str] = {
    "moonshotai/Kimi-K2.6": "kimi-k2.6.json",
    "z-lab/Kimi-K2.5-DFlash": "kimi-k2.5-dflash.json",
    "z-lab/Kimi-K2.6-DFlash": "kimi-k2.6-dflash.json",  # the same shape as K2.5's (the file says why)
}
# transformers 5 keeps rope_scaling when a config has both (`rope_scaling or self.rope_parameters`): read first.
ROPE_FIELDS = ("rope_scaling", "rope_parameters")
ROPE_NUMBERS = ("factor", "mscale", "mscale_all_dim", "attention_factor", "original_max_position_embeddings")


def _number(value: object) -> float | None:
    """A JSON number that is a real, finite number (not a bool), else None."""
    number = isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
    return float(value) if number else None  # type: ignore[arg-type]


@dataclass(frozen=True)
class Rope:
    """The rope scaling the drafter's rotary embedding is built from, as its config.json states it."""

    field: str  # the field transformers uses (rope_scaling wins when both are set)
    values: Mapping[str, Any]  # that dict
    kind: str | None  # its rope_type ("type" in older configs)
    fields: tuple[str, ...]  # every rope field that holds a dict of this rope_type (an overlay writes each)
    problem: str | None = None  # a value that is not a number: this rope is not understood, so never rewritten

    def number(self, key: str) -> float | None:
        return _number(self.values.get(key))

    @property
    def factor(self) -> float | None:
        return self.number("factor")

    @property
    def attention_factor(self) -> float | None:
        return self.number("attention_factor")


def read_rope(config: Mapping[str, Any]) -> Rope | None:
    """The rope scaling of a config.json (None: it declares none)."""
    found = [(name, config[name]) for name in ROPE_FIELDS if isinstance(config.get(name), Mapping) and config[name]]
    if not found:
        return None
    (name, values), kind = found[0], found[0][1].get("rope_type", found[0][1].get("type"))
    fields = tuple(n for n, v in found if v.get("rope_type", v.get("type")) == kind)
    kind = kind if isinstance(kind, str) else None
    bad = [k for k in ROPE_NUMBERS if values.get(k) is not None and _number(values[k]) is None]
    return Rope(name, values, kind, fields, f"{name}.{bad[0]} is {values[bad[0]]!r}, not a number" if bad else None)


@dataclass(frozen=True)
class Wna16Experts:
    num_bits: int
    group_size: int | None  # None: channel-wise
    pack_format: str

    def describe(self) -> str:
        group = f"group {self.group_size}" if self.group_size else "channel-wise"
        return f"compressed-tensors WNA16 int{self.num_bits}, {group}, {self.pack_format}"


@dataclass(frozen=True)
class CheckpointFacts:
    role: str  # "target" or "drafter"
    origin: str  # the file the facts came from
    shipped: bool  # True: the project's copy, because the checkpoint directory is not there
    architectures: tuple[str, ...]
    mla: bool
    routed_experts: int
    wna16_experts: Wna16Experts | None
    sliding_window: bool
    attention_heads: int | None = None  # num_attention_heads (the AITER MLA verify rule pads heads per rank)
    quantization: str | None = None  # quantization_config.quant_method, for any weight-quantised checkpoint
    block_size: int | None = None  # a DFlash drafter's block: the most tokens it drafts per step
    rope: Rope | None = None
    directory: Path | None = None  # None: shipped facts
    overlay: Mapping[str, Any] | None = field(default=None, compare=False)  # the launcher's note (drafter_rope.py)
    # config.json with text_config merged under the top level (the top level wins, as in vLLM), and as written
    config: Mapping[str, Any] = field(default_factory=dict, compare=False, repr=False)
    raw: Mapping[str, Any] = field(default_factory=dict, compare=False, repr=False)

    @property
    def dflash(self) -> bool:
        return "DFlashDraftModel" in self.architectures

    @property
    def fingerprint(self) -> dict[str, Any] | None:
        """The architecture facts a KV-scales file is matched on; None for shipped facts (not this checkpoint)."""
        return None if self.shipped else fingerprint_from_hf_config(self.raw)

    def describe(self) -> str:
        experts = self.wna16_experts and f"experts {self.wna16_experts.describe()}"
        routed = self.routed_experts and f"{self.routed_experts} routed experts"
        parts = (self.mla and "MLA attention", routed, experts, self.sliding_window and "sliding-window layers")
        return "; ".join([", ".join(self.architectures) or "architecture unknown", *filter(None, parts)])

    def where(self) -> str:
        if self.shipped:
            return f"shipped facts ({self.origin}), because the checkpoint directory does not exist"
        return self.origin


@dataclass(frozen=True)
class Facts:
    """Both checkpoints of one start (None: unknown), and why a config.json there could not be read (by directory)."""

    target: CheckpointFacts | None = None
    drafter: CheckpointFacts | None = None
    problems: Mapping[Path, str] = field(default_factory=dict)


def read_facts(values: ConfigValues) -> Facts:
    """The checkpoints a config names (the drafter with speculation on; demo models never take the shipped facts)."""
    shipped = values.demo_models is None
    drafter = (values.draft_model_dir, values.draft_model_repo if shipped else None) if values.speculative else None
    return read_checkpoints((values.model_dir, values.model_repo if shipped else None), drafter)


def read_checkpoints(target: tuple[object, str | None], drafter: tuple[object, str | None] | None) -> Facts:
    """(checkpoint directory, repo whose shipped facts stand in for a directory not there) of each; no drafter: None."""
    found, problems = [], {}
    for role, named in (("target", target), ("drafter", drafter)):
        directory, repo = named or (None, None)
        path = None if directory in (None, "") else Path(str(directory))
        facts, problem = read_checkpoint(path, repo, role)
        found.append(facts)
        problems.update({path: problem} if path and problem else {})
    return Facts(found[0], found[1], problems)


def read_config(directory: Path, role: str) -> dict[str, Any]:
    """A checkpoint's config.json as written; UnreadableFile (a UserError) when it cannot be read as a JSON object."""
    path = Path(directory) / CONFIG_FILE
    config = read_user_json(path, what=f"{role} {CONFIG_FILE}")
    if not isinstance(config, dict):
        raise UnreadableFile(f"{role} {CONFIG_FILE} {path}: is not a JSON object; restore the checkpoint's own file")
    return config


def read_checkpoint(directory: Path | None, repo: str | None, role: str) -> tuple[CheckpointFacts | None, str | None]:
    """From `directory`/config.json if there, else the shipped copy for `repo`; and the reader's refusal, if any."""
    path = None if directory is None else Path(directory) / CONFIG_FILE
    if directory is not None and path is not None and (path.exists() or path.is_symlink()):
        try:
            config = read_config(directory, role)
        except UnreadableFile as error:
            return None, str(error)
        return facts_from_config(config, str(path), role, shipped=False, directory=Path(directory)), None
    if (name := SHIPPED.get(repo or "")) is None:
        return None, None
    text = resources.files("kimi_dflash").joinpath("data", "checkpoints", name).read_text(encoding="utf-8")
    where = f"kimi_dflash/data/checkpoints/{name} for {repo}"
    return facts_from_config(parse_user_json(text, where=where), where, role, shipped=True), None


def has_sliding_window(config: Mapping[str, Any]) -> bool:
    """Sliding-window attention layers (per-layer types win over the model-wide fields)."""
    layer_types = config.get("layer_types")
    if isinstance(layer_types, list) and layer_types:
        return any(str(t) == "sliding_attention" for t in layer_types)
    return bool(config.get("sliding_window")) and config.get("use_sliding_window") is not False


def _positive_int(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def facts_from_config(
    config: Mapping[str, Any], origin: str, role: str, *, shipped: bool, directory: Path | None = None
) -> CheckpointFacts:
    # Multimodal wrappers (KimiK25ForConditionalGeneration) nest the language model under text_config; vLLM
    # reads quantization_config from the top level first, then from text_config, and so does this.
    text = config.get("text_config") if isinstance(config.get("text_config"), dict) else {}
    merged = {**text, **{k: v for k, v in config.items() if k != "text_config"}}
    quant = config.get("quantization_config") or text.get("quantization_config")
    experts = next(filter(None, (_positive_int(merged.get(key)) for key in EXPERT_KEYS)), 0)
    architectures = config.get("architectures")
    dflash = merged.get("dflash_config")
    block = _positive_int(merged.get("block_size")) or (
        _positive_int(dflash.get("block_size")) if isinstance(dflash, dict) else None
    )
    return CheckpointFacts(
        role=role,
        origin=origin,
        shipped=shipped,
        architectures=tuple(str(a) for a in architectures) if isinstance(architectures, list) else (),
        mla=bool(merged.get("kv_lora_rank")),
        routed_experts=experts,
        wna16_experts=_wna16_experts(quant) if experts else None,
        sliding_window=has_sliding_window(merged),
        attention_heads=_positive_int(merged.get("num_attention_heads")),
        quantization=str(quant.get("quant_method") or "unknown") if isinstance(quant, dict) else None,
        block_size=block,
        rope=read_rope(merged),
        directory=directory,
        config=merged,
        raw=config,
    )


def _wna16_experts(quant: object) -> Wna16Experts | None:
    if not isinstance(quant, dict) or quant.get("quant_method") != "compressed-tensors":
        return None
    groups = quant.get("config_groups")
    for group in groups.values() if isinstance(groups, dict) else ():
        weights = group.get("weights") if isinstance(group, dict) else None
        if not isinstance(weights, dict) or weights.get("type") != "int" or group.get("input_activations"):
            continue
        if weights.get("num_bits") in (4, 8) and weights.get("strategy") in ("group", "channel"):
            return Wna16Experts(
                num_bits=int(weights["num_bits"]),
                group_size=_positive_int(weights.get("group_size")) if weights.get("strategy") == "group" else None,
                pack_format=str(group.get("format") or quant.get("format") or "?"),
            )
    return None
