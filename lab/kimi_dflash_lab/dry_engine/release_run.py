"""`python -m kimi_dflash_lab dry-engine-release VERSION --out DIR`: the dry engine with a vLLM release's CUDA wheel
(the venv `dry-engine-venv VERSION` built) on the GPU configs and the variants that pin down what that release
accepts on an NVIDIA Hopper GPU, each as vLLM's own start-up code decides it on a simulated H100/H200.

    DIR/<case>.json   the child's report (paths of this machine replaced by <cache>, <venv>, <checkout>)
    DIR/summary.json  per case: config, overrides, simulated GPU, verdict, what vLLM picked, seconds; the versions

The committed output (benchmarks/results/dry-engine-cuda-0.26.0/) is what the fast test reads; a slow lab test
reruns it when the venv exists. One child per case, two at a time (~1 GB and 30-90 s each).
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from kimi_dflash.core import options
from kimi_dflash.core.options import declare, option
from kimi_dflash_lab import LAB_ROOT
from kimi_dflash_lab.dry_engine.engine import PARALLEL, PICKED, dry_engine_for_plan


@dataclass(frozen=True)
class Case:
    config: str
    gpu: str  # the simulated NVIDIA GPU (platform_fakes.CUDA_GPUS)
    why: str
    overrides: Mapping[str, str] = field(default_factory=dict)
    graphs: bool = False  # apply qualify's graph-mode candidate overrides (qualify/graphs.py)


CASES: dict[str, Case] = {
    "demo-gpu": Case("demo-gpu.env", "H100", "the CUDA miniature, BF16 KV, eager: what lab/gpu/run.sh serves"),
    "demo-gpu-graphs": Case(
        "demo-gpu.env",
        "H100",
        "qualify's graph-mode candidate of demo-gpu.env: the graph mode vLLM resolves",
        graphs=True,
    ),
    "demo-gpu-fp8kv": Case("demo-gpu-fp8kv.env", "H100", "FP8 KV: FLASHMLA, blocks of 64"),
    "demo-gpu-fp8kv-block16": Case(
        "demo-gpu-fp8kv.env", "H100", "FP8 KV with blocks of 16: FLASHMLA takes 64 only", {"BLOCK_SIZE": "16"}
    ),
    "demo-gpu-cpu-miniature": Case(
        "demo-gpu.env",
        "H100",
        "the CPU miniature's MLA dims (qk_nope 64, v 64) on Hopper: no MLA prefill backend takes them",
        {"FABRICATE_DEMO_MODELS": "kimi-int4", "SERVED_MODEL_NAME": "cpu-miniature-on-cuda"},
    ),
    "h200": Case("h200.env", "H200", "Kimi K2.6 at TP 8 (shipped checkpoint facts), BF16 KV"),
}


def _sanitize(value: object, replacements: Mapping[str, str]) -> object:
    if isinstance(value, str):
        for old, new in replacements.items():
            value = value.replace(old, new)
        return value
    if isinstance(value, list):
        return [_sanitize(item, replacements) for item in value]
    if isinstance(value, dict):
        return {key: _sanitize(item, replacements) for key, item in value.items()}
    return value


def case_plan(case: Case, create: bool = False):  # type: ignore[no-untyped-def]
    """(config, plan, overrides) of a case: the shipped config, its overrides (and qualify's graph-mode ones)."""
    from kimi_dflash.config.shipped import shipped_configs_dir
    from kimi_dflash.config.validate import load_config
    from kimi_dflash.core.envvars import VLLM_USE_FLASHINFER_SAMPLER
    from kimi_dflash.core.paths import cache_root
    from kimi_dflash.launch.prepare import resolve_demo_models
    from kimi_dflash.plan import build_plan
    from kimi_dflash.qualify.graphs import graph_overrides

    overrides = dict(case.overrides)
    path = shipped_configs_dir() / case.config
    if case.graphs:
        values = {k: str(v) for k, v in load_config(path, environ=overrides).values.items() if v is not None}
        overrides.update(graph_overrides(values, int(values["NUM_SPECULATIVE_TOKENS"])))
    config = resolve_demo_models(load_config(path, environ=overrides), create=create)
    # The remedy a host without flashinfer gets (the GPU kit's); the dry engine needs no sampler.
    plan = build_plan(config, "python", str(cache_root()), remedy_env={VLLM_USE_FLASHINFER_SAMPLER: "0"})
    return config, plan, overrides


def run_case(case: Case, prepared: tuple, python: Path) -> dict:  # type: ignore[type-arg]
    """One child judging a case whose plan `case_plan(case, create=True)` prepared."""
    config, plan, overrides = prepared
    started = time.monotonic()
    verdict = dry_engine_for_plan(config, plan, python=str(python), cuda_gpu=case.gpu)
    return {
        "seconds": round(time.monotonic() - started, 1),
        "overrides": overrides,
        "argv": list(plan.argv),
        "report": dict(verdict.report),
    }


def run(version: str, out: Path, only: list[str] | None = None) -> dict:
    from kimi_dflash.core.paths import cache_root
    from kimi_dflash_lab.dry_engine.venv import MARKER, venv_dir, venv_python

    python = venv_python(version)
    if python is None:
        raise RuntimeError(
            f"no venv for vLLM {version}: build it with `python -m kimi_dflash_lab dry-engine-venv {version}`"
        )
    marker = json.loads((venv_dir(version) / MARKER).read_text(encoding="utf-8"))
    replacements = {str(venv_dir(version)): "<venv>", str(cache_root()): "<cache>", str(LAB_ROOT.parent): "<checkout>"}
    out.mkdir(parents=True, exist_ok=True)
    summary_path = out / "summary.json"
    summary: dict = {"vllm": marker["vllm"], "torch": marker["torch"], "cases": {}}
    if only and summary_path.is_file():
        summary["cases"] = json.loads(summary_path.read_text(encoding="utf-8"))["cases"]
    chosen = {name: case for name, case in CASES.items() if not only or name in only}
    # Plans (and the demo models they name) one at a time; the children two at a time, like the dry table's.
    prepared = {name: case_plan(case, create=True) for name, case in chosen.items()}

    def judged(name: str) -> dict:
        case = chosen[name]
        print(f"dry-engine-release: {name} ({case.config}, simulated {case.gpu})", file=sys.stderr, flush=True)
        return _sanitize(run_case(case, prepared[name], python), replacements)  # type: ignore[return-value]

    with ThreadPoolExecutor(max_workers=PARALLEL) as pool:
        results = dict(zip(chosen, pool.map(judged, chosen), strict=True))
    for name, case in chosen.items():
        result = results[name]
        report = result["report"]  # type: ignore[index]
        (out / f"{name}.json").write_text(json.dumps(report, indent=1, default=str) + "\n", encoding="utf-8")
        summary["cases"][name] = {
            "config": case.config,
            "overrides": result["overrides"],  # type: ignore[index]
            "argv": result["argv"],  # type: ignore[index]  # the plan judged (before the dry engine's rewrite)
            "why": case.why,
            "simulated_gpu": case.gpu,
            "starts": report.get("error") is None,
            "error": report.get("error"),
            **{key: report.get(key) for key in PICKED_KEYS if key in report},
            "seconds": result["seconds"],  # type: ignore[index]
        }
    summary_path.write_text(json.dumps(summary, indent=1, default=str) + "\n", encoding="utf-8")
    return summary


PICKED_KEYS = ("platform", *(key for key, _label in PICKED))  # what the summary keeps of each child's report


@dataclass(kw_only=True)
class Options:
    version: str = option("the vLLM release whose dry-engine venv judges, e.g. 0.26.0", positional=True, required=True)
    out: Path = option("where the reports go", required=True)
    only: list[str] | None = option("rerun these cases only", nargs="+", choices=sorted(CASES))


add_cli_args = declare(Options, __doc__)


def main(args: Options) -> int:
    try:
        summary = run(args.version, args.out, args.only)
    except RuntimeError as error:
        print(f"dry-engine-release: {error}", file=sys.stderr)
        return 1
    for name, case in summary["cases"].items():
        verdict = "starts" if case["starts"] else f"refused: {case['error']}"
        print(f"{name:<24} {verdict}  ({case['seconds']} s)")
    return 0


if __name__ == "__main__":
    sys.exit(options.run(__name__, prog="python -m kimi_dflash_lab dry-engine-release"))
