"""The RoPE amplitude (`YaRNScalingRotaryEmbedding.mscale`) a vLLM release gives a YaRN drafter: 1.4159 for z-lab's
Kimi DFlash drafters up to 0.29 (what they were trained with), 1.0 from 0.30 (docs/patches.md). Read from the given
source (get_rope's passed keys, then the `self.mscale = ...` the values reach), never from a table of versions; a
source in another shape is refused (UnreadableRope), never guessed. Shared by the rule (issue 28) and
launch/drafter_rope.py.
"""

from __future__ import annotations

import ast
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from kimi_dflash.rules.source import VllmSource

PACKAGE = "vllm/model_executor/layers/rotary_embedding/"
FACTORY_FILE = PACKAGE + "__init__.py"
YARN_FILE = PACKAGE + "yarn_scaling_rope.py"
YARN_CLASS = "YaRNScalingRotaryEmbedding"
AMPLITUDE_ATTRIBUTE = "mscale"  # the attribute the cos/sin cache is multiplied by

# The rope profile of z-lab's Kimi DFlash drafters (z-lab/Kimi-K2.5-DFlash; the K2.6 preview has the same shape).
# vllm-ascend restores the legacy amplitude for exactly these fields (`_normalize_kimi_dflash_rope`).
ZLAB_KIMI_YARN = {
    "rope_type": "yarn",
    "factor": 64.0,
    "mscale": 1.0,
    "mscale_all_dim": 1.0,
    "original_max_position_embeddings": 4096,
}
# A value no formula gives: the release honours attention_factor when it comes back as the amplitude.
PROBE_ATTENTION_FACTOR = 1.2345
# Two amplitudes closer than this are the same (vllm-ascend's value 1.4158883 vs ln-based 1.41588830833...).
SAME_AMPLITUDE = 1e-6
ROPE_FIX_KEY = "DRAFTER_ROPE_FIX"  # the config key that turns the launcher's RoPE overlay off


class UnreadableRope(ValueError):
    """The release's rotary-embedding source is in a shape this reader does not know."""


@dataclass(frozen=True)
class DrafterRope:
    field: str  # "rope_scaling" or "rope_parameters" (transformers 5 reads either)
    values: Mapping[str, Any]  # the whole dict, as written

    @property
    def factor(self) -> float:
        return float(self.values["factor"])

    @property
    def attention_factor(self) -> float | None:
        value = self.values.get("attention_factor")
        return None if value is None else float(value)

    def is_zlab_kimi_profile(self) -> bool:
        """z-lab's Kimi DFlash rope fields, with no explicit attention_factor."""
        return self.attention_factor is None and all(
            _same(self.values.get(key), value) for key, value in ZLAB_KIMI_YARN.items()
        )

    def with_attention_factor(self, value: float) -> DrafterRope:
        return replace(self, values={**self.values, "attention_factor": value})


def _same(actual: object, expected: object) -> bool:
    if isinstance(expected, str):
        return actual == expected
    return isinstance(actual, int | float) and not isinstance(actual, bool) and float(actual) == float(expected)


def drafter_rope(config: Mapping[str, Any]) -> DrafterRope | None:
    """The YaRN rope fields of a drafter's config.json (`rope_parameters` first, as transformers 5 does, then
    `rope_scaling`; "type" is the older spelling of "rope_type"), or None when it declares no YaRN scaling."""
    for field in ("rope_parameters", "rope_scaling"):
        values = config.get(field)
        if not isinstance(values, Mapping):
            continue
        kind = values.get("rope_type", values.get("type"))
        if kind != "yarn" or not isinstance(values.get("factor"), int | float):
            return None
        return DrafterRope(field, {"rope_type": kind, **values})
    return None


def is_dflash_drafter(config: Mapping[str, Any]) -> bool:
    return "DFlashDraftModel" in (config.get("architectures") or ())


def transformers_amplitude(rope: DrafterRope) -> float:
    """The amplitude transformers 5 (and so SpecForge 0.2.0, which trains with it) gives these fields: an explicit
    attention_factor, else get_mscale(factor, mscale) / get_mscale(factor, mscale_all_dim) when both are set
    (1.0 for z-lab's fields), else the legacy amplitude (`_compute_yarn_parameters`, modeling_rope_utils.py)."""
    if rope.attention_factor is not None:
        return rope.attention_factor
    mscale, mscale_all_dim = rope.values.get("mscale"), rope.values.get("mscale_all_dim")
    if mscale and mscale_all_dim:
        return yarn_get_mscale(rope.factor, float(mscale)) / yarn_get_mscale(rope.factor, float(mscale_all_dim))
    return legacy_amplitude(rope.factor)


def trained_amplitude(rope: DrafterRope) -> float | None:
    """The amplitude a drafter with z-lab's Kimi rope fields was trained with: the attention_factor it states (the
    launcher's overlay, train-drafter.sh's exports), else the legacy one; None for other rope fields."""
    plain = {key: value for key, value in rope.values.items() if key != "attention_factor"}
    if not replace(rope, values=plain).is_zlab_kimi_profile():
        return None
    return legacy_amplitude(rope.factor) if rope.attention_factor is None else rope.attention_factor


