"""Greedy chat completions with token ids, non-streaming: these tools compare *what* a server generates."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import aiohttp

from kimi_dflash.bench.settings import normalize_base_url
from kimi_dflash.core.redaction import redact_urls

API_KEY_ENV = "OPENAI_API_KEY"


class ServerError(RuntimeError):
    """Unreachable or an error answer (``status``: its HTTP status); the message never shows a URL's credentials."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(redact_urls(message))
        self.status = status


# A server that answers JSON of another shape.
_SHAPE_ERRORS = (KeyError, IndexError, TypeError, AttributeError, ValueError)


@dataclass(frozen=True)
class Completion:
    text: str
    token_ids: list[int] | None  # None when the server does not return them
    completion_tokens: int
    prompt_tokens: int
    finish_reason: str | None  # kept in qualify's reference.json


def api_key_from_env() -> str | None:
    return os.environ.get(API_KEY_ENV) or None


async def request_json(
    session: aiohttp.ClientSession, url: str, api_key: str | None, payload: dict[str, Any] | None = None
) -> Any:
    """GET ``url`` (POST ``payload``) and return the JSON answer; every failure is a ServerError saying which."""
    method = "GET" if payload is None else "POST"
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    try:
        async with session.request(method, url, json=payload, headers=headers) as response:
            if response.status != 200:
                text = (await response.text())[:300]
                raise ServerError(f"{method} {url} answered HTTP {response.status}: {text}", response.status)
            return await response.json(content_type=None)
    except asyncio.TimeoutError:
        raise ServerError(f"{method} {url} did not answer in time; is that the server (and is it healthy)?") from None
    except ValueError:
        raise ServerError(f"{method} {url} did not answer JSON; is that an OpenAI-compatible server?") from None
    except aiohttp.ClientError as error:
        raise ServerError(f"cannot reach {url}: {error}; is the server running?") from None


async def served_model(base_url: str, api_key: str | None = None, timeout_s: float = 30.0) -> str:
    """The first model id the server lists at /v1/models."""
    base = normalize_base_url(base_url)
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=timeout_s)) as session:
        document = await request_json(session, f"{base}/v1/models", api_key)
    try:
        models = [entry.get("id") for entry in document.get("data", []) if entry.get("id")]
    except _SHAPE_ERRORS:
        raise ServerError(f"{base}/v1/models answered JSON that is not a model list") from None
    if not models:
        raise ServerError(f"{base}/v1/models lists no model")
    return str(models[0])


async def chat_greedy(
    base_url: str,
    model: str,
    prompts: Sequence[str],
    *,
    max_tokens: int,
    concurrency: int,
    api_key: str | None = None,
    timeout_s: float = 1800.0,
) -> list[Completion]:
    """Send each prompt as one user turn at temperature 0; return completions in prompt order."""
    base = normalize_base_url(base_url)
    url = f"{base}/v1/chat/completions"
    limit = asyncio.Semaphore(max(1, concurrency))
    connector = aiohttp.TCPConnector(limit=max(1, concurrency), limit_per_host=max(1, concurrency))
    async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=timeout_s)) as session:

        async def one(prompt: str) -> Completion:
            messages = [{"role": "user", "content": prompt}]
            payload = {"model": model, "messages": messages, "max_tokens": max_tokens, "temperature": 0.0, "seed": 0}
            payload |= {"return_token_ids": True, "ignore_eos": False}
            async with limit:
                body = await request_json(session, url, api_key, payload)
            try:
                choice, usage = body["choices"][0], body.get("usage") or {}
                text = (choice.get("message") or {}).get("content") or ""
                tokens = int(usage.get("completion_tokens", 0)), int(usage.get("prompt_tokens", 0))
                return Completion(text, choice.get("token_ids"), *tokens, choice.get("finish_reason"))
            except _SHAPE_ERRORS:
                raise ServerError(f"POST {url} answered JSON without a chat completion") from None

        return list(await asyncio.gather(*(one(p) for p in prompts)))
