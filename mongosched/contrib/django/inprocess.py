"""The in-process runner (``MONGOSCHED["RUN_IN_PROCESS"] = True``).

It starts on the first request a process serves (Django's ``request_started``
signal), once per process, and again in a forked child (gunicorn, uWSGI with
``enable-threads``) on the child's first request. Management commands serve no
requests, so ``migrate``, ``shell`` and ``mongosched worker`` never start one.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .conf import get_app, options

if TYPE_CHECKING:
    from ...runner import Runner

__all__ = ["start_runner", "stop_runner"]


def start_runner() -> Runner:
    """Start this process's runner now (if it is not running), with the configured
    ``WORKERS`` and ``QUEUES``; returns it. For servers that want it before the first
    request, e.g. from a gunicorn ``post_fork`` hook."""
    return get_app().start_runner(workers=options()["WORKERS"])


def stop_runner(graceful: bool = True, timeout: float | None = 30.0) -> bool:
    """Stop this process's in-process runner (a later request starts a new one when
    ``RUN_IN_PROCESS`` is on). Returns True when no job is left in flight."""
    return get_app().stop_runner(graceful=graceful, timeout=timeout)


def on_request_started(sender: Any = None, **kwargs: Any) -> None:
    """``request_started`` receiver: start the runner if configured and not running
    (:meth:`App.start_runner` is cheap once it runs; it starts afresh after a fork)."""
    if options()["RUN_IN_PROCESS"]:
        start_runner()
