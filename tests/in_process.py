"""A verb's entry function run in the test's own process, as its command would run it in a child (a fixtures module:
test files import it). The child's interpreter start and imports (numpy, aiohttp, pydantic: about 0.5 CPU-s a run)
are paid once per worker; the claims stay the same: the exit status is the one the entry point hands sys.exit,
stdout and stderr are captured apart, sys.argv and the environment are the command's. The tests whose claim is the
process boundary itself (signals, a real exit, what a fresh interpreter imports) keep running the real command."""

from __future__ import annotations

import contextlib
import io
import os
import subprocess
import sys
import warnings
from collections.abc import Iterator, Mapping, Sequence

from kimi_dflash.core import options


def _print_warning(
    message: Warning | str,
    category: type[Warning],
    filename: str,
    lineno: int,
    file: object = None,
    line: str | None = None,
) -> None:
    sys.stderr.write(warnings.formatwarning(message, category, filename, lineno, line))


@contextlib.contextmanager
def _as_the_command(argv: list[str], environ: Mapping[str, str]) -> Iterator[None]:
    """sys.argv, os.environ and warnings as the child would have them, restored afterwards."""
    saved_argv, saved_environ = sys.argv, dict(os.environ)
    sys.argv = argv
    _set_environ(dict(environ))
    try:
        with warnings.catch_warnings():  # a warning goes to stderr, as the child prints it (pytest would keep it)
            warnings.showwarning = _print_warning
            yield
    finally:
        sys.argv = saved_argv
        _set_environ(saved_environ)


def _set_environ(wanted: dict[str, str]) -> None:
    """Only the variables that differ change (no moment without PATH for another thread)."""
    for key in [k for k in os.environ if k not in wanted]:
        del os.environ[key]
    os.environ.update({k: v for k, v in wanted.items() if os.environ.get(k) != v})


def run_verb(
    module: str, args: Sequence[str], *, argv0: str, prog: str | None = None, env: Mapping[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """``options.run(module, args)`` here, with ``argv0`` as sys.argv[0] and ``env`` (default: this process's) as the
    whole environment; what the child would have exited with, printed and written to stderr. A usage error's
    SystemExit is its exit status; any other exception propagates (the child would have printed a traceback)."""
    out, err = io.StringIO(), io.StringIO()
    command = _as_the_command([argv0, *args], os.environ if env is None else env)
    with command, contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = options.run(module, list(args), prog=prog)
        except SystemExit as exited:
            code = exited.code if isinstance(exited.code, int) else 0 if exited.code is None else 1
            if isinstance(exited.code, str):
                print(exited.code, file=sys.stderr)
    return subprocess.CompletedProcess([argv0, *args], code, out.getvalue(), err.getvalue())
