"""Conversation datasets the user brings (formats: docs/benchmark.md, "Datasets"), and a shared-prefix generator."""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

from kimi_dflash.core.errors import UserError
from kimi_dflash.core.options import doc
from kimi_dflash.core.user_files import parse_user_json


@dataclass(kw_only=True)
class DatasetInfo:
    """Which prompts were used."""

    name: str = doc("'builtin' or the file path as given")
    prompts: int = doc("number of prompts")
    sha256: str = doc("of the file bytes")
    categories: dict[str, int] = doc(
        "prompts per category (conversation formats: conversations per category)", factory=dict
    )
    format: str | None = doc("prompts | openai-messages | sharegpt | speed-bench (--dataset-format)", omit_if_none=True)
    conversations: int | None = doc(
        "conversations in the file (conversation formats; prompts counts user turns)", omit_if_none=True
    )


PROMPTS, OPENAI_MESSAGES, SHAREGPT, SPEED_BENCH = "prompts", "openai-messages", "sharegpt", "speed-bench"
FORMATS = (PROMPTS, OPENAI_MESSAGES, SHAREGPT, SPEED_BENCH)
# a message format: its list's key, a message's role and text keys, the roles of user turns
MESSAGES = {
    OPENAI_MESSAGES: ("messages", "role", "content", ("user",)),
    SHAREGPT: ("conversations", "from", "value", ("human", "user")),
}

CHARS_PER_TOKEN = 4  # English under BPE, for the shared prefix (usage.prompt_tokens shows the real count)


@dataclass(frozen=True)
class Conversation:
    id: str
    category: str
    system: str | None
    turns: tuple[str, ...]  # the user turns, in order


def records(text: str, name: str) -> list[tuple[str, Any]]:
    """(where, record) pairs: JSONL lines (blank lines skipped) or one JSON array's items."""
    if text.lstrip().startswith("["):
        items = parse_user_json(text, where=f"dataset {name}")
        return [(f"dataset {name} item {i}", item) for i, item in enumerate(items)]
    lines = [(f"dataset {name} line {n}", line) for n, line in enumerate(text.splitlines(), start=1) if line.strip()]
    return [(where, parse_user_json(line, where=where)) for where, line in lines]


def detect(first: Any) -> str:
    if isinstance(first, dict):
        for key, fmt in (("messages", OPENAI_MESSAGES), ("conversations", SHAREGPT), ("turns", SPEED_BENCH)):
            if key in first:
                return fmt
    return PROMPTS


def _text(value: Any) -> str | None:
    if isinstance(value, str):
        return value
    if isinstance(value, list):  # OpenAI content parts: keep the text ones
        parts = [p.get("text") for p in value if isinstance(p, dict) and isinstance(p.get("text"), str)]
        return "".join(parts) if parts else None
    return None


def _turns_of(record: dict[str, Any], fmt: str, where: str) -> tuple[str | None, list[str]]:
    """(system prompt, user turns) of one record."""
    if fmt == SPEED_BENCH:
        turns = record.get("turns")
        if not isinstance(turns, list) or not all(isinstance(t, str) for t in turns):
            raise UserError(f'{where}: "turns" must be a list of strings (SPEED-Bench format).')
        return None, list(turns)
    key, role_key, text_key, user_roles = MESSAGES[fmt]
    messages = record.get(key)
    if not isinstance(messages, list):
        raise UserError(f'{where}: expected "{key}": a list of {{"{role_key}": ..., "{text_key}": ...}} objects.')
    system: str | None = None
    users: list[str] = []
    for i, message in enumerate(messages):
        role = message.get(role_key) if isinstance(message, dict) else None
        text = _text(message.get(text_key)) if isinstance(message, dict) else None
        if not isinstance(role, str) or text is None:
            raise UserError(f'{where}: {key}[{i}] needs a string "{role_key}" and a text "{text_key}".')
        if role == "system" and not users:
            system = text
        elif role in user_roles:
            users.append(text)
    return system, users


def conversations(items: list[tuple[str, Any]], fmt: str) -> list[Conversation]:
    """The conversations of a file's records; one without user turns is refused (a skip would change the workload)."""
    out = []
    for index, (where, record) in enumerate(items):
        if not isinstance(record, dict):
            raise UserError(f"{where}: expected a JSON object ({fmt} format).")
        system, users = _turns_of(record, fmt, where)
        if not users or not all(u.strip() for u in users):
            raise UserError(f"{where}: the conversation has no user turn, or an empty one ({fmt} format).")
        ident = record.get("id") or record.get("question_id") or f"conversation-{index}"
        out.append(Conversation(str(ident), str(record.get("category") or "uncategorized"), system, tuple(users)))
    return out


def shared_prefix(tokens: int, seed: int, vocabulary: list[str]) -> str:
    """Seeded text of about ``tokens`` tokens that every conversation opens with, so a server could share its KV."""
    rng = random.Random(f"kimi-dflash/prefix/{seed}")
    target = tokens * CHARS_PER_TOKEN
    words: list[str] = []
    length = 0
    while length < target:
        word = rng.choice(vocabulary)
        words.append(word)
        length += len(word) + 1
    return " ".join(words)
