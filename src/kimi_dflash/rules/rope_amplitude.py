"""The drafter's RoPE amplitude (the `mscale` its rotary embedding multiplies the cos/sin cache by), decided once from
what the given vLLM gives its rope fields, what vLLM up to 0.29 gave them (legacy) and DRAFTER_ROPE_AMPLITUDE: the rule
reports it, the launcher applies it. Read from the source (get_rope's branch for the rope type, then the
`self.mscale = ...` the values reach), never from a table of versions; another shape is refused, never guessed."""

from __future__ import annotations

import ast
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from kimi_dflash.checkpoint import CheckpointFacts, Rope
from kimi_dflash.config.schema import KEY, ROPE_ENGINE, ROPE_LEGACY
from kimi_dflash.rules.source import VllmSource

LAYERS = "vllm/model_executor/layers/"
PACKAGE = LAYERS + "rotary_embedding/"
FACTORY_FILE = PACKAGE + "__init__.py"
YARN_FILE = PACKAGE + "yarn_scaling_rope.py"
# rope_type -> (file, class) of the embedding get_rope builds for it (DeepSeek-V4's variant is not a drafter's)
EMBEDDINGS = {
    "yarn": (YARN_FILE, "YaRNScalingRotaryEmbedding"),
    "deepseek_yarn": (PACKAGE + "deepseek_scaling_rope.py", "DeepseekScalingRotaryEmbedding"),
}
AMPLITUDE_ATTRIBUTE = "mscale"  # the attribute the cos/sin cache is multiplied by
ENGINE, LEGACY = ROPE_ENGINE, ROPE_LEGACY  # DRAFTER_ROPE_AMPLITUDE's words
PROBE_ATTENTION_FACTOR = 1.2345  # no formula gives it: attention_factor is honoured when it comes back as the amplitude
SAME_AMPLITUDE = 1e-6  # closer amplitudes are the same (vllm-ascend's 1.4158883 vs 1.41588830833...)


class UnreadableRope(ValueError):
    """The release's rotary-embedding source is in a shape this reader does not know."""


def concerned(drafter: CheckpointFacts | None) -> bool:
    """A DFlash drafter whose rope this module understands (yarn or deepseek_yarn, every value a number)."""
    rope = None if drafter is None or not drafter.dflash else drafter.rope
    return rope is not None and rope.kind in EMBEDDINGS and rope.problem is None and rope.factor is not None


def yarn_get_mscale(scale: float, mscale: float = 1.0) -> float:
    """vLLM's (and transformers') `yarn_get_mscale`: 0.1 mscale ln(scale) + 1 (1 for scale <= 1)."""
    return 1.0 if scale <= 1 else 0.1 * mscale * math.log(scale) + 1.0


def legacy_amplitude(rope: Rope) -> float:
    """What vLLM up to 0.29 gave these fields (checked on every wheel by test_rope_amplitude_wheels.py): yarn 0.1
    ln(factor) + 1 (get_rope passed no mscale field on), deepseek_yarn the mscale ratio (defaults 1 and 0)."""
    factor = rope.factor or 1.0
    if rope.kind == "deepseek_yarn":
        mscale, all_dim = rope.number("mscale"), rope.number("mscale_all_dim")
        return yarn_get_mscale(factor, 1.0 if mscale is None else mscale) / yarn_get_mscale(factor, all_dim or 0.0)
    return yarn_get_mscale(factor)


def transformers_amplitude(rope: Rope) -> float:
    """What transformers 5 (and SpecForge, which trains with it) gives yarn fields (`_compute_yarn_parameters`): an
    explicit attention_factor, else the mscale ratio when both are set (1.0 for z-lab's), else the legacy one."""
    if rope.attention_factor is not None:
        return rope.attention_factor
    mscale, mscale_all_dim, factor = rope.number("mscale"), rope.number("mscale_all_dim"), rope.factor or 1.0
    if mscale and mscale_all_dim:
        return yarn_get_mscale(factor, mscale) / yarn_get_mscale(factor, mscale_all_dim)
    return yarn_get_mscale(factor)


@dataclass(frozen=True)
class ReleaseAmplitude:
    version: str | None
    amplitude: float
    passed_keys: tuple[str, ...]  # the rope keys get_rope passes on to the embedding
    where: str  # file:line of the statement that set the amplitude
    factory_where: str  # file:line of the factory's list of passed keys

    @property
    def release(self) -> str:
        return f"vLLM {self.version}" if self.version else "this vLLM"


