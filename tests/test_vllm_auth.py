"""With API_KEY set, every route of vLLM's server needs the key (kimi_dflash.vllm_auth via vLLM's --middleware),
except /health, /ping and a true CORS preflight (which never carries a route's body); the API docs are not
served."""

from __future__ import annotations

import ast
import asyncio
import http.client
import json
import re
import urllib.error
import urllib.request
from pathlib import Path
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


ROUTE_CALLS = frozenset({"get", "post", "put", "delete", "patch", "api_route", "route", "websocket", "add_api_route",
                         "Mount"})  # fmt: skip
EXTRA_PATHS = ("/", "/metrics/", "/metrics/x", "/metricsx", "/redoc", "/openapi.json", "/no-such-route")
OPEN = ("/health", "/ping")


def vllm_routes() -> list[str]:
    """Every path the installed vLLM's API server code registers (route decorators, add_api_route, Mount), read
    from its source; path parameters filled with "x"."""
    import vllm

    found = set(EXTRA_PATHS)
    for source in Path(vllm.__file__).parent.joinpath("entrypoints").rglob("*.py"):
        for node in ast.walk(ast.parse(source.read_text(encoding="utf-8"))):
            if not (isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant)):
                continue
            name = getattr(node.func, "attr", getattr(node.func, "id", None))
            path = node.args[0].value
            if name in ROUTE_CALLS and isinstance(path, str) and path.startswith("/"):
                found.add(re.sub(r"\{[^}]*\}", "x", path))
    return sorted(found)


def _raw(port: int, method: str, path: str, headers: dict[str, str]) -> tuple[int, bytes]:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        connection.request(method, path, body=b"" if method in ("POST", "PUT", "PATCH") else None, headers=headers)
        response = connection.getresponse()
        return response.status, response.read()
    finally:
        connection.close()


def _every_method_on_every_route(port: int) -> None:
    origin = {"Origin": "https://evil.example"}
    preflight = {**origin, "Access-Control-Request-Method": "GET"}
    requests = [(m, {}) for m in ("GET", "HEAD", "POST", "PUT", "DELETE", "PATCH", "OPTIONS")]
    requests += [("OPTIONS", origin), ("GET", preflight)]
    routes = vllm_routes()
    assert {"/metrics", "/invocations", "/tokenize", "/v1/chat/completions"} <= set(routes)
    open_answers = []
    for path in routes:
        if path.rstrip("/") in OPEN:
            open_answers += [_raw(port, method, path, headers)[0] for method, headers in requests]
            continue
        for method, headers in requests:
            status, body = _raw(port, method, path, headers)
            assert status == 401, (method, path, headers, status, body[:200])
        status, body = _raw(port, "OPTIONS", path, preflight)
        assert status != 401 and body == b"", (path, status, body[:200])  # a preflight carries no route's body
    assert open_answers and 401 not in open_answers


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
        _every_method_on_every_route(server.port)
    finally:
        demo_server_factory.stop(server)
