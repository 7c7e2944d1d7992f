"""Waiting on conditions (never on fixed sleeps)."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def wait_for(
    condition: Callable[[], T], timeout: float = 10.0, interval: float = 0.01, message: str = ""
) -> T:
    """Poll ``condition`` until it returns something truthy; return that. Fails the test
    with ``message`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {message or condition}")
        time.sleep(interval)


def wait_child(pid: int, timeout: float = 30.0) -> int | None:
    """Wait for forked child ``pid`` to exit; its exit code, or None when it was still
    running after ``timeout`` seconds (it is then killed)."""
    deadline = time.monotonic() + timeout
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        if time.monotonic() >= deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            return None
        time.sleep(0.02)
