"""--extra-body, --header, --endpoint: what the user adds to every request (docs/benchmark.md, "Request shaping")."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from kimi_dflash.core import redaction
from kimi_dflash.core.errors import UserError
from kimi_dflash.core.user_files import UnreadableFile, parse_user_json, read_user_json

# Body keys set from the benchmark's own flags: an --extra-body override would make the stored settings lie.
RESERVED = {
    "model": "--model",
    "messages": "the workload (--dataset)",
    "prompt": "the workload (--dataset)",
    "stream": "--no-stream",
    "max_tokens": "--max-tokens",
    "max_completion_tokens": "--max-tokens",
    "temperature": "--temperature",
    "ignore_eos": "--ignore-eos",
}
CREDENTIAL_NAMES = frozenset({"authorization", "proxy-authorization", "cookie", "set-cookie"})
CREDENTIAL_PARTS = ("key", "token", "secret", "password", "passwd", "auth", "session", "credential")
HEADER_NAME = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")  # RFC 9110 token


def parse_extra_body(text: str) -> dict[str, Any]:
    """``--extra-body``: a JSON object, or ``@FILE`` holding one (guarded reader); reserved keys are refused."""
    if text.startswith("@"):
        source = f"--extra-body {text}"
        body = read_user_json(Path(text[1:]).expanduser(), what="--extra-body file")
    else:
        source = "--extra-body"
        try:
            body = parse_user_json(text, where=source)
        except UnreadableFile as exc:
            if "not valid JSON" not in str(exc):
                raise
            raise UnreadableFile(
                f"{exc}. Quote it for the shell, e.g. "
                """--extra-body '{"chat_template_kwargs": {"thinking": false}, "top_p": 0.95}'."""
            ) from None
    if not isinstance(body, dict):
        raise UserError(f"{source}: expected a JSON object, got {type(body).__name__}.")
    try:
        json.dumps(body, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        raise UserError(
            f"{source}: holds a lone surrogate (an escape like \\ud800 without its pair); fix it."
        ) from None
    clashes = [f"{k} (use {RESERVED[k]})" for k in body if k in RESERVED]
    if clashes:
        raise UserError(f"{source}: the benchmark sets these fields itself: {', '.join(clashes)}.")
    return body


def is_credential(name: str) -> bool:
    lowered = name.strip().lower()
    return lowered in CREDENTIAL_NAMES or any(part in lowered for part in CREDENTIAL_PARTS)


def parse_header(text: str) -> tuple[str, str]:
    """``--header 'Name: value'`` (or ``Name:value``) -> (name, value)."""
    name, colon, value = text.partition(":")
    name = name.strip()
    if not colon or not HEADER_NAME.match(name):
        # The value is never echoed: a malformed header may still carry a credential.
        raise UserError(f"--header {name[:40]!r}: expected NAME:VALUE with a valid header name, e.g. 'X-Tenant: a'.")
    if any(c in value for c in "\r\n"):
        raise UserError(f"--header {name}: the value may not contain a line break.")
    if name.lower() in ("content-type", "content-length", "host", "transfer-encoding", "connection"):
        raise UserError(f"--header {name}: the client sets this header itself.")
    return name, value.strip()


def shown_header(name: str, value: str) -> str:
    """How a header appears in the result and on screen: the value hidden when it is a credential."""
    return f"{name}: {redaction.MASK if is_credential(name) else value}"


def redact_header_arg(text: str) -> str:
    """A ``--header`` argument as it may be stored (for the command line)."""
    name, colon, _ = text.partition(":")
    return f"{name.strip()}: {redaction.MASK}" if colon and is_credential(name) else text
