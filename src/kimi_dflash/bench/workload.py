"""The prompt set (built-in or a file) and the seeded per-session plans (docs/benchmark.md, "Workload")."""

from __future__ import annotations

import hashlib
import random
from collections import Counter
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from kimi_dflash.bench import datasets
from kimi_dflash.bench.datasets import Conversation, DatasetInfo
from kimi_dflash.core.errors import UserError
from kimi_dflash.core.user_files import MiB, read_user_bytes

BUILTIN = "builtin"
# A dataset is read whole; ShareGPT's usual file is ~650 MB. The cap refuses what no dataset is (a disk image).
DATASET_MAX_BYTES = 1024 * MiB


@dataclass(frozen=True)
class Prompt:
    id: str
    category: str
    text: str
    conversation_turn: int | None = None  # conversation datasets: 1 starts a new conversation (history reset)
    system: str | None = None  # conversation datasets: the conversation's own system prompt


@dataclass(frozen=True)
class Dataset:
    name: str  # "builtin" or the file path as given
    prompts: tuple[Prompt, ...]
    sha256: str  # of the file bytes, so results say exactly which prompts were used
    conversations: tuple[Conversation, ...] = ()  # conversation formats: sessions replay these
    format: str = "prompts"

    def describe(self) -> DatasetInfo:
        categories = Counter(item.category for item in self.conversations or self.prompts)  # per conversation
        return DatasetInfo(
            name=self.name,
            prompts=len(self.prompts),
            sha256=self.sha256,
            categories=dict(categories),
            format=self.format,
            conversations=len(self.conversations) if self.conversations else None,
        )


def load_dataset(spec: str, fmt: str | None = None) -> Dataset:
    """``"builtin"`` or a JSONL / JSON-array file (``fmt``: a ``datasets.FORMATS`` name; None detects it)."""
    if spec == BUILTIN:
        raw = resources.files("kimi_dflash.bench").joinpath("data/prompts.jsonl").read_bytes()
    else:
        raw = read_user_bytes(Path(spec).expanduser(), what="--dataset", max_bytes=DATASET_MAX_BYTES)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise UserError(f"dataset {spec}: not UTF-8 text (byte {exc.start}). Save the file as UTF-8.") from None
    items = datasets.records(text, spec)
    if not items:
        raise UserError(f"dataset {spec}: no prompts found (empty file?).")
    fmt = fmt or datasets.detect(items[0][1])
    sha256 = hashlib.sha256(raw).hexdigest()
    if fmt == datasets.PROMPTS:
        prompts = tuple(_prompt(where, item) for where, item in items)
        return _check_sendable(Dataset(name=spec, prompts=prompts, sha256=sha256))
    conversations = datasets.conversations(items, fmt)
    prompts = tuple(prompt for c in conversations for prompt in _prompts_of(c))
    return _check_sendable(Dataset(spec, prompts, sha256, tuple(conversations), fmt))


def _prompt(where: str, item: Any) -> Prompt:
    """A record of the prompts format: {"prompt": ..., "category": ..., "id": ...} or a bare string."""
    if isinstance(item, str):
        item = {"prompt": item}
    prompt = item.get("prompt") if isinstance(item, dict) else None
    if not isinstance(prompt, str) or not prompt.strip():
        raise UserError(
            f'{where}: expected an object with a non-empty "prompt" string, e.g. '
            '{"prompt": "Explain TCP slow start."}.'
        )
    default_id = "-".join(where.split()[-2:])  # 'line-3' (JSONL) or 'item-2' (an array)
    return Prompt(
        id=str(item.get("id") or default_id), category=str(item.get("category") or "uncategorized"), text=prompt
    )


def unencodable_at(text: str) -> int | None:
    """Where ``text`` holds a lone surrogate UTF-8 cannot carry (from \\ud800 or non-UTF-8 argv); None if none."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        return exc.start
    return None


def _check_sendable(dataset: Dataset) -> Dataset:
    for prompt in dataset.prompts:
        for text in (prompt.text, prompt.system or ""):
            at = unencodable_at(text)
            if at is not None:
                raise UserError(
                    f"dataset {dataset.name}: prompt {prompt.id} holds a lone surrogate (U+{ord(text[at]):04X}) at "
                    f"character {at}, which cannot be sent as UTF-8; fix that record."
                )
    return dataset


def _conversation_plan(
    dataset: Dataset, seed: int, level: int, repeat: int, session: int, turns: int, order: str
) -> list[Prompt]:
    """``turns`` requests replaying whole conversations back to back, so concurrency stays at N."""
    convs = dataset.conversations
    rng = random.Random(f"kimi-dflash/{seed}/{level}/{repeat}/{session}/conversations")
    queue: list[int] = []
    out: list[Prompt] = []
    k = 0
    while len(out) < turns:
        if order == SEQUENTIAL:
            index = ((repeat * turns + k) * level + session) % len(convs)
        else:
            if not queue:
                queue = rng.sample(range(len(convs)), len(convs))
            index = queue.pop()
        k += 1
        out.extend(_prompts_of(convs[index])[: turns - len(out)])
    return out


def _prompts_of(c: Conversation) -> list[Prompt]:
    return [Prompt(c.id, c.category, text, conversation_turn=t, system=c.system) for t, text in enumerate(c.turns, 1)]


def _draw(dataset: Dataset, rng: random.Random, count: int) -> list[Prompt]:
    """``count`` prompts without replacement; reshuffles and continues if the dataset is smaller."""
    out: list[Prompt] = []
    while len(out) < count:
        take = min(count - len(out), len(dataset.prompts))
        out.extend(dataset.prompts[i] for i in rng.sample(range(len(dataset.prompts)), take))
    return out


RANDOM, SEQUENTIAL = "random", "sequential"


def session_prompts(
    dataset: Dataset, seed: int, level: int, repeat: int, session: int, turns: int, order: str = RANDOM
) -> list[Prompt]:
    """The prompts a session sends, turn by turn: seeded by (seed, level, repeat, session), or ``sequential`` in
    the order ``vllm bench serve --disable-shuffle`` walks a dataset (so the cross-check sends the same prompts)."""
    if dataset.conversations:
        return _conversation_plan(dataset, seed, level, repeat, session, turns, order)
    if order == SEQUENTIAL:
        n = len(dataset.prompts)
        return [dataset.prompts[((repeat * turns + t) * level + session) % n] for t in range(turns)]
    # A string seed is hashed with SHA-512 by random.Random: stable across runs and Python versions.
    rng = random.Random(f"kimi-dflash/{seed}/{level}/{repeat}/{session}")
    return _draw(dataset, rng, turns)


def warmup_prompts(dataset: Dataset, seed: int, count: int) -> list[Prompt]:
    rng = random.Random(f"kimi-dflash/{seed}/warmup")
    return _draw(dataset, rng, count)
