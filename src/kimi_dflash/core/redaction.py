"""The project's one redaction helper: what must never reach a file, a log, a dry run or an error message.

A secret option in any spelling argparse or vLLM's parser would accept (abbreviations, ``--api_key``, a dotted
sub-key: vllm/utils/argparse_utils.py; docs/security.md), credentials in a URL's userinfo, and secret-looking URL
query parameters (``redact_query``). Standard library only, in core/: every package may use it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

SECRET_OPTIONS = ("--api-key",)
MASK = "***"
# The shortest prefix argparse could take as an abbreviation is "--a"; anything from there on counts.
_MIN_PREFIX = 3
# After a scheme, any userinfo; without one (``user:key@host:8000``), only a user:password pair.
_USERINFO = re.compile(
    r"(?P<head>[A-Za-z][A-Za-z0-9+.-]*://)[^\s/@'\"]+@(?=[^\s@])"
    r"|(?P<bare>(?:^|(?<=[\s=,'\"(])))[^\s/@:'\"]+:[^\s/@'\"]+@(?=[^\s@])"
)


def spelled_option(arg: str, options: Iterable[str]) -> str | None:
    """The option of ``options`` that ``arg`` spells in any way argparse (or vLLM's parser) would take it: exact,
    abbreviated, with underscores, with "=VALUE" or a dotted sub-key (``--api_k.x=K`` -> ``--api-key``); None if
    none."""
    flag = "--" + arg[2:].partition("=")[0].partition(".")[0].replace("_", "-")
    if not arg.startswith("--") or len(flag) < _MIN_PREFIX:
        return None
    return next((option for option in options if option.startswith(flag)), None)


def secret_option(arg: str, options: Iterable[str] = SECRET_OPTIONS) -> str | None:
    return spelled_option(arg, options)


def redact_url(text: str) -> str:
    """``text`` with every URL userinfo (``user:password@``) replaced by ***."""
    return _USERINFO.sub(lambda m: f"{m.group('head') or ''}{MASK}@", text)


# A query-string parameter whose name says it carries a secret (?api_key=, &token=, X-Amz-Signature=, ...).
_SECRET_QUERY = re.compile(
    r"(?P<name>[?&;][^=&#;\s'\"]*?(?:key|token|secret|passw|auth|sig|credential|session)[^=&#;\s'\"]*=)"
    r"[^&#;\s'\"]*",
    re.IGNORECASE,
)


def redact_query(text: str) -> str:
    """Secret-looking URL query parameters (``?api_key=K``, ``&token=T``) get *** for a value; others are kept."""
    return _SECRET_QUERY.sub(lambda m: f"{m.group('name')}{MASK}", text)


def redact_argv(argv: Sequence[str], options: Iterable[str] = SECRET_OPTIONS) -> list[str]:
    """The command line with secret option values and URL credentials replaced, so it can be stored and shown."""
    options = tuple(options)
    out: list[str] = []
    hide_next = False
    for arg in argv:
        if hide_next:
            out.append(MASK)
            hide_next = False
            continue
        if secret_option(arg, options):
            flag, eq, _value = arg.partition("=")
            if eq:
                out.append(f"{flag}={MASK}")
            else:
                out.append(arg)
                hide_next = True
            continue
        out.append(redact_url(arg))
    return out


def split_secret(argv: Sequence[str], options: Iterable[str] = SECRET_OPTIONS) -> tuple[list[str], str | None]:
    """``argv`` without its secret option (any spelling) and the secret's value (None when absent)."""
    options = tuple(options)
    kept: list[str] = []
    secret: str | None = None
    take_next = False
    for arg in argv:
        if take_next:
            secret, take_next = arg, False
            continue
        if secret_option(arg, options):
            _flag, eq, value = arg.partition("=")
            if eq:
                secret = value
            else:
                take_next = True
            continue
        kept.append(arg)
    return kept, secret


def redact_values(text: str, secrets: Iterable[str | None]) -> str:
    """``text`` with each known secret value (at least 4 characters) replaced by ***."""
    for secret in secrets:
        if secret and len(secret) >= 4:
            text = text.replace(secret, MASK)
    return text
