"""The one small blocking HTTP client for paths where speed does not matter (probes, model lists, index pages, wheel
byte ranges); the API key as a bearer header, never in a URL or a message. The benchmark's hot path has its own
client (bench/http1.py); many requests at once use aiohttp (validate/client.py)."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit


@dataclass(frozen=True)
class Reply:
    status: int
    body: bytes
    headers: Mapping[str, str]

    def json(self) -> Any:
        return json.loads(self.body)


class _KeyStaysWithItsOrigin(urllib.request.HTTPRedirectHandler):
    """urllib copies every header to where a redirect points: the key goes only to the scheme, host and port it
    was sent to."""

    def redirect_request(self, req, fp, code, msg, headers, newurl):  # type: ignore[no-untyped-def]
        new = super().redirect_request(req, fp, code, msg, headers, newurl)
        if new is not None and urlsplit(new.full_url)[:2] != urlsplit(req.full_url)[:2]:  # scheme, host:port
            new.remove_header("Authorization")
        return new


_OPENER = urllib.request.build_opener(_KeyStaysWithItsOrigin)


def request(
    url: str,
    *,
    body: Mapping[str, object] | None = None,
    api_key: str | None = None,
    headers: Mapping[str, str] | None = None,
    timeout_s: float = 10.0,
    max_bytes: int | None = None,
) -> Reply:
    """GET ``url``, or POST ``body`` as JSON. An HTTP error status comes back as a Reply (the caller decides what
    it means); a connection that fails raises OSError (urllib's URLError is one), with the reason. ``max_bytes``
    caps what is read (a server that ignores a Range header would otherwise send the whole file)."""
    data = None if body is None else json.dumps(body).encode()
    sent = urllib.request.Request(url, data=data, method="GET" if body is None else "POST")
    if body is not None:
        sent.add_header("Content-Type", "application/json")
    for name, value in (headers or {}).items():
        sent.add_header(name, value)
    if api_key:
        sent.add_header("Authorization", f"Bearer {api_key}")
    try:
        with _OPENER.open(sent, timeout=timeout_s) as response:
            data = response.read() if max_bytes is None else response.read(max_bytes)
            return Reply(response.status, data, dict(response.headers))
    except urllib.error.HTTPError as error:
        return Reply(error.code, error.read(), dict(error.headers or {}))
