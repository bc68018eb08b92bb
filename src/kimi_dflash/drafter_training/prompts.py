"""The prompts whose replies the target regenerates: one JSONL of {"id", "messages"} (docs/drafter-training.md)."""

from __future__ import annotations

import itertools
import json
import sys
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any, Literal

from kimi_dflash.core.atomic_write import write_text_atomic
from kimi_dflash.core.options import declare, option, run
from kimi_dflash.core.user_files import UnreadableFile, parse_user_json, read_user_text

DEMO_PROMPTS = "kv_calibration_prompts.jsonl"
PERFECTBLEND_REPO = "mlabonne/open-perfectblend"
ROLES = {"human": "user", "user": "user", "system": "system", "gpt": "assistant", "assistant": "assistant"}


class PromptError(ValueError):
    """A prompt file or record that cannot be used; the message says which line and why."""


@dataclass(frozen=True)
class Prompt:
    id: str
    messages: tuple[Mapping[str, str], ...]  # [system?] user

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "messages": [dict(m) for m in self.messages]}


def first_turn(record: Mapping[str, Any]) -> tuple[Mapping[str, str], ...] | None:
    """[system?] + first user message (None: no user turn) of messages, ShareGPT conversations or {"prompt": text}."""
    if isinstance(record.get("prompt"), str):
        return ({"role": "user", "content": record["prompt"]},)
    turns = record.get("messages") or record.get("conversations") or []
    kept: list[dict[str, str]] = []
    for turn in turns:
        if not isinstance(turn, Mapping):
            return None
        role = ROLES.get(str(turn.get("role", turn.get("from", ""))))
        content = turn.get("content", turn.get("value"))
        if not isinstance(content, str):
            return None
        if role == "system" and not kept:
            kept.append({"role": "system", "content": content})
        elif role == "user":
            if not content.strip():
                return None
            kept.append({"role": "user", "content": content})
            return tuple(kept)
        else:
            return None  # an assistant turn before any user turn: not a prompt
    return None


def prompts_from_records(records: Iterable[Mapping[str, Any]], id_prefix: str) -> Iterator[Prompt]:
    for index, record in enumerate(records):
        messages = first_turn(record)
        if messages is None:
            continue
        yield Prompt(str(record.get("id") or f"{id_prefix}-{index:07d}"), messages)


def read_prompt_file(path: Path) -> list[Prompt]:
    """The setup phase's prompts.jsonl (or any file of accepted records). Ids must be unique: regen resumes by id."""
    try:
        text = read_user_text(path, what="prompt file (the setup phase writes it: ./train-drafter.sh --phase setup)")
        numbered = [(n, line) for n, line in enumerate(text.splitlines(), 1) if line.strip()]
        lines = [(n, parse_user_json(line, where=f"{path}:{n}")) for n, line in numbered]
    except UnreadableFile as error:
        raise PromptError(str(error)) from None
    prompts: dict[str, Prompt] = {}
    for number, record in lines:
        messages = first_turn(record) if isinstance(record, dict) else None
        if messages is None:
            raise PromptError(f"{path}:{number}: no user turn (expected messages, conversations or prompt)")
        prompt_id = str(record.get("id") or f"line-{number}")
        if prompt_id in prompts:
            raise PromptError(f"{path}:{number}: id {prompt_id!r} appears twice (regen resumes by id)")
        prompts[prompt_id] = Prompt(prompt_id, messages)
    if not prompts:
        raise PromptError(f"{path}: no prompts")
    return list(prompts.values())


def write_prompt_file(prompts: Iterable[Prompt], path: Path, limit: int | None = None) -> int:
    lines = [json.dumps(prompt.to_json(), ensure_ascii=False) for prompt in itertools.islice(prompts, limit)]
    write_text_atomic(path, "\n".join(lines) + "\n")
    return len(lines)


def demo_prompts() -> list[Prompt]:
    text = resources.files("kimi_dflash").joinpath("data", DEMO_PROMPTS).read_text(encoding="utf-8")
    return list(prompts_from_records((json.loads(line) for line in text.splitlines() if line.strip()), "demo"))


def perfectblend_records(directory: Path) -> Iterator[Mapping[str, Any]]:
    """Rows of the downloaded PerfectBlend parquet shards, in shard order (needs pyarrow)."""
    try:
        from pyarrow import parquet
    except ImportError:
        how = "run this with SpecForge's environment (the setup phase does) or `pip install pyarrow`"
        raise PromptError(f"reading PerfectBlend's parquet shards needs pyarrow: {how}") from None
    shards = sorted(Path(directory).rglob("*.parquet"))
    if not shards:
        download = f"hf download {PERFECTBLEND_REPO} --repo-type dataset --local-dir {directory}"
        raise PromptError(f"{directory}: no parquet shards; download them first: {download}")
    for shard in shards:
        for batch in parquet.ParquetFile(shard).iter_batches(batch_size=4096, columns=["conversations"]):
            yield from batch.to_pylist()


@dataclass(kw_only=True)
class PromptsOptions:
    source: Literal["demo", "perfectblend"] = option("where the prompts come from", required=True)
    perfectblend_dir: Path | None = option("the downloaded mlabonne/open-perfectblend dataset")
    limit: int | None = option("keep at most this many prompts")
    output: Path = option("the prompt file to write", required=True)

    def check(self) -> None:
        if self.source == "perfectblend" and self.perfectblend_dir is None:
            raise ValueError("--source perfectblend needs --perfectblend-dir")


add_cli_args = declare(PromptsOptions, "Write the regen prompt file (first user turn of each record).")


def main(args: PromptsOptions) -> int:
    try:
        if args.source == "demo":
            prompts: Iterable[Prompt] = demo_prompts()
        else:
            assert args.perfectblend_dir is not None  # check() refused it
            prompts = prompts_from_records(perfectblend_records(args.perfectblend_dir), "perfectblend")
        count = write_prompt_file(prompts, args.output, args.limit)
    except PromptError as error:
        print(f"prompts: {error}", file=sys.stderr)
        return 2
    print(f"prompts: wrote {count} prompts to {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(run(__name__, prog="python -m kimi_dflash.drafter_training.prompts"))
