"""RQ: the task is a plain function (its worker forks a process per job)."""

from __future__ import annotations


def noop() -> None:
    return None
