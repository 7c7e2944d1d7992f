"""The in-process runner (``MONGOSCHED["RUN_IN_PROCESS"] = True``).

It starts on the first request a process serves (Django's ``request_started``
signal), once per process, and again in a forked child (gunicorn, uWSGI with
``enable-threads``) on the child's first request. Management commands serve no
requests, so ``migrate``, ``shell`` and ``mongosched worker`` never start one.
"""

from __future__ import annotations

import os
import threading
from typing import TYPE_CHECKING, Any

from .conf import get_app, options

if TYPE_CHECKING:
    from ...runner import Runner

__all__ = ["start_runner", "stop_runner"]

_lock = threading.Lock()
_runner: Runner | None = None
_pid: int | None = None


def start_runner() -> Runner:
    """Start this process's runner now (if it is not running), with the configured
    ``WORKERS`` and ``QUEUES``; returns it. For servers that want it before the first
    request, e.g. from a gunicorn ``post_fork`` hook."""
    global _runner, _pid
    workers = options()["WORKERS"]
    with _lock:
        runner = get_app().start_runner(workers=workers)
        _runner, _pid = runner, os.getpid()
        return runner


def stop_runner(graceful: bool = True, timeout: float | None = 30.0) -> bool:
    """Stop this process's in-process runner (a later request starts a new one when
    ``RUN_IN_PROCESS`` is on). Returns True when no job is left in flight."""
    global _runner, _pid
    with _lock:
        runner, mine = _runner, _pid == os.getpid()
        _runner, _pid = None, None
    if runner is None or not mine:
        return True
    return runner.stop(graceful=graceful, timeout=timeout)


def on_request_started(sender: Any = None, **kwargs: Any) -> None:
    """``request_started`` receiver: start the runner if configured and not running."""
    runner = _runner
    if runner is not None and _pid == os.getpid() and runner.is_running:
        return
    if options()["RUN_IN_PROCESS"]:
        start_runner()


def _after_fork_in_child() -> None:
    global _lock, _runner, _pid
    _lock = threading.Lock()  # another thread may have held it at the fork
    _runner, _pid = None, None


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