def release_amplitude(source: VllmSource, rope: Rope) -> ReleaseAmplitude:
    if rope.kind not in EMBEDDINGS or rope.factor is None:
        raise UnreadableRope(f"rope_type {rope.kind!r} is not one this reader evaluates ({', '.join(EMBEDDINGS)})")
    file, cls = EMBEDDINGS[rope.kind]
    passed, factory_line = _passed_keys(source, rope.kind)
    init = source.function(file, f"{cls}.__init__")
    if init is None:
        raise UnreadableRope(f"{file} in {source.origin} has no {cls}.__init__")
    given: dict[str, Any] = {key: rope.values[key] for key in passed if key in rope.values}
    given["scaling_factor"] = rope.factor  # the factory passes rope_parameters["factor"] positionally
    decided = _amplitude(init.body, _bind(init, given))
    if decided is None:
        raise UnreadableRope(f"{file}: {cls}.__init__ never sets self.{AMPLITUDE_ATTRIBUTE}")
    amplitude, line = decided
    where, factory_where = (f"{f.removeprefix(LAYERS)}:{n}" for f, n in ((file, line), (FACTORY_FILE, factory_line)))
    return ReleaseAmplitude(source.version(), float(amplitude), passed, where, factory_where)


@dataclass(frozen=True)
class RopeDecision:
    """One drafter on one vLLM: `served` it gets, through the launcher's overlay when `overlay`."""

    rope: Rope
    release: ReleaseAmplitude  # the drafter's fields as written
    legacy: float
    choice: str | float | None  # DRAFTER_ROPE_AMPLITUDE (None: a bare command line, no launcher)
    served: float
    overlay: bool
    message: str
    fix: str | None = None  # set: a warning (the wanted amplitude cannot be served, or none was chosen)

    def overlay_config(self, config: Mapping[str, Any]) -> dict[str, Any]:
        """The drafter's config.json with attention_factor = served in every rope field of its rope type."""
        return {**config, **{f: {**config[f], "attention_factor": self.served} for f in self.rope.fields}}


def same_amplitude(a: float, b: float) -> bool:
    return abs(a - b) < SAME_AMPLITUDE


def decide(drafter: CheckpointFacts, source: VllmSource, choice: str | float | None) -> RopeDecision:
    """For a drafter `concerned` applies to; UnreadableRope when the source cannot be evaluated."""
    rope = drafter.rope
    assert rope is not None  # concerned()
    release, legacy = release_amplitude(source, rope), legacy_amplitude(rope)

    def decided(message: str, fix: str | None = None, served: float | None = None) -> RopeDecision:
        amplitude = release.amplitude if served is None else served
        return RopeDecision(rope, release, legacy, choice, amplitude, served is not None, message, fix)

    gives = f"{release.release} gives the drafter RoPE amplitude {round(release.amplitude, 4)} ({release.where})"
    if rope.attention_factor is not None:  # stated by the drafter itself, or by the launcher's overlay
        states = "the launcher's overlay states" if drafter.overlay else "its config.json states"
        said = f"{gives}: {states} {rope.field}.attention_factor = {rope.attention_factor:.7f}"
        if same_amplitude(release.amplitude, rope.attention_factor):
            return decided(f"{said} ({KEY.DRAFTER_ROPE_AMPLITUDE}={choice})" if drafter.overlay else said)
        ignored = f"{said}, which {release.release} ignores ({release.factory_where})"
        return decided(ignored, "vLLM >= 0.30.0, which honours attention_factor")
    measured = "the published acceptance was measured with" if rope.kind == "yarn" else "vLLM up to 0.29 gave it"
    both = f"{gives}; {measured} {round(legacy, 4)} ({LEGACY}: vLLM <= 0.29)"
    wanted = release.amplitude if choice in (None, ENGINE) else legacy if choice == LEGACY else float(choice)
    if choice is None and not same_amplitude(release.amplitude, legacy):
        bare = f"{both}; a bare command line serves {round(release.amplitude, 4)}"
        return decided(bare, f"serve.sh's {KEY.DRAFTER_ROPE_AMPLITUDE} chooses ({LEGACY} or {ENGINE}; docs/patches.md)")
    if same_amplitude(release.amplitude, wanted):
        return decided(f"{both}; {KEY.DRAFTER_ROPE_AMPLITUDE}={choice} serves it as it is")
    probe = replace(rope, values={**rope.values, "attention_factor": PROBE_ATTENTION_FACTOR})
    if not same_amplitude(release_amplitude(source, probe).amplitude, PROBE_ATTENTION_FACTOR):
        return decided(
            f"{both}; {KEY.DRAFTER_ROPE_AMPLITUDE}={choice} asks for {round(wanted, 4)}, but {release.release} ignores "
            f"{rope.kind} attention_factor ({release.factory_where}): no overlay can serve it",
            f"{KEY.DRAFTER_ROPE_AMPLITUDE}={ENGINE}, or a vLLM that honours attention_factor",
        )
    overlay = f"the launcher's overlay serves it with {rope.field}.attention_factor = {wanted:.7f}"
    return decided(
        f"{both}; {KEY.DRAFTER_ROPE_AMPLITUDE}={choice}: {overlay} "
        f"({ENGINE}: {round(release.amplitude, 4)}; docs/patches.md)",
        served=wanted,
    )


