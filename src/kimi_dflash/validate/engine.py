"""Send the same prompts to two servers at T=0, compare token ids prompt by prompt, score the math set."""

from __future__ import annotations

import asyncio
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal, NamedTuple

from kimi_dflash.documents import Model
from kimi_dflash.validate import prompts as shipped
from kimi_dflash.validate.client import Completion, ServerError, chat_greedy, normalize_base_url, served_model
from kimi_dflash.validate.prompts import MathProblem, extract_answer

Status = Literal["PASS", "WARN", "FAIL"]


class Verdict(NamedTuple):
    """PASS, WARN (weaker evidence, missing facts) or FAIL, with one reason per problem found."""

    status: Status
    reasons: list[str]

    @classmethod
    def of(cls, problems: Sequence[tuple[Status, str]]) -> Verdict:
        """The verdict of (level, text) problems: the worst level, PASS when there are none."""
        levels = {level for level, _ in problems}
        status: Status = "FAIL" if "FAIL" in levels else "WARN" if levels else "PASS"
        return cls(status, [f"{level}: {text}" for level, text in problems])


@dataclass(frozen=True)
class PairComparison:
    identical: bool
    first_divergence: int | None  # index of the first differing token; None when identical
    common_prefix: int
    length_reference: int
    length_candidate: int

    @property
    def prefix_agreement(self) -> float:
        longest = max(self.length_reference, self.length_candidate)
        return 1.0 if longest == 0 else self.common_prefix / longest


def compare_tokens(reference: Sequence[int], candidate: Sequence[int]) -> PairComparison:
    shorter = min(len(reference), len(candidate))
    prefix = next((i for i, (a, b) in enumerate(zip(reference, candidate)) if a != b), shorter)
    identical = prefix == len(reference) == len(candidate)
    return PairComparison(identical, None if identical else prefix, prefix, len(reference), len(candidate))


@dataclass(frozen=True)
class AgreementSummary:
    prompts: int
    identical: int
    mean_prefix_agreement: float
    median_first_divergence: float | None  # over diverging prompts
    earliest_divergence: int | None


def summarize_agreement(pairs: Sequence[PairComparison]) -> AgreementSummary:
    diverging = [p.first_divergence for p in pairs if p.first_divergence is not None]
    mean = statistics.fmean(p.prefix_agreement for p in pairs) if pairs else 0.0
    divergence = (statistics.median(diverging), min(diverging)) if diverging else (None, None)
    return AgreementSummary(len(pairs), sum(p.identical for p in pairs), mean, *divergence)


@dataclass(frozen=True)
class Server:
    url: str
    model: str


@dataclass(frozen=True)
class Outputs:
    prompts: list[str]
    reference: list[Completion]
    candidate: list[Completion]


async def generate_both(reference: Server, candidate: Server, prompts: Sequence[str], **limits: Any) -> Outputs:
    """Reference first, then candidate (one server at a time: they may share the machine); ``limits``: chat_greedy's."""
    ref = await chat_greedy(reference.url, reference.model, prompts, **limits)
    return Outputs(list(prompts), ref, await chat_greedy(candidate.url, candidate.model, prompts, **limits))


def token_ids(completion: Completion, url: str) -> list[int]:
    if completion.token_ids is None:
        raise ServerError(f"{url} did not return token ids (needs vLLM >= 0.10.2 for return_token_ids)")
    return list(completion.token_ids)


def compare_outputs(outputs: Outputs, reference: Server, candidate: Server) -> list[PairComparison]:
    return [
        compare_tokens(token_ids(a, reference.url), token_ids(b, candidate.url))
        for a, b in zip(outputs.reference, outputs.candidate)
    ]


CONTEXT_TOKENS, SHARED_TOKENS = 8, 24  # tokens shown after the divergence point, and of shared text before it
EACH_BY_ITS_SERVER = "each side by its own server"


class Divergence(Model):
    """Where the candidate's greedy output first leaves the reference's: the ids, and their text where decoded."""

    prompt_index: int
    prompt: str
    position: int
    shared_text: str | None
    reference_text: str | None
    candidate_text: str | None
    reference_ids: list[int]
    candidate_ids: list[int]
    decoded_with: str = EACH_BY_ITS_SERVER


