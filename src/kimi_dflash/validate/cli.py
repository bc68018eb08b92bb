"""kimi-dflash validate: is the candidate server's output the reference's? Token ids per prompt at T=0, the first
divergence in text, exact-match accuracy on the shipped math set, and a one-screen verdict.

DFlash is lossless, so by default any divergence at T=0 is a FAIL. With --allow-divergence (for FP8 KV, another
dtype) divergence is a WARN, and FAIL is reserved for a drop in math accuracy."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import ClassVar

from kimi_dflash.core.atomic_write import check_target, write_json_atomic
from kimi_dflash.core.errors import UserError
from kimi_dflash.core.options import declare, http_url, option
from kimi_dflash.validate import engine
from kimi_dflash.validate.client import ServerError, api_key_from_env

EXIT = {"PASS": 0, "WARN": 1, "FAIL": 2}
EXIT_ERROR = 3


def verdict(
    agreement: engine.AgreementSummary,
    math: engine.MathScore | None,
    *,
    allow_divergence: bool,
    max_math_drop: float,
    same_server: bool,
) -> engine.Verdict:
    """PASS, WARN or FAIL with the reasons — pure."""
    problems: list[tuple[engine.Status, str]] = []
    if differing := agreement.prompts - agreement.identical:
        why = "" if allow_divergence else " (a lossless candidate must be token-identical at T=0)"
        level: engine.Status = "WARN" if allow_divergence else "FAIL"
        problems.append((level, f"{differing}/{agreement.prompts} outputs differ from the reference{why}"))
    drop = (math.accuracy_reference - math.accuracy_candidate) * 100 if math and math.rows else None
    if drop is not None and drop > max_math_drop:
        problems.append(("FAIL", f"math exact-match drops {drop:.1f} points (limit {max_math_drop:g})"))
    if same_server:
        problems.append(("WARN", "reference and candidate are the same server and model: this proves nothing"))
    return engine.Verdict.of(problems)


def _shown(text: str | None) -> str:
    return "(not decoded)" if text is None else repr(text)


def report_lines(c: engine.Comparison, max_tokens: int, status: str, reasons: Sequence[str]) -> list[str]:
    agreement, d, math = c.agreement, c.divergence, c.math
    lines = [
        f"reference   {c.reference.model} @ {c.reference.url}",
        f"candidate   {c.candidate.model} @ {c.candidate.url}",
        f"tokens      {agreement.identical}/{agreement.prompts} outputs token-identical (T=0, up to {max_tokens} "
        f"tokens each); mean shared prefix {agreement.mean_prefix_agreement * 100:.1f} %",
    ]
    if d is None:
        lines.append("divergence  none")
    else:
        prompt = d.prompt.replace("\n", " ")
        lines += [
            f"divergence  first in prompt {d.prompt_index} ({prompt[:60]!r}) at output token {d.position}",
            f"  after     ...{_shown(d.shared_text)}",
            f"  reference {_shown(d.reference_text)}  ids {d.reference_ids}",
            f"  candidate {_shown(d.candidate_text)}  ids {d.candidate_ids}",
        ]
    if math is not None:
        accuracy = f"reference {math.accuracy_reference * 100:.1f} %, candidate {math.accuracy_candidate * 100:.1f} %"
        lines.append(f"math        exact-match {accuracy} ({len(math.rows)} problems)")
    return [*lines, f"verdict     {status}", *(f"  {reason}" for reason in reasons)]


@dataclass(kw_only=True)
class ValidateOptions:
    ABBREVIATIONS: ClassVar[bool] = False

    reference: str = option("the reference server (autoregressive)", required=True, metavar="URL", parse=http_url)
    candidate: str = option("the server under test", required=True, metavar="URL", parse=http_url)
    model_ref: str | None = option("reference model name (default: its /v1/models entry)", metavar="NAME")
    model_cand: str | None = option("candidate model name (default: its /v1/models entry)", metavar="NAME")
    prompts: int = option("agreement prompts from the shipped set (16)", default=16)
    max_tokens: int = option("tokens per agreement prompt (128)", default=128)
    math_problems: int = option("math problems from the shipped set (default 0 = all 32)", default=0)
    math_max_tokens: int = option("tokens per math answer (256)", default=256)
    no_math: bool = option("skip the math exact-match check")
    concurrency: int = option("parallel requests per server (8)", default=8)
    allow_divergence: bool = option(
        "the candidate is not meant to be identical (FP8 KV, another dtype): divergence is a WARN, a math drop above "
        "--max-math-drop a FAIL"
    )
    max_math_drop: float = option("math exact-match points the candidate may lose (0)", default=0.0)
    json: Path | None = option("also write every per-prompt comparison here", metavar="FILE")
    probe_timeout: float = option(
        "seconds a server may take to list its models, else it is unreachable (30)", default=30.0, metavar="SECONDS"
    )


EPILOG = (
    "example (the CPU demo: DFlash against no speculation):\n"
    "  ./serve.sh configs/demo-cpu-baseline.env --wait; ./serve.sh configs/demo-cpu.env --wait\n"
    "  kimi-dflash validate --reference http://127.0.0.1:8263 --candidate http://127.0.0.1:8262\n\n"
    "exit status: 0 PASS, 1 WARN, 2 FAIL, 3 could not run (server unreachable, no token ids).\n"
    "The API key, if any, is read from OPENAI_API_KEY and never printed."
)
add_cli_args = declare(ValidateOptions, __doc__, EPILOG)


def main(args: ValidateOptions) -> int:
    try:
        if args.json:  # said before the servers are asked for anything
            check_target(args.json, "--json ")
        api_key = api_key_from_env()
        servers = engine.served(
            [args.reference, args.candidate], [args.model_ref, args.model_cand], api_key, timeout_s=args.probe_timeout
        )
        c = asyncio.run(engine.collect(args, *servers, api_key))
    except (ServerError, UserError) as error:
        print(f"error: {error}", file=sys.stderr)
        return EXIT_ERROR
    same = c.reference == c.candidate
    limits = {"allow_divergence": args.allow_divergence, "max_math_drop": args.max_math_drop, "same_server": same}
    status, reasons = verdict(c.agreement, c.math, **limits)
    print("\n".join(report_lines(c, args.max_tokens, status, reasons)))
    math = c.math and {"accuracy_reference": c.math.accuracy_reference, "accuracy_candidate": c.math.accuracy_candidate}
    document = {
        "reference": asdict(c.reference),
        "candidate": asdict(c.candidate),
        "verdict": status,
        "reasons": reasons,
        "agreement": asdict(c.agreement),
        "pairs": [asdict(p) for p in c.pairs],
        "first_divergence": c.divergence.model_dump(mode="json") if c.divergence else None,
        "math": c.math and {**math, **asdict(c.math)},
    }
    try:
        if args.json:
            write_json_atomic(args.json, document)
    except OSError as error:
        print(f"error: cannot write --json {args.json}: {error.strerror or error}", file=sys.stderr)
        return EXIT_ERROR
    return EXIT[status]
