"""Regenerate the training replies with the target itself behind `serve.sh`, so the drafter learns *its* tokens.
Files, resume and retries: docs/drafter-training.md (regen)."""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from kimi_dflash.core.atomic_write import write_json_atomic, write_text_atomic
from kimi_dflash.core.formatting import duration
from kimi_dflash.drafter_training.prompts import Prompt
from kimi_dflash.validate.client import ServerError, request_json

PART_PATTERN = re.compile(r"^part-(\d{5})\.jsonl$")
FAILED_FILE = "failed.jsonl"
SUMMARY_FILE = "summary.json"
RETRYABLE_STATUS = frozenset({408, 429, 500, 502, 503, 504})


@dataclass(frozen=True)
class RegenSettings:
    base_url: str
    model: str
    max_tokens: int
    temperature: float = 0.0
    concurrency: int = 8
    retries: int = 3
    timeout_s: float = 600.0
    chunk_size: int = 64
    backoff_s: float = 1.0
    api_key: str | None = None


@dataclass
class RegenSummary:
    """summary.json: these fields, with `done` after `total`."""

    total: int
    already_done: int
    completed_this_run: int = 0
    failed: int = 0
    retried_attempts: int = 0  # attempts beyond the first, over all prompts
    output_tokens_this_run: int = 0
    truncated: int = 0  # replies that hit max_tokens (kept: still the target's own tokens)
    interrupted: bool = False

    @property
    def done(self) -> int:
        return self.already_done + self.completed_this_run

    def to_json(self) -> dict[str, Any]:
        return {"total": self.total, "done": self.done, **asdict(self)}


def part_files(out_dir: Path) -> list[Path]:
    return sorted(p for p in Path(out_dir).glob("part-*.jsonl") if PART_PATTERN.match(p.name))


def read_records(out_dir: Path) -> Iterable[dict[str, Any]]:
    for path in part_files(out_dir):
        for line in path.read_text(encoding="utf-8").splitlines():
            if line.strip():
                yield json.loads(line)


def record_from_response(prompt: Prompt, response: Mapping[str, Any]) -> dict[str, Any]:
    """The regen record: the conversation with the target's reply (and token ids when sent); ServerError without one."""
    choices = response.get("choices") if isinstance(response, Mapping) else None
    if not choices or not isinstance(choices[0], Mapping):
        raise ServerError("response without choices")
    choice = choices[0]
    message = choice.get("message") or {}
    content = message.get("content")
    reasoning = message.get("reasoning_content") or message.get("reasoning")
    if content is None and not reasoning:
        raise ServerError("response without content")
    reply: dict[str, Any] = {"role": "assistant", "content": content or ""}
    if reasoning:
        reply["reasoning_content"] = reasoning
    record: dict[str, Any] = {
        "id": prompt.id,
        "conversations": [*(dict(m) for m in prompt.messages), reply],
        "finish_reason": choice.get("finish_reason"),
    }
    if isinstance(response.get("prompt_token_ids"), list) and isinstance(choice.get("token_ids"), list):
        record["prompt_token_ids"] = [int(t) for t in response["prompt_token_ids"]]
        record["output_token_ids"] = [int(t) for t in choice["token_ids"]]
    usage = response.get("usage")
    if isinstance(usage, Mapping):
        record["usage"] = {k: usage.get(k) for k in ("prompt_tokens", "completion_tokens")}
    return record


class ChunkWriter:
    def __init__(self, out_dir: Path, chunk_size: int) -> None:
        self.out_dir = Path(out_dir)
        self.chunk_size = chunk_size
        indices = (int(match.group(1)) for p in part_files(self.out_dir) if (match := PART_PATTERN.match(p.name)))
        self.next_index = max(indices, default=-1) + 1
        self.pending: list[dict[str, Any]] = []

    def add(self, record: dict[str, Any]) -> None:
        self.pending.append(record)
        if len(self.pending) >= self.chunk_size:
            self.flush()

    def flush(self) -> None:
        if not self.pending:
            return
        text = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in self.pending)
        write_text_atomic(self.out_dir / f"part-{self.next_index:05d}.jsonl", text)
        self.next_index += 1
        self.pending = []


