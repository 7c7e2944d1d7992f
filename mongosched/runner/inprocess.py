"""The runner an app starts inside another program's process, a web server's
(:class:`InProcess`, what :meth:`App.start_runner <mongosched.App.start_runner>`
uses): started once, stopped on request, and started again in a forked child."""

from __future__ import annotations

import logging
import os
import threading
import weakref
from collections.abc import Callable
from typing import Any

from mongosched.runner.runner import Runner

__all__ = ["InProcess"]

log = logging.getLogger("mongosched")


class InProcess:
    """An app's in-process runner, across the forks of its process.

    :param make: makes a runner with the options given (the app's
        :meth:`App.runner <mongosched.App.runner>`).
    :param forked: called first in a forked child, for the app to drop what the parent's
        threads held (its runners do not survive a fork).
    """

    def __init__(self, make: Callable[..., Runner], forked: Callable[[], None]) -> None:
        self._make = make
        self._forked = forked
        self._lock = threading.RLock()
        self._runner: Runner | None = None
        self.options: dict[str, Any] = {}
        """The options it was last started with."""
        self._running_at_fork = False
        self._warned_fork = False
        _everyone.add(self)

    @property
    def runner(self) -> Runner | None:
        """The runner :meth:`start` started, while it runs."""
        runner = self._runner
        return runner if runner is not None and runner.is_running else None

    def start(self, **options: Any) -> Runner:
        """Start the runner with ``options``, unless it runs (then return it)."""
        running = self.runner
        if running is not None:
            return running
        with self._lock:
            runner = self._runner
            if runner is None or not runner.is_running:
                runner = self._make(**options)
                runner.start()
                self._runner, self.options = runner, options
            return runner

    def stop(self, *, graceful: bool, timeout: float | None) -> bool:
        """Stop the runner (see :meth:`Runner.stop`); True when no job is left in flight."""
        with self._lock:
            runner, self._runner = self._runner, None
        return True if runner is None else runner.stop(graceful=graceful, timeout=timeout)

    def _before_fork(self) -> None:
        self._running_at_fork = self.runner is not None

    def _after_fork_in_parent(self) -> None:
        """A process that forks while its in-process runner runs copies live threads
        into the child (where they are dead) and goes on running jobs itself: right for
        a web worker that forks now and then, wrong for a server's master. Say so, once."""
        forked_running, self._running_at_fork = self._running_at_fork, False
        if forked_running and not self._warned_fork:
            self._warned_fork = True
            log.warning(
                "process %d forked while its in-process runner was running: the child "
                "starts its own, and this one keeps its own. If this is a server's master "
                "that forks its workers (gunicorn --preload, uWSGI without lazy-apps), start "
                "the runner in the workers instead (gunicorn's post_worker_init; see the "
                "deployment docs)",
                os.getpid(),
            )

    def _after_fork_in_child(self) -> None:
        """In a forked child: the parent's runners do not survive a fork (their threads
        are not copied). A child whose parent was running an in-process runner starts
        its own, with the same options: a pre-forking server's workers each run one."""
        restart = self._running_at_fork
        self._running_at_fork = False
        self._lock = threading.RLock()
        self._runner = None
        self._forked()
        if restart:
            try:
                self.start(**self.options)
            except Exception:  # a fork handler must not raise; say so where operators look
                log.exception("could not start the in-process runner in child %d", os.getpid())


_everyone: weakref.WeakSet[InProcess] = weakref.WeakSet()


def _before_fork() -> None:
    for each in list(_everyone):
        each._before_fork()


def _after_fork_in_parent() -> None:
    for each in list(_everyone):
        each._after_fork_in_parent()


def _after_fork_in_child() -> None:
    for each in list(_everyone):
        each._after_fork_in_child()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(
        before=_before_fork,
        after_in_parent=_after_fork_in_parent,
        after_in_child=_after_fork_in_child,
    )
