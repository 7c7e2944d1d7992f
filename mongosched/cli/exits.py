"""Exit codes of the ``mongosched`` command, and the error that ends it with one."""

from __future__ import annotations

__all__ = [
    "EXIT_CONNECT",
    "EXIT_FAILED",
    "EXIT_INTERRUPTED",
    "EXIT_NOT_FOUND",
    "EXIT_OK",
    "EXIT_PIPE",
    "EXIT_USAGE",
    "CommandError",
]

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_NOT_FOUND = 3
EXIT_CONNECT = 4
EXIT_INTERRUPTED = 130
EXIT_PIPE = 141
"""The output was closed early: 128 + SIGPIPE, what a program ended by it reports."""


class CommandError(Exception):
    """Ends the command with one line on stderr and an exit code."""

    def __init__(self, message: str, code: int = EXIT_FAILED) -> None:
        super().__init__(message)
        self.code = code
