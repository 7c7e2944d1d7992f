"""How an idle runner learns that a job became due elsewhere: the wake-up modes and
the watcher thread.

A runner always polls (every ``poll_interval`` at most, sooner when it knows a job is
due sooner); with a watch it also wakes at once when the store reports a job that
became pending anywhere, another process or another server included (a change stream
on MongoDB, see :mod:`mongosched.store.mongo.watch`). The watcher is one thread per runner:
it reads the store's :class:`~mongosched.store.DueWatch` and calls
:meth:`Runner.wake <mongosched.runner.runner.Runner.wake>`; claiming stays the dispatcher's.

Modes (``App(wake=...)``, ``Runner(wake=...)``):

* ``"auto"`` (default): watch when the database can (a replica set or a sharded
  cluster, or ``memory://``), else poll, saying so in the log at INFO;
* ``"change_stream"``: the same, but a database that cannot watch is logged as a
  WARNING (it was asked for);
* ``"poll"``: never watch.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from datetime import datetime
from typing import Any, Protocol

from mongosched._core.backoff import Backoff
from mongosched.errors import ConfigurationError, WatchUnavailable
from mongosched.runner.host import RunnerHost
from mongosched.store import DueWatch, Store

__all__ = ["WAKE_MODES", "WakeWatcher", "wake_mode"]

log = logging.getLogger("mongosched.runner")

WAKE_MODES = ("auto", "change_stream", "poll")


def wake_mode(value: Any, *, what: str) -> str:
    """``value`` checked as a wake-up mode."""
    if value not in WAKE_MODES:
        raise ConfigurationError(
            f"{what}: wake must be one of {', '.join(map(repr, WAKE_MODES))}, not {value!r}"
        )
    return str(value)


class Wakeable(Protocol):
    """What the watcher needs of its runner (a :class:`~mongosched.runner.runner.Runner`)."""

    app: RunnerHost
    store: Store

    @property
    def name(self) -> str: ...

    @property
    def poll_interval(self) -> float: ...

    @property
    def queues(self) -> Sequence[str] | None: ...

    def now(self) -> datetime: ...

    def wake(self, at: datetime | None = None) -> None: ...


class WakeWatcher:
    """The thread that wakes one runner on the store's hints.

    :attr:`state` is ``"starting"``, ``"watching"`` (the watch is established),
    ``"retrying"`` (it failed unexpectedly; polling meanwhile), ``"polling"`` (the
    database cannot watch) or ``"stopped"``."""

    def __init__(self, runner: Wakeable, mode: str) -> None:
        self.runner = runner
        self.mode = wake_mode(mode, what="Runner")
        self.state = "starting"
        self._stopping = threading.Event()
        self._lock = threading.Lock()
        self._watch: DueWatch | None = None
        self._thread: threading.Thread | None = None
        self.hints = 0

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="mongosched-watcher", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Ask the watch to end (it closes its server cursor on the way out)."""
        self._stopping.set()
        with self._lock:
            watch = self._watch
        if watch is not None:
            watch.close()

    def join(self, timeout: float | None) -> bool:
        """Wait for the thread to end; True if it has."""
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)
            return not thread.is_alive()
        return True

    def _run(self) -> None:
        failures = 0
        try:
            while not self._stopping.is_set():
                try:
                    self._follow()
                    return
                except WatchUnavailable as exc:
                    self.state = "polling"
                    level = logging.WARNING if self.mode == "change_stream" else logging.INFO
                    log.log(
                        level,
                        "runner %s: cannot watch for due jobs (%s); polling every %g s",
                        self.runner.name,
                        exc,
                        self.runner.poll_interval,
                    )
                    return
                except Exception:
                    self.state = "retrying"
                    failures += 1
                    delay = Backoff(first=self.runner.poll_interval, most=30.0).after(failures)
                    log.exception(
                        "runner %s: watching for due jobs failed; polling, retrying in %.1f s",
                        self.runner.name,
                        delay,
                    )
                    self._stopping.wait(delay)
        finally:
            if self.state != "polling":
                self.state = "stopped"

    def _follow(self) -> None:
        watch = self.runner.store.watch_due(self.runner.queues)
        with self._lock:
            self._watch = watch
        if self._stopping.is_set():
            return
        try:
            for hint in watch:
                self.state = "watching"
                self.hints += 1
                if hint.task is not None and hint.task not in self.runner.app.tasks:
                    continue
                if hint.at is None or hint.at <= self.runner.now():
                    self.runner.wake()
                else:
                    self.runner.wake(hint.at)
        finally:
            watch.close()
            with self._lock:
                self._watch = None
