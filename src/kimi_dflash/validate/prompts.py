"""The prompt sets shipped with the package: calibration prompts and exact-answer math word problems."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from kimi_dflash.core.errors import UserError
from kimi_dflash.core.user_files import parse_user_json, read_user_text

CALIBRATION_FILE = "kv_calibration_prompts.jsonl"
MATH_FILE = "math_word_problems.jsonl"
MATH_INSTRUCTION = "Solve the problem. End your reply with a line of the form 'Answer: <number>'."


@dataclass(frozen=True)
class MathProblem:
    id: str
    question: str
    answer: int


def _shipped(name: str) -> str:
    return resources.files("kimi_dflash").joinpath("data", name).read_text(encoding="utf-8")


def load_calibration_prompts(path: Path | None = None) -> list[str]:
    """A "prompt" field per JSONL line (default: the 200 shipped ones); UserError naming a bad line."""
    origin = str(path) if path else f"kimi_dflash/data/{CALIBRATION_FILE}"
    text = read_user_text(path, what="prompt file") if path else _shipped(CALIBRATION_FILE)
    prompts = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        record = parse_user_json(line, where=f"{origin}:{number}")
        prompt = record.get("prompt") if isinstance(record, dict) else None
        if not isinstance(prompt, str) or not prompt.strip():
            raise UserError(f'{origin}:{number}: expected a JSON object with a non-empty "prompt" string')
        prompts.append(prompt)
    if not prompts:
        raise UserError(f"{origin} holds no prompts")
    return prompts


def load_math_problems() -> list[MathProblem]:
    records = [json.loads(line) for line in _shipped(MATH_FILE).splitlines() if line.strip()]
    return [MathProblem(str(r["id"]), str(r["question"]), int(r["answer"])) for r in records]


def math_prompt(problem: MathProblem) -> str:
    return f"{problem.question}\n\n{MATH_INSTRUCTION}"


_ANSWER = re.compile(r"answer\s*[:=]?\s*\$?\s*(-?\d[\d,]*)", re.IGNORECASE)
_NUMBER = re.compile(r"-?\d[\d,]*")


def extract_answer(text: str) -> int | None:
    """The number after the last 'Answer:'; failing that, the last number in the text."""
    tagged = _ANSWER.findall(text)
    candidates = tagged or _NUMBER.findall(text)
    if not candidates:
        return None
    try:
        return int(candidates[-1].replace(",", ""))
    except ValueError:
        return None
