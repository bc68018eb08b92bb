"""With API_KEY set, every route of vLLM's server needs the key (kimi_dflash.vllm_auth via vLLM's --middleware),
except /health and /ping; the API docs are not served."""

from __future__ import annotations

import asyncio
import json
import urllib.error
import urllib.request
from typing import Any

import pytest

from kimi_dflash.config.validate import load_config
from kimi_dflash.plan import build_plan
from kimi_dflash.vllm_auth import MIDDLEWARE_PATH, RequireKeyEverywhere
from repo_paths import CONFIGS_DIR

KEY = "sk-route-test-0123456789"


def _call(path: str, headers: list[tuple[bytes, bytes]] = (), method: str = "GET", key: str | None = KEY) -> int:
    reached: list[str] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        reached.append(scope["path"])

    sent: list[dict[str, Any]] = []

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    async def receive() -> dict[str, Any]:
        return {"type": "http.request"}

    scope = {"type": "http", "path": path, "method": method, "headers": list(headers), "root_path": ""}
    asyncio.run(RequireKeyEverywhere(app, key=key)(scope, receive, send))
    return 200 if reached else int(sent[0]["status"])


@pytest.mark.parametrize("path", ["/invocations", "/tokenize", "/detokenize", "/metrics", "/docs", "/openapi.json",
                                  "/version", "/v1/models", "/pooling", "/"])  # fmt: skip
def test_every_route_needs_the_key(path: str) -> None:
    assert _call(path) == 401
    assert _call(path, [(b"authorization", b"Bearer wrong")]) == 401
    assert _call(path, [(b"Authorization", f"Bearer {KEY}".encode())]) == 200
    assert _call(path, [(b"authorization", f"bearer {KEY}".encode())]) == 200


def test_health_ping_and_preflight_stay_open() -> None:
    assert _call("/health") == 200 and _call("/ping") == 200
    assert _call("/v1/chat/completions", method="OPTIONS") == 200


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


def _status(url: str, key: str | None = None, body: dict | None = None) -> int:
    request = urllib.request.Request(url, data=None if body is None else json.dumps(body).encode(),
                                     method="GET" if body is None else "POST")  # fmt: skip
    request.add_header("Content-Type", "application/json")
    if key:
        request.add_header("Authorization", f"Bearer {key}")
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status
    except urllib.error.HTTPError as error:
        return error.code


@pytest.mark.server
def test_a_keyed_demo_server_closes_every_route(demo_server_factory: Any) -> None:
    server = demo_server_factory("demo-cpu.env", {"API_KEY": KEY})
    base = server.base_url
    try:
        completion = {"model": server.model, "prompt": "Hello", "max_tokens": 2, "temperature": 0}
        assert _status(f"{base}/invocations", body=completion) == 401  # generated text without a key before
        assert _status(f"{base}/tokenize", body={"model": server.model, "prompt": "hi"}) == 401
        assert _status(f"{base}/detokenize", body={"model": server.model, "tokens": [1]}) == 401
        for path in ("/metrics", "/version", "/v1/models", "/docs", "/openapi.json"):
            assert _status(f"{base}{path}") == 401, path
        assert _status(f"{base}/health") == 200
        assert _status(f"{base}/metrics", KEY) == 200 and _status(f"{base}/v1/models", KEY) == 200
        assert _status(f"{base}/docs", KEY) == 404  # not served at all
        assert _status(f"{base}/v1/completions", KEY, completion) == 200
    finally:
        demo_server_factory.stop(server)
