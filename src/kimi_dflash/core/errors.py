"""Errors the user can fix. The CLIs print their message (no traceback) and exit with ``exit_code``."""

from __future__ import annotations


class UserError(Exception):
    """Bad input or an unreachable server: the message names the problem and the fix."""

    def __init__(self, message: str, exit_code: int = 2) -> None:
        super().__init__(message)
        self.exit_code = exit_code
