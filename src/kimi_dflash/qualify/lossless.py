"""Losslessness with one server up at a time (on the box each takes all eight GPUs): each side's greedy outputs are
stored while it serves, then compared from disk."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from kimi_dflash.documents import Document
from kimi_dflash.validate import engine
from kimi_dflash.validate.cli import verdict
from kimi_dflash.validate.client import Completion, api_key_from_env, chat_greedy, served_model


class GreedyOutputs(Document):
    """lossless/reference.json, candidate.json, graphs.json; the math set's answers with ``problem_ids``."""

    SCHEMA = "kimi-dflash/greedy-outputs"
    WHAT = "greedy outputs file"
    model: str
    max_tokens: int
    prompts: list[str]
    completions: list[Completion]
    problem_ids: list[str] = []


class LosslessVerdict(Document):
    """lossless/verdict.json (and graphs-identity.json): the candidate's outputs against the reference's."""

    SCHEMA = "kimi-dflash/lossless-verdict"
    WHAT = "lossless verdict"
    verdict: engine.Status
    reasons: list[str]
    reference_model: str
    candidate_model: str
    max_tokens: int
    agreement: engine.AgreementSummary
    pairs: list[engine.PairComparison]
    first_divergence: engine.Divergence | None


def generate(url: str, prompts: Sequence[str], max_tokens: int, concurrency: int = 8) -> GreedyOutputs:
    """Greedy outputs of the server at ``url`` (T=0, token ids returned)."""
    api_key = api_key_from_env()
    model = asyncio.run(served_model(url, api_key))
    completions = asyncio.run(
        chat_greedy(url, model, prompts, max_tokens=max_tokens, concurrency=concurrency, api_key=api_key)
    )
    return GreedyOutputs(model=model, max_tokens=max_tokens, prompts=list(prompts), completions=completions)


def compare(
    reference: GreedyOutputs, candidate: GreedyOutputs, candidate_url: str, same_tokenizer: bool
) -> LosslessVerdict:
    """Text is decoded by the candidate server (which is up); the reference's too when both share the tokenizer."""
    if reference.prompts != candidate.prompts:
        raise ValueError("reference and candidate outputs are for different prompts; rerun both steps")
    cand_server = engine.Server(candidate_url, candidate.model)
    outputs = engine.Outputs(reference.prompts, reference.completions, candidate.completions)
    pairs = engine.compare_outputs(outputs, engine.Server("reference", reference.model), cand_server)
    agreement = engine.summarize_agreement(pairs)
    status, reasons = verdict(agreement, None, allow_divergence=False, max_math_drop=0.0, same_server=False)
    decoded_with = "the candidate's tokenizer" if same_tokenizer else "candidate text only (other tokenizer)"
    tokenizer, key = cand_server if same_tokenizer else None, api_key_from_env()
    search = engine.first_divergence(outputs, pairs, tokenizer, cand_server, key, decoded_with=decoded_with)
    divergence = asyncio.run(search)
    return LosslessVerdict(
        verdict=status,
        reasons=reasons,
        reference_model=reference.model,
        candidate_model=candidate.model,
        max_tokens=reference.max_tokens,
        agreement=agreement,
        pairs=pairs,
        first_divergence=divergence,
    )


def math_outputs(url: str, max_tokens: int) -> GreedyOutputs:
    """Greedy answers to the shipped math set (the FP8 check's accuracy measure)."""
    problems, questions = engine.math_questions()
    document = generate(url, questions, max_tokens)
    return document.model_copy(update={"problem_ids": [p.id for p in problems]})


def math_accuracy(reference: GreedyOutputs, candidate: GreedyOutputs) -> tuple[float, float]:
    problems, _ = engine.math_questions()
    outputs = engine.Outputs(reference.prompts, reference.completions, candidate.completions)
    score = engine.score_math(problems[: len(outputs.reference)], outputs)
    return score.accuracy_reference, score.accuracy_candidate
