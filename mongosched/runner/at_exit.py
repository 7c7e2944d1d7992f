"""Stopping the runners still running when the process exits (:data:`runners`)."""

from __future__ import annotations

import atexit
import logging
import os
import threading
import weakref
from typing import Protocol

__all__ = ["RunnersAtExit", "Stoppable", "runners"]

log = logging.getLogger("mongosched.runner")


class Stoppable(Protocol):
    """What is stopped at exit (a :class:`~mongosched.runner.runner.Runner`)."""

    @property
    def name(self) -> str: ...

    @property
    def is_running(self) -> bool: ...

    @property
    def shutdown_timeout(self) -> float: ...

    def stop(self, graceful: bool = True, timeout: float | None = 30.0) -> bool: ...


class RunnersAtExit:
    """Stops the runners still running when the process exits normally, before the
    interpreter shuts the worker pools (which would leave claims that never start).

    ``threading`` runs its exit hooks before it waits for the pools' threads, in the
    reverse order of registration; ours is registered after ``concurrent.futures``'s,
    so it runs first. Where that hook does not exist, :mod:`atexit` is the fallback.
    """

    def __init__(self) -> None:
        self._runners: weakref.WeakSet[Stoppable] = weakref.WeakSet()
        self._registered = False
        self._lock = threading.Lock()

    def add(self, runner: Stoppable) -> None:
        with self._lock:
            self._runners.add(runner)
            if not self._registered:
                self._registered = True
                register = getattr(threading, "_register_atexit", None)
                try:
                    (register or atexit.register)(self.stop_all)
                except RuntimeError:  # already shutting down
                    atexit.register(self.stop_all)

    def discard(self, runner: Stoppable) -> None:
        with self._lock:
            self._runners.discard(runner)

    def stop_all(self) -> None:
        with self._lock:
            runners = list(self._runners)
        for runner in runners:
            if runner.is_running:
                log.info("runner %s: the process is exiting; stopping gracefully", runner.name)
                runner.stop(graceful=True, timeout=runner.shutdown_timeout)


runners = RunnersAtExit()
"""This process's runners to stop at its exit."""


def _reset_after_fork() -> None:
    global runners
    runners = RunnersAtExit()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_reset_after_fork)
