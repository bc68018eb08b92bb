"""payload/advise_spec_tokens.py: which number of speculative tokens to run at each concurrency."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from kimi_dflash.advisor.model import ASSUMPTIONS, Prediction, measurements, predict, recommend
from kimi_dflash.advisor.schedule import Choice, choose_depths, grid_samples, schedule_of
from kimi_dflash.bench.intervals import CONFIDENCE_LEVELS
from kimi_dflash.bench.result import BenchmarkResult, load_result
from kimi_dflash.config.depth_schedule import format_schedule
from kimi_dflash.core.errors import UserError
from kimi_dflash.core.formatting import markdown_table, number, percent, ratio
from kimi_dflash.core.options import comma_list, declare, option

EPILOG = """\
Feed it sweep directories or benchmark result JSONs: one run at the largest k you consider (its per-position
acceptance), runs at two or more k (the step cost); only levels measured with speculation are predicted.

examples:
  %(prog)s results/sweep
  %(prog)s results/sweep --fit-k 1,4      # predict from k=1 and k=4 only; other measured k are held out
  %(prog)s results/sweep --schedule       # depth by load from the measured grid (needs --repeats >= 2)
"""


def load_inputs(paths: Sequence[Path]) -> list[tuple[str, BenchmarkResult]]:
    from kimi_dflash.sweep.state import finished_results

    found: list[tuple[str, BenchmarkResult]] = []
    for path in paths:
        if path.is_dir():
            if not (in_dir := finished_results(path)):
                raise UserError(f"{path}: no finished sweep point results in this directory.")
            found += [(str(p), r) for p, r in in_dir]
        else:
            found.append((str(path), load_result(path)))
    return found


def render(p: Sequence[float], predictions: Sequence[Prediction], fit_k: set[int] | None) -> list[str]:
    acceptance = " / ".join(f"{v * 100:.0f}" for v in p)
    header = ["sessions", "k", "τ", "step ms", "per-user tok/s", "measured", "error"]
    header += ["aggregate tok/s", "measured", "error", "basis"]
    rows = []
    for pred in predictions:
        m = pred.measured if pred.k != 0 else None  # k = 0 is the measurement itself: no error to show
        basis = "measured" if pred.k == 0 else "fitted" if pred.fitted else "held out" if pred.measured else "predicted"
        row = [pred.sessions, pred.k, number(pred.tau, 2), number(pred.step_s and pred.step_s * 1000)]
        for name in ("per_user_tok_s", "output_tok_s"):
            value, seen = getattr(pred, name), m and getattr(m, name)
            row += [number(value), number(seen), percent(seen and value / seen - 1, signed=True)]
        rows.append([*row, basis])
    lines = [f"acceptance per position (%, largest-k run): {acceptance}", ""]
    lines += [*markdown_table(header, "r" * 10 + "l", rows), ""]
    for sessions, best in sorted(recommend(predictions).items()):
        rates = f"{number(best.output_tok_s)} aggregate tok/s, {number(best.per_user_tok_s)} per user"
        lines.append(f"recommendation: {sessions} sessions -> k = {best.k} ({rates})")
    if held := [pr for pr in predictions if pr.measured and not pr.fitted and pr.k > 0]:
        worst = percent(max(abs(pr.error or 0) for pr in held))
        lines.append(
            f"held-out check: {len(held)} measured points not used for fitting; largest aggregate error {worst}"
        )
    if fit_k is not None:
        lines.append(f"fitted on k in {{{', '.join(map(str, sorted(fit_k)))}}}")
    lines.append("model assumptions:")
    lines.extend(f"  - {text}" for text in ASSUMPTIONS)
    return lines


def render_schedule(choices: Sequence[Choice]) -> list[str]:
    rows = []
    for c in choices:
        i = c.interval
        beat = [c.over, ratio(i.ratio), f"{ratio(i.low)}-{ratio(i.high)}"] if i else ["-", "", ""]
        rows.append([c.sessions, c.k, number(c.output_tok_s), *beat])
    ranges = schedule_of(choices)
    return [
        *markdown_table(["sessions", "k", "aggregate tok/s", "beat k", "ratio", "interval"], "rrrrrl", rows),
        "",
        f"NUM_SPECULATIVE_TOKENS={max(r.k for r in ranges)}",
        f"NUM_SPECULATIVE_TOKENS_PER_BATCH_SIZE={format_schedule(ranges)}",
    ]


@dataclass(kw_only=True)
class AdviseOptions:
    inputs: list[Path] = option("sweep dirs or result JSONs", positional=True, required=True, metavar="DIR_OR_JSON")
    fit_k: tuple[int, ...] | None = option(
        "fit only on these k; other measured k are held out and compared",
        metavar="K1,K2",
        parse=comma_list(int, "integers"),
    )
    schedule: bool = option(
        "print a depth-by-load schedule instead: per concurrency the shallowest k unless a deeper one wins beyond "
        "its interval (runs with --repeats >= 2)"
    )
    confidence: float = option("confidence of the --schedule intervals", choices=CONFIDENCE_LEVELS, default=0.95)


add_cli_args = declare(
    AdviseOptions,
    "Predict aggregate and per-user tok/s for every number of speculative tokens k at every measured concurrency, "
    "from measured runs; recommend k per concurrency; show predicted vs measured.",
    EPILOG,
)


def main(args: AdviseOptions) -> int:
    fit_k = None if args.fit_k is None else set(args.fit_k)
    if args.schedule:
        print("\n".join(render_schedule(choose_depths(grid_samples(load_inputs(args.inputs)), args.confidence))))
        return 0
    runs = measurements(load_inputs(args.inputs))
    if fit_k is not None and not any(m.k in fit_k for m in runs):
        raise UserError(f"--fit-k: no measured run at k in {sorted(fit_k)}.")
    p, predictions = predict(runs, fit_k)
    print("\n".join(render(p, predictions, fit_k)))
    return 0