async def _regenerate_one(session: Any, prompt: Prompt, settings: RegenSettings, summary: RegenSummary) -> dict:
    url = settings.base_url.rstrip("/") + "/v1/chat/completions"
    body = {"model": settings.model, "messages": [dict(m) for m in prompt.messages], "max_tokens": settings.max_tokens}
    body |= {"temperature": settings.temperature, "stream": False, "return_token_ids": True}  # vLLM: token ids too
    attempt = 0
    while True:
        try:
            reply = await request_json(session, url, settings.api_key, body)
            return record_from_response(prompt, reply)
        except ServerError as failure:
            if attempt >= settings.retries or failure.status not in (None, *RETRYABLE_STATUS):
                raise ServerError(f"{failure} (after {attempt + 1} attempt(s))", failure.status) from None
            summary.retried_attempts += 1
            await asyncio.sleep(settings.backoff_s * (2**attempt))
            attempt += 1


async def regenerate(
    prompts: list[Prompt],
    out_dir: Path,
    settings: RegenSettings,
    say: Callable[[str], None] = print,
    progress_interval_s: float = 10.0,
) -> RegenSummary:
    """Regenerate every prompt not yet in `out_dir`; see the module docstring for the files."""
    import aiohttp

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    done = {str(record["id"]) for record in read_records(out_dir)}
    todo = [p for p in prompts if p.id not in done]
    summary = RegenSummary(total=len(prompts), already_done=len(prompts) - len(todo))
    writer = ChunkWriter(out_dir, settings.chunk_size)
    failures: list[dict[str, str]] = []
    if summary.already_done:
        say(f"regen: resuming: {summary.already_done}/{summary.total} prompts already regenerated in {out_dir}")
    queue: asyncio.Queue[Prompt] = asyncio.Queue()
    for prompt in todo:
        queue.put_nowait(prompt)
    started = time.monotonic()
    last_report = started

    def report(final: bool = False) -> None:
        elapsed = time.monotonic() - started
        finished = summary.completed_this_run + summary.failed
        rate = finished / elapsed if elapsed > 0 else 0.0
        left = len(todo) - finished
        eta = duration(left / rate) if rate > 0 else "?"
        counts = f"{summary.done}/{summary.total} done, {summary.failed} failed, {summary.retried_attempts} retries"
        tokens = summary.output_tokens_this_run / max(elapsed, 1e-9)
        say(f"regen: {counts}, {rate:.2f} prompts/s, {tokens:.0f} output tok/s" + ("" if final else f", ETA {eta}"))

    async def worker(session: Any) -> None:
        nonlocal last_report
        while True:
            try:
                prompt = queue.get_nowait()
            except asyncio.QueueEmpty:
                return
            try:
                record = await _regenerate_one(session, prompt, settings, summary)
            except ServerError as failure:
                summary.failed += 1
                failures.append({"id": prompt.id, "reason": str(failure)})
            else:
                summary.completed_this_run += 1
                summary.output_tokens_this_run += len(record.get("output_token_ids") or [])
                summary.truncated += record.get("finish_reason") == "length"
                writer.add(record)
            now = time.monotonic()
            if now - last_report >= progress_interval_s:
                last_report = now
                report()

    timeout = aiohttp.ClientTimeout(total=settings.timeout_s)
    connector = aiohttp.TCPConnector(limit=settings.concurrency)
    limits = f"concurrency {settings.concurrency}, max_tokens {settings.max_tokens}, temperature {settings.temperature}"
    say(f"regen: {len(todo)} prompts to regenerate with {settings.model} at {settings.base_url} ({limits})")
    try:
        async with aiohttp.ClientSession(timeout=timeout, connector=connector) as session:
            await asyncio.gather(*(worker(session) for _ in range(min(settings.concurrency, len(todo)))))
    except (asyncio.CancelledError, KeyboardInterrupt):
        summary.interrupted = True
        raise
    finally:
        writer.flush()  # nothing finished is lost, interrupted or not
        write_text_atomic(out_dir / FAILED_FILE, "".join(json.dumps(f) + "\n" for f in failures))
        write_json_atomic(out_dir / SUMMARY_FILE, summary.to_json())
        report(final=True)
    return summary
