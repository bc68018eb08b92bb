"""The project's one redaction helper: what must never reach a file, a log, a dry run or an error message.

A secret option in any spelling argparse or vLLM's parser would accept (abbreviations, ``--api_key``, a dotted
sub-key: vllm/utils/argparse_utils.py; docs/security.md), credentials in a URL's userinfo, and secret-looking URL
query parameters (``redact_query``), each replaced by MASK. Standard library only, in core/: every package may use it.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterable, Iterator, Sequence
from urllib.parse import urlsplit

# vLLM's options that carry a secret: the fields its own log masks (0.32: _SENSITIVE_ARG_FIELDS in
# vllm/entrypoints/serve/utils/api_utils.py; --watermark-config holds the watermark's secret key).
SECRET_OPTIONS = ("--api-key", "--hf-token", "--watermark-config")
# vLLM options that a secret one begins with but that are options of their own: argparse takes an exact match first.
_OWN_OPTIONS = ("--watermark",)
MASK = "***"  # the one mask, wherever a secret was
# The shortest prefix argparse could take as an abbreviation is "--a"; anything from there on counts.
_MIN_PREFIX = 3
# A URL in free text: from its scheme (or a scheme-relative //, or a bare user:password@) to the next blank.
_URL_IN_TEXT = re.compile(r"(?:[A-Za-z][A-Za-z0-9+.-]*:)?//\S*|(?<![^\s=,'\"(])[^\s/@:'\"=,(]+:\S*@\S*")


def spelled_option(arg: str, options: Iterable[str] = SECRET_OPTIONS) -> str | None:
    """The option of ``options`` that ``arg`` spells in any way argparse (or vLLM's parser) would take it: exact,
    abbreviated, with underscores, with "=VALUE" or a dotted sub-key (``--api_k.x=K`` -> ``--api-key``); None if
    none."""
    flag = "--" + arg[2:].partition("=")[0].partition(".")[0].replace("_", "-")
    if not arg.startswith("--") or len(flag) < _MIN_PREFIX or flag in _OWN_OPTIONS:
        return None
    return next((option for option in options if option.startswith(flag)), None)


secret_option = spelled_option  # by default, of the secret options


def _userinfo(url: str) -> tuple[int, int] | None:
    """Where ``url``'s userinfo is (start, end; the @ follows): all before the netloc's last @, as
    urllib.parse.urlsplit reads it (quotes, blanks and @ included), scheme-relative (``//u:p@h``) too, and a
    scheme-less ``user:password@host``. None: it has none."""
    bare = "//" not in url.partition("@")[0]
    try:
        parts = urlsplit("//" + url if bare else url)
    except ValueError:  # an unbalanced [ in the host: whatever precedes an @ counts
        return (0, url.rindex("@")) if "@" in url else None
    if (parts.password if bare else parts.username) is None:
        return None
    start = 0 if bare else url.index("//") + 2
    netloc = re.match(r"[^/?#]*", url[start:])[0]  # type: ignore[index]
    return start, start + netloc.rindex("@")


def redact_url(url: str) -> str:
    """One URL (an option's value) with its userinfo replaced by MASK."""
    span = _userinfo(url)
    return url if span is None else f"{url[: span[0]]}{MASK}{url[span[1] :]}"


def has_credentials(url: str) -> bool:
    return redact_url(url) != url


def redact_urls(text: str) -> str:
    """Free text (a message) with the userinfo of every URL in it replaced by MASK."""
    return _URL_IN_TEXT.sub(lambda m: redact_url(m[0]), text)


# A query-string parameter whose name says it carries a secret (?api_key=, &token=, X-Amz-Signature=, ...).
_SECRET_QUERY = re.compile(
    r"(?P<name>[?&;][^=&#;\s'\"]*?(?:key|token|secret|passw|auth|sig|credential|session)[^=&#;\s'\"]*=)"
    r"[^&#;\s'\"]*",
    re.IGNORECASE,
)


def redact_query(text: str) -> str:
    """Secret-looking URL query parameters (``?api_key=K``, ``&token=T``) get *** for a value; others are kept."""
    return _SECRET_QUERY.sub(lambda m: f"{m.group('name')}{MASK}", text)


def _marked(argv: Sequence[str], options: Iterable[str]) -> Iterator[tuple[str, str | None]]:
    """Each argument with what it is: "option" (a secret option, maybe with =VALUE), "value" (one of its values: up
    to the next option, as vLLM's --api-key takes several) or None."""
    options, values = tuple(options), False
    for arg in argv:
        kind = "option" if secret_option(arg, options) else "value" if values and not arg.startswith("-") else None
        values = (kind == "option" and "=" not in arg) or kind == "value"
        yield arg, kind


def _value(arg: str) -> str:
    """What an argument gives: VALUE of ``--flag=VALUE``, the argument itself when it is no option."""
    return arg.partition("=")[2] if arg.startswith("-") else arg


def redact_argv(argv: Sequence[str], options: Iterable[str] = SECRET_OPTIONS) -> list[str]:
    """The command line with secret option values and URL credentials replaced, so it can be stored and shown."""
    shown = []
    for arg, kind in _marked(argv, options):
        value = _value(arg)
        head = arg[: len(arg) - len(value)]
        shown.append(head + MASK * bool(value) if kind else redact_urls(head + redact_url(value)))
    return shown


def redact_command(text: str) -> str:
    """A command line kept as one string (EXTRA_VLLM_ARGS) as redact_argv shows it; as it is when it holds no
    secret. Text that cannot be split (an open quote) is split on blanks."""
    try:
        args = shlex.split(text)
    except ValueError:
        return " ".join(redact_argv([word.strip("\"'") for word in text.split()]))
    shown = redact_argv(args)
    return text if shown == args else shlex.join(shown)


def secret_values(argv: Sequence[str], options: Iterable[str] = SECRET_OPTIONS) -> list[str]:
    """Every value a secret option has in ``argv`` (a repeated option, several), in order."""
    return [_value(arg) if kind == "option" else arg for arg, kind in _marked(argv, options) if kind and _value(arg)]


def split_secret(argv: Sequence[str], options: Iterable[str] = SECRET_OPTIONS) -> tuple[list[str], str | None]:
    """``argv`` without its secret option (any spelling) and the secret's value (None when absent; the last)."""
    values = secret_values(argv, options)
    return [arg for arg, kind in _marked(argv, options) if kind is None], values[-1] if values else None


def argv_secrets(argv: Sequence[str], options: Iterable[str] = SECRET_OPTIONS) -> list[str]:
    """What a message quoting ``argv`` must not show: every secret option's value and every URL's userinfo."""
    spans = ((_value(arg), _userinfo(_value(arg))) for arg in argv)
    return secret_values(argv, options) + [value[span[0] : span[1]] for value, span in spans if span]


def redact_values(text: str, secrets: Iterable[str | None]) -> str:
    """``text`` with each known secret value (at least 4 characters) replaced by ***."""
    for secret in sorted(filter(None, secrets), key=len, reverse=True):  # a longer one may hold a shorter one
        if len(secret) >= 4:
            text = text.replace(secret, MASK)
    return text
