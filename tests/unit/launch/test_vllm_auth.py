"""With API_KEY set, every route of vLLM's server needs the key (kimi_dflash.vllm_auth via vLLM's --middleware),
except /health, /ping and a true CORS preflight (which never carries a route's body); the API docs are not
served."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from kimi_dflash.config.validate import load_config
from kimi_dflash.plan import build_plan
from kimi_dflash.vllm_auth import MIDDLEWARE_PATH, RequireKeyEverywhere
from repo_paths import CONFIGS_DIR

KEY = "sk-route-test-0123456789"


PREFLIGHT = [(b"origin", b"https://evil.example"), (b"access-control-request-method", b"GET")]


ROUTE_BODY = b"vllm:secret_metric 1\n" * 1000


def _call(path: str, headers: list[tuple[bytes, bytes]] = (), method: str = "GET", key: str | None = KEY) -> int:
    return _exchange(path, headers, method, key)[0]


def _exchange(
    path: str, headers: list[tuple[bytes, bytes]] = (), method: str = "GET", key: str | None = KEY
) -> tuple[int, bytes, dict[bytes, bytes]]:
    """Status, body and headers the client gets; the app behind the middleware is a route that answers every
    method with a large body (as vLLM's /metrics mount does)."""

    async def app(scope: Any, receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-length", str(len(ROUTE_BODY)).encode())]})  # fmt: skip
        await send({"type": "http.response.body", "body": ROUTE_BODY[:10], "more_body": True})
        await send({"type": "http.response.body", "body": ROUTE_BODY[10:]})

    sent: list[dict[str, Any]] = []

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    async def receive() -> dict[str, Any]:
        return {"type": "http.request"}

    scope = {"type": "http", "path": path, "method": method, "headers": list(headers), "root_path": ""}
    asyncio.run(RequireKeyEverywhere(app, key=key)(scope, receive, send))
    body = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    return int(sent[0]["status"]), body, dict(sent[0]["headers"])


@pytest.mark.parametrize("path", ["/invocations", "/tokenize", "/detokenize", "/metrics", "/docs", "/openapi.json",
                                  "/version", "/v1/models", "/pooling", "/"])  # fmt: skip
def test_every_route_needs_the_key(path: str) -> None:
    assert _call(path) == 401
    assert _call(path, [(b"authorization", b"Bearer wrong")]) == 401
    assert _call(path, [(b"Authorization", f"Bearer {KEY}".encode())]) == 200
    assert _call(path, [(b"authorization", f"bearer {KEY}".encode())]) == 200


def test_health_ping_and_preflight_stay_open() -> None:
    assert _call("/health") == 200 and _call("/ping") == 200
    assert _call("/v1/chat/completions", PREFLIGHT, method="OPTIONS") == 200


@pytest.mark.parametrize("path", ["/metrics", "/metrics/", "/metrics/x", "/v1/models", "/invocations"])
def test_options_that_is_not_a_preflight_needs_the_key(path: str) -> None:
    # vLLM's /metrics mount answers any method: a bare OPTIONS read the whole Prometheus text without the key.
    for headers in ([], PREFLIGHT[:1], PREFLIGHT[1:]):
        status, body, _ = _exchange(path, headers, method="OPTIONS")
        assert status == 401 and ROUTE_BODY[:20] not in body, (path, headers)
    assert _exchange(path, [(b"authorization", f"Bearer {KEY}".encode())], method="OPTIONS")[1] == ROUTE_BODY


def test_a_true_preflight_never_carries_a_routes_body() -> None:
    status, body, headers = _exchange("/metrics", PREFLIGHT, method="OPTIONS")
    assert status == 200 and body == b"" and headers[b"content-length"] == b"0"


def test_without_a_key_it_fails_closed() -> None:
    assert _call("/v1/models", [(b"authorization", b"Bearer ")], key="") == 401
    assert _call("/health", key="") == 200


def test_the_plan_adds_the_middleware_only_with_a_key() -> None:
    config = CONFIGS_DIR / "demo-cpu.env"
    keyed = build_plan(load_config(config, environ={"API_KEY": KEY}), "python", "/cache")
    plain = build_plan(load_config(config, environ={}), "python", "/cache")
    assert MIDDLEWARE_PATH in keyed.argv and "--disable-fastapi-docs" in keyed.argv
    assert MIDDLEWARE_PATH not in plain.argv and "--middleware" not in plain.argv
    assert KEY not in " ".join(keyed.argv) and KEY not in keyed.render()
