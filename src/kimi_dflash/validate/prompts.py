"""The prompt sets shipped with the package: calibration prompts and exact-answer math word problems."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

CALIBRATION_FILE = "kv_calibration_prompts.jsonl"
MATH_FILE = "math_word_problems.jsonl"
MATH_INSTRUCTION = "Solve the problem. End your reply with a line of the form 'Answer: <number>'."


class PromptFileError(ValueError):
    pass


@dataclass(frozen=True)
class MathProblem:
    id: str
    question: str
    answer: int


def _shipped(name: str) -> str:
    return resources.files("kimi_dflash").joinpath("data", name).read_text(encoding="utf-8")


def _jsonl(text: str, origin: str) -> list[dict]:
    records = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as error:
            raise PromptFileError(f"{origin}:{number}: not JSON ({error.msg})") from None
        if not isinstance(record, dict):
            raise PromptFileError(f"{origin}:{number}: expected a JSON object per line")
        records.append(record)
    return records


def load_calibration_prompts(path: Path | None = None) -> list[str]:
    """Prompts from a JSONL file with a "prompt" field per line (default: the 200 shipped ones)."""
    origin = str(path) if path else f"kimi_dflash/data/{CALIBRATION_FILE}"
    try:
        text = Path(path).read_text(encoding="utf-8") if path else _shipped(CALIBRATION_FILE)
    except OSError as error:
        raise PromptFileError(f"cannot read prompt file {origin}: {error.strerror}") from None
    prompts = []
    for number, record in enumerate(_jsonl(text, origin), start=1):
        prompt = record.get("prompt")
        if not isinstance(prompt, str) or not prompt.strip():
            raise PromptFileError(f'{origin}: record {number} has no non-empty "prompt" string')
        prompts.append(prompt)
    if not prompts:
        raise PromptFileError(f"{origin} holds no prompts")
    return prompts


def load_math_problems() -> list[MathProblem]:
    return [
        MathProblem(str(r["id"]), str(r["question"]), int(r["answer"])) for r in _jsonl(_shipped(MATH_FILE), MATH_FILE)
    ]


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