def legacy_amplitude(factor: float) -> float:
    """What vLLM up to 0.29 gave any YaRN drafter whatever its mscale fields said, and what z-lab's Kimi DFlash
    drafters were trained with: yarn_get_mscale(factor) = 0.1 ln(factor) + 1 (1 for factor <= 1)."""
    return yarn_get_mscale(factor)


@dataclass(frozen=True)
class ReleaseAmplitude:
    version: str | None
    amplitude: float
    passed_keys: tuple[str, ...]  # the rope_scaling keys get_rope passes on to YaRNScalingRotaryEmbedding
    where: str  # file:line of the statement that set the amplitude
    factory_where: str  # file:line of the factory's list of passed keys

    def describe(self) -> str:
        release = f"vLLM {self.version}" if self.version else "this vLLM"
        return f"{release} gives amplitude {self.amplitude:.4f} ({self.where})"


@dataclass(frozen=True)
class AmplitudeVerdict:
    release: ReleaseAmplitude
    trained: float
    honours_attention_factor: bool  # an explicit rope attention_factor sets the amplitude in this release

    @property
    def matches(self) -> bool:
        return abs(self.release.amplitude - self.trained) < SAME_AMPLITUDE

    def describe(self) -> str:
        state = "as trained" if self.matches else f"trained with {self.trained:.4f}"
        return f"{self.release.describe()}, {state}"


def release_amplitude(source: VllmSource, rope: DrafterRope) -> ReleaseAmplitude:
    passed, factory_line = _passed_keys(source)
    init = source.function(YARN_FILE, f"{YARN_CLASS}.__init__")
    if init is None:
        raise UnreadableRope(f"{YARN_FILE} in {source.origin} has no {YARN_CLASS}.__init__")
    given = {key: rope.values[key] for key in passed if key in rope.values}
    given["scaling_factor"] = rope.factor  # the factory passes rope_parameters["factor"] positionally
    decided = _amplitude(init.body, _bind(init, given))
    if decided is None:
        raise UnreadableRope(f"{YARN_FILE}: {YARN_CLASS}.__init__ never sets self.{AMPLITUDE_ATTRIBUTE}")
    amplitude, line = decided
    return ReleaseAmplitude(
        version=source.version(),
        amplitude=float(amplitude),
        passed_keys=passed,
        where=f"{_short(YARN_FILE)}:{line}",
        factory_where=f"{_short(FACTORY_FILE)}:{factory_line}",
    )


def judge(source: VllmSource, rope: DrafterRope) -> AmplitudeVerdict:
    """Against the legacy amplitude; the source is evaluated once more to see if an attention_factor is honoured."""
    release = release_amplitude(source, rope)
    trained = legacy_amplitude(rope.factor)
    honoured = release_amplitude(source, rope.with_attention_factor(PROBE_ATTENTION_FACTOR)).amplitude
    return AmplitudeVerdict(release, trained, honours_attention_factor=abs(honoured - PROBE_ATTENTION_FACTOR) < 1e-9)


def _short(relpath: str) -> str:
    return relpath.removeprefix("vllm/model_executor/layers/")


def _passed_keys(source: VllmSource) -> tuple[tuple[str, ...], int]:
    """The keys of `extra_kwargs = {k: v for k, v in rope_parameters.items() if k in (...)}` in get_rope's
    `scaling_type == "yarn"` branch, and its line."""
    get_rope = source.function(FACTORY_FILE, "get_rope")
    if get_rope is None:
        raise UnreadableRope(f"{FACTORY_FILE} in {source.origin} defines no get_rope")
    for node in ast.walk(get_rope):
        if isinstance(node, ast.If) and ast.unparse(node.test).endswith(" == 'yarn'"):
            for stmt in node.body:
                keys = _filtered_keys(stmt)
                if keys is not None:
                    return keys, stmt.lineno
            raise UnreadableRope(f"{FACTORY_FILE}:{node.lineno}: the yarn branch has no filtered extra_kwargs")
    raise UnreadableRope(f'{FACTORY_FILE}: get_rope has no `scaling_type == "yarn"` branch')


def _filtered_keys(stmt: ast.stmt) -> tuple[str, ...] | None:
    comprehension = stmt.value if isinstance(stmt, ast.Assign) else None
    if not isinstance(comprehension, ast.DictComp) or [len(g.ifs) for g in comprehension.generators] != [1]:
        return None
    test = comprehension.generators[0].ifs[0]
    if not (isinstance(test, ast.Compare) and [type(op) for op in test.ops] == [ast.In]):
        return None
    try:
        keys = ast.literal_eval(test.comparators[0])
    except ValueError:
        return None
    return tuple(keys) if isinstance(keys, tuple | list) and all(isinstance(k, str) for k in keys) else None


