"""ASGI middleware for vLLM's API server: with API_KEY set, every route needs the key, not only vLLM's prefixes.

vLLM's own check guards only /v1-like prefixes; /health, /ping and true CORS preflights stay open here (load
balancers, browsers). vLLM constructs it with the app alone, so the key comes from VLLM_API_KEY. Standard library
only; the routes, vLLM file:line references and the checks: docs/security.md."""

from __future__ import annotations

import hashlib
import hmac
import json
import os
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

OPEN_PATHS = frozenset({"/health", "/ping"})
KEY_ENV = "VLLM_API_KEY"
MIDDLEWARE_PATH = "kimi_dflash.vllm_auth.RequireKeyEverywhere"

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]


def _digest(token: str) -> bytes:
    return hashlib.sha256(token.encode("utf-8")).digest()


def _header(scope: Scope, wanted: bytes) -> bytes | None:
    for name, value in scope.get("headers") or ():
        if name.lower() == wanted:
            return bytes(value)
    return None


def is_cors_preflight(scope: Scope) -> bool:
    """A CORS preflight as the Fetch standard defines it (and Starlette's CORSMiddleware recognises it): OPTIONS with
    an Origin and an Access-Control-Request-Method header."""
    return (
        scope.get("type") == "http"
        and scope.get("method") == "OPTIONS"
        and _header(scope, b"origin") is not None
        and _header(scope, b"access-control-request-method") is not None
    )


def _headers_only(send: Send) -> Send:
    """``send`` for a preflight's answer: status and headers pass (with an empty body), no body byte does."""

    async def send_headers(message: MutableMapping[str, Any]) -> None:
        if message["type"] == "http.response.start":
            headers = [(k, v) for k, v in message.get("headers") or () if k.lower() != b"content-length"]
            await send({**message, "headers": [*headers, (b"content-length", b"0")]})
        elif message["type"] == "http.response.body":
            if not message.get("more_body", False):
                await send({"type": "http.response.body", "body": b""})
        else:
            await send(message)

    return send_headers


class RequireKeyEverywhere:
    """Answer 401 to any HTTP or websocket request without ``Authorization: Bearer <VLLM_API_KEY>``, except on
    OPEN_PATHS and true CORS preflights (answered without a body). Without a key in the environment it refuses
    everything but those (fail closed: the plan adds this middleware only when a key is set)."""

    def __init__(self, app: Callable[[Scope, Receive, Send], Awaitable[None]], key: str | None = None) -> None:
        self.app = app
        key = os.environ.get(KEY_ENV, "") if key is None else key
        self._key = _digest(key) if key else None

    def _allowed(self, scope: Scope) -> bool:
        path = str(scope.get("path", "")).removeprefix(str(scope.get("root_path", ""))) or "/"
        if path.rstrip("/") in OPEN_PATHS:
            return True
        authorization = _header(scope, b"authorization")
        if self._key is None or authorization is None:
            return False
        scheme, _, token = authorization.decode("latin-1").partition(" ")
        return scheme.lower() == "bearer" and hmac.compare_digest(_digest(token.strip()), self._key)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope.get("type") not in ("http", "websocket") or self._allowed(scope):
            await self.app(scope, receive, send)
            return
        if is_cors_preflight(scope):
            await self.app(scope, receive, _headers_only(send))
            return
        if scope["type"] == "websocket":
            await send({"type": "websocket.close", "code": 1008})
            return
        body = json.dumps({"error": "Unauthorized: this server needs Authorization: Bearer <API_KEY>"}).encode()
        headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
        await send({"type": "http.response.start", "status": 401, "headers": headers})
        await send({"type": "http.response.body", "body": body})