def _passed_keys(source: VllmSource, kind: str) -> tuple[tuple[str, ...], int]:
    """The keys get_rope's branch for `kind` passes on (`extra_kwargs = {k: v ... if k in (...)}`), and its line."""
    get_rope = source.function(FACTORY_FILE, "get_rope")
    if get_rope is None:
        raise UnreadableRope(f"{FACTORY_FILE} in {source.origin} defines no get_rope")
    for node in ast.walk(get_rope):
        test = ast.unparse(node.test) if isinstance(node, ast.If) else ""  # == 'yarn', in ['deepseek_yarn', ...]
        if test.startswith("scaling_type ") and f"'{kind}'" in test:
            for stmt in node.body:
                keys = _filtered_keys(stmt)
                if keys is not None:
                    return keys, stmt.lineno
            raise UnreadableRope(f"{FACTORY_FILE}:{node.lineno}: the {kind} branch has no filtered extra_kwargs")
    raise UnreadableRope(f'{FACTORY_FILE}: get_rope has no branch for scaling type "{kind}"')


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


def _ratio(scope: Mapping[str, Any]) -> float:
    factor = scope["self.scaling_factor"]
    return yarn_get_mscale(factor, float(scope["mscale"])) / yarn_get_mscale(factor, float(scope["mscale_all_dim"]))


RATIO = "yarn_get_mscale(self.scaling_factor, mscale) / yarn_get_mscale(self.scaling_factor, mscale_all_dim)"
DEEPSEEK_RATIO = RATIO.replace(", mscale)", ", float(mscale))").replace(", mscale_all_dim)", ", float(mscale_all_dim))")
# Every right-hand side of `self.mscale = ...` vLLM has shipped (as ast.unparse writes it), with what it computes. yarn:
# up to 0.29 the 4th and 5th, from 0.30 the first three; deepseek_yarn: the last up to 0.29, the 6th from 0.30.
_FORMULAS: dict[str, Callable[[Mapping[str, Any]], float]] = {
    "float(attention_factor)": lambda scope: float(scope["attention_factor"]),
    f"float({RATIO})": _ratio,
    "float(yarn_get_mscale(self.scaling_factor))": lambda scope: yarn_get_mscale(scope["self.scaling_factor"]),
    "float(yarn_get_mscale(self.scaling_factor) * attn_factor)": lambda scope: (
        yarn_get_mscale(scope["self.scaling_factor"]) * scope["attn_factor"]
    ),
    "float(attn_factor)": lambda scope: float(scope["attn_factor"]),
    f"float({DEEPSEEK_RATIO})": _ratio,
    f"float({DEEPSEEK_RATIO} * attn_factor)": lambda scope: _ratio(scope) * scope["attn_factor"],
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
    except (KeyError, TypeError, ValueError) as missing:
        raise UnreadableRope(f"line {node.lineno}: no value for {missing}") from None


def _holds(test: ast.expr, scope: Mapping[str, Any]) -> bool:
    left = test.left if isinstance(test, ast.Compare) else None
    if isinstance(left, ast.Name) and ast.unparse(test) == f"{left.id} is not None":
        return scope.get(left.id) is not None
    names = test.values if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And) else [test]
    if all(isinstance(name, ast.Name) for name in names):
        return all(scope.get(name.id) for name in names)  # type: ignore[attr-defined]
    raise UnreadableRope(f"line {test.lineno}: cannot evaluate `{ast.unparse(test)}`")