def yarn_get_mscale(scale: float, mscale: float = 1.0) -> float:
    """vLLM's (and transformers') `yarn_get_mscale`: 0.1 mscale ln(scale) + 1 (1 for scale <= 1)."""
    return 1.0 if scale <= 1 else 0.1 * mscale * math.log(scale) + 1.0


def _ratio(scope: Mapping[str, Any]) -> float:
    factor = scope["self.scaling_factor"]
    return yarn_get_mscale(factor, scope["mscale"]) / yarn_get_mscale(factor, scope["mscale_all_dim"])


RATIO = "float(yarn_get_mscale(self.scaling_factor, mscale) / yarn_get_mscale(self.scaling_factor, mscale_all_dim))"
# Every right-hand side of `self.mscale = ...` vLLM has shipped (as ast.unparse writes it), with what it computes;
# any other is refused. Up to 0.29 the last two; from 0.30 the first three, in an if/elif/else.
_FORMULAS: dict[str, Callable[[Mapping[str, Any]], float]] = {
    "float(attention_factor)": lambda scope: float(scope["attention_factor"]),
    RATIO: _ratio,
    "float(yarn_get_mscale(self.scaling_factor))": lambda scope: yarn_get_mscale(scope["self.scaling_factor"]),
    "float(yarn_get_mscale(self.scaling_factor) * attn_factor)": lambda scope: (
        yarn_get_mscale(scope["self.scaling_factor"]) * scope["attn_factor"]
    ),
    "float(attn_factor)": lambda scope: float(scope["attn_factor"]),
}


def _bind(init: ast.FunctionDef, given: Mapping[str, Any]) -> dict[str, Any]:
    """Parameter name -> value: `given` where it names a parameter, else its literal default."""
    args = init.args
    positional = [*args.posonlyargs, *args.args]
    defaults = dict(zip([a.arg for a in positional[len(positional) - len(args.defaults) :]], args.defaults))
    defaults.update({a.arg: d for a, d in zip(args.kwonlyargs, args.kw_defaults) if d is not None})
    names = [a.arg for a in [*positional, *args.kwonlyargs]]
    if args.kwarg is not None and any(key not in names for key in given):
        raise UnreadableRope(f"{init.name} takes **{args.kwarg.arg}: the keys it reads cannot be evaluated")
    scope = {name: defaults[name].value for name in names if isinstance(defaults.get(name), ast.Constant)}
    return {**scope, **{name: given[name] for name in names if name in given}}


def _amplitude(body: list[ast.stmt], scope: dict[str, Any]) -> tuple[float, int] | None:
    """Follow __init__'s statements (`self.x = name` copies, `if` on `x is not None`, `x`, `x and y`): the value
    and line of the last `self.mscale = <a known formula>` reached."""
    decided = None
    for stmt in body:
        if isinstance(stmt, ast.If):
            decided = _amplitude(stmt.body if _holds(stmt.test, scope) else stmt.orelse, scope) or decided
        elif isinstance(stmt, ast.Assign | ast.AnnAssign) and stmt.value is not None:
            targets = [ast.unparse(t) for t in (stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target])]
            if f"self.{AMPLITUDE_ATTRIBUTE}" in targets:
                decided = _value(stmt.value, scope), stmt.lineno
            elif isinstance(stmt.value, ast.Name) and stmt.value.id in scope:
                scope.update(dict.fromkeys(targets, scope[stmt.value.id]))
        elif not isinstance(stmt, ast.Expr | ast.Pass):  # docstring, super().__init__(...)
            raise UnreadableRope(f"line {stmt.lineno}: {type(stmt).__name__} statements are not evaluated")
    return decided


def _value(node: ast.expr, scope: Mapping[str, Any]) -> float:
    if isinstance(node, ast.IfExp):  # 0.20-0.29: `... if apply_yarn_scaling else float(attn_factor)`
        return _value(node.body if _holds(node.test, scope) else node.orelse, scope)
    formula = _FORMULAS.get(ast.unparse(node))
    if formula is None:
        raise UnreadableRope(f"line {node.lineno}: cannot evaluate `{ast.unparse(node)}`")
    try:
        return formula(scope)
    except (KeyError, TypeError) as missing:
        raise UnreadableRope(f"line {node.lineno}: no value for {missing}") from None


def _holds(test: ast.expr, scope: Mapping[str, Any]) -> bool:
    if (
        isinstance(test, ast.Compare)
        and isinstance(test.left, ast.Name)
        and [type(op) for op in test.ops] == [ast.IsNot]
        and ast.unparse(test.comparators[0]) == "None"
    ):
        return scope.get(test.left.id) is not None
    names = test.values if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And) else [test]
    if all(isinstance(name, ast.Name) for name in names):
        return all(scope.get(name.id) for name in names)  # type: ignore[attr-defined]
    raise UnreadableRope(f"line {test.lineno}: cannot evaluate `{ast.unparse(test)}`")