async def first_divergence(
    outputs: Outputs,
    pairs: Sequence[PairComparison],
    reference: Server | None,
    candidate: Server,
    api_key: str | None,
    decoded_with: str = EACH_BY_ITS_SERVER,
) -> Divergence | None:
    """The first prompt whose outputs differ (None: all identical); ``reference`` decodes the reference's ids."""
    index = next((i for i, p in enumerate(pairs) if not p.identical), None)
    if index is None:
        return None
    position = pairs[index].first_divergence or 0
    ref_ids = token_ids(outputs.reference[index], reference.url if reference else "reference")
    cand_ids = token_ids(outputs.candidate[index], candidate.url)
    after, upto = slice(max(0, position - SHARED_TOKENS), position), slice(position, position + CONTEXT_TOKENS)

    async def text(server: Server | None, ids: Sequence[int]) -> str | None:
        return None if server is None else (await detokenize(server, ids, api_key) if ids else "")

    return Divergence(
        prompt_index=index,
        prompt=outputs.prompts[index],
        position=position,
        shared_text=await text(reference, ref_ids[after]),
        reference_text=await text(reference, ref_ids[upto]),
        candidate_text=await text(candidate, cand_ids[upto]),
        reference_ids=ref_ids[upto],
        candidate_ids=cand_ids[upto],
        decoded_with=decoded_with,
    )


@dataclass(frozen=True)
class MathRow:
    id: str
    answer: int
    reference: int | None
    candidate: int | None


@dataclass(frozen=True)
class MathScore:
    rows: list[MathRow]

    @property
    def accuracy_reference(self) -> float:
        return sum(r.reference == r.answer for r in self.rows) / len(self.rows) if self.rows else 0.0

    @property
    def accuracy_candidate(self) -> float:
        return sum(r.candidate == r.answer for r in self.rows) / len(self.rows) if self.rows else 0.0


def math_questions(limit: int | None = None) -> tuple[list[MathProblem], list[str]]:
    problems = shipped.load_math_problems()[: limit or None]
    return problems, [shipped.math_prompt(p) for p in problems]


def score_math(problems: Sequence[MathProblem], outputs: Outputs) -> MathScore:
    rows = zip(problems, outputs.reference, outputs.candidate)
    return MathScore([MathRow(p.id, p.answer, extract_answer(a.text), extract_answer(b.text)) for p, a, b in rows])


@dataclass(frozen=True)
class Comparison:
    reference: Server
    candidate: Server
    pairs: list[PairComparison]
    divergence: Divergence | None
    math: MathScore | None

    @property
    def agreement(self) -> AgreementSummary:
        return summarize_agreement(self.pairs)


async def collect(
    args: Any, reference: Server, candidate: Server, api_key: str | None, divergence: bool = True
) -> Comparison:
    """Both servers' greedy outputs for the shipped prompts and (unless ``args.no_math``) the math set, compared."""
    limits = {"concurrency": args.concurrency, "api_key": api_key}
    prompts = shipped.load_calibration_prompts()[: max(1, args.prompts)]
    outputs = await generate_both(reference, candidate, prompts, max_tokens=args.max_tokens, **limits)
    pairs = compare_outputs(outputs, reference, candidate)
    first = await first_divergence(outputs, pairs, reference, candidate, api_key) if divergence else None
    math = None
    if not args.no_math:
        problems, questions = math_questions(getattr(args, "math_problems", 0))
        answers = await generate_both(reference, candidate, questions, max_tokens=args.math_max_tokens, **limits)
        math = score_math(problems, answers)
    return Comparison(reference, candidate, pairs, first, math)


def served(
    urls: Sequence[str], names: Sequence[str | None], api_key: str | None, timeout_s: float = 30.0
) -> list[Server]:
    """Each URL with its model: the name given, else the one its /v1/models lists within ``timeout_s``."""
    return [Server(url, name or asyncio.run(served_model(url, api_key, timeout_s))) for url, name in zip(urls, names)]


async def detokenize(server: Server, ids: Sequence[int], api_key: str | None = None) -> str | None:
    """Text of ``ids`` from vLLM's /detokenize (None when the server has no such endpoint or does not answer)."""
    from kimi_dflash.core import http

    url = f"{normalize_base_url(server.url)}/detokenize"
    body = {"model": server.model, "tokens": list(ids)}
    try:
        reply = await asyncio.to_thread(http.request, url, body=body, api_key=api_key, timeout_s=30)
        return str(reply.json().get("prompt", "")) if reply.status == 200 else None
    except (OSError, ValueError, AttributeError):
        return None
