"""Losslessness with one server up at a time: the reference's greedy outputs are generated and stored while the
reference serves, the candidate's while the candidate serves, and the two are compared from disk with the
validate engine (token identity per prompt, first divergence, payload/validate.py's verdict).

One server at a time is not a convenience: on the box this qualifies, reference and candidate each take all
eight GPUs, so they can never be up together (payload/validate.py assumes two servers that are).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from kimi_dflash.validate.cli import verdict
from kimi_dflash.validate.client import Completion, api_key_from_env, chat_greedy, served_model
from kimi_dflash.validate.engine import (
    Outputs,
    Server,
    compare_outputs,
    detokenize,
    math_questions,
    score_math,
    summarize_agreement,
    token_ids,
)
from kimi_dflash.validate.prompts import load_calibration_prompts

CONTEXT_TOKENS = 8  # tokens shown after the divergence point
SHARED_TOKENS = 24  # tokens of shared text shown before it


def generate(url: str, prompts: Sequence[str], max_tokens: int, concurrency: int = 8) -> dict[str, Any]:
    """Greedy outputs of the server at ``url`` (T=0, token ids returned), as a JSON-able document."""
    api_key = api_key_from_env()
    model = asyncio.run(served_model(url, api_key))
    completions = asyncio.run(
        chat_greedy(url, model, prompts, max_tokens=max_tokens, concurrency=concurrency, api_key=api_key)
    )
    return {
        "model": model,
        "max_tokens": max_tokens,
        "prompts": list(prompts),
        "completions": [asdict(c) for c in completions],
    }


def shipped_prompts(count: int) -> list[str]:
    return load_calibration_prompts()[: max(1, count)]


def load(path: Path) -> dict[str, Any]:
    return dict(json.loads(path.read_text(encoding="utf-8")))


def _completions(document: dict[str, Any]) -> list[Completion]:
    return [Completion(**c) for c in document["completions"]]


def compare(
    reference: dict[str, Any], candidate: dict[str, Any], candidate_url: str, same_tokenizer: bool
) -> dict[str, Any]:
    """The verdict document: agreement, every pair, the first divergence (ids, and text decoded by the candidate
    server, which is up; the reference's text too when both serve the same tokenizer)."""
    if reference["prompts"] != candidate["prompts"]:
        raise ValueError("reference and candidate outputs are for different prompts; rerun both steps")
    ref_server, cand_server = Server("reference", reference["model"]), Server(candidate_url, candidate["model"])
    outputs = Outputs(list(reference["prompts"]), _completions(reference), _completions(candidate))
    pairs = compare_outputs(outputs, ref_server, cand_server)
    agreement = summarize_agreement(pairs)
    status, reasons = verdict(agreement, None, allow_divergence=False, max_math_drop=0.0, same_server=False)
    divergence = None
    index = next((i for i, p in enumerate(pairs) if not p.identical), None)
    if index is not None:
        position = pairs[index].first_divergence or 0
        ref_ids = token_ids(outputs.reference[index], "reference")
        cand_ids = token_ids(outputs.candidate[index], candidate_url)

        def text(ids: Sequence[int]) -> str | None:
            return asyncio.run(detokenize(cand_server, ids, api_key_from_env())) if ids else ""

        divergence = {
            "prompt_index": index,
            "prompt": outputs.prompts[index],
            "position": position,
            "shared_text": text(ref_ids[max(0, position - SHARED_TOKENS) : position]) if same_tokenizer else None,
            "reference_text": text(ref_ids[position : position + CONTEXT_TOKENS]) if same_tokenizer else None,
            "candidate_text": text(cand_ids[position : position + CONTEXT_TOKENS]),
            "reference_ids": ref_ids[position : position + CONTEXT_TOKENS],
            "candidate_ids": cand_ids[position : position + CONTEXT_TOKENS],
            "decoded_with": "the candidate's tokenizer" if same_tokenizer else "candidate text only (other tokenizer)",
        }
    return {
        "verdict": status,
        "reasons": reasons,
        "reference_model": reference["model"],
        "candidate_model": candidate["model"],
        "max_tokens": reference["max_tokens"],
        "agreement": asdict(agreement),
        "pairs": [asdict(p) for p in pairs],
        "first_divergence": divergence,
    }


def math_outputs(url: str, max_tokens: int) -> dict[str, Any]:
    """Greedy answers to the shipped math set (the FP8 check's accuracy measure)."""
    problems, questions = math_questions()
    document = generate(url, questions, max_tokens)
    document["problem_ids"] = [p.id for p in problems]
    return document


def math_accuracy(reference: dict[str, Any], candidate: dict[str, Any]) -> tuple[float, float]:
    """(reference accuracy, candidate accuracy) on the shipped math set."""
    problems, _ = math_questions()
    outputs = Outputs(list(reference["prompts"]), _completions(reference), _completions(candidate))
    score = score_math(problems[: len(outputs.reference)], outputs)
    return score.accuracy_reference, score.accuracy_candidate
