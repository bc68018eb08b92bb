"""With API_KEY set, every route of vLLM's server needs the key (kimi_dflash.vllm_auth via vLLM's --middleware),
except /health, /ping and a true CORS preflight (which never carries a route's body); the API docs are not
served."""

from __future__ import annotations

import ast
import http.client
import json
import re
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

KEY = "sk-route-test-0123456789"


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


def _command_lines() -> list[tuple[str, bytes]]:
    found = []
    for entry in Path("/proc").iterdir():
        try:
            found.append((entry.name, (entry / "cmdline").read_bytes()))
        except OSError:  # not a process, or one that ended while we looked
            continue
    return found


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
        # Issue 25 item 2: the key reaches vLLM through its environment, never argv, where every user could read it.
        assert not [pid for pid, argv in _command_lines() if KEY.encode() in argv], "the API key is on a command line"
    finally:
        demo_server_factory.stop(server)
