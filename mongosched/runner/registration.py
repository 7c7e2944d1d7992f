"""A runner's entry in the registry of live runners (:meth:`App.live_runners`).

The runner's dispatcher refreshes the entry at most every :data:`REFRESH` seconds, from
its periodic maintenance: no thread of its own and no round trip per job. A graceful
stop removes it. An entry not refreshed for :data:`~mongosched.operations.admin.STALE_AFTER` is
shown stale; the store forgets it :data:`FORGET_AFTER` after it was last refreshed (a
TTL index in MongoDB).
"""

from __future__ import annotations

import functools
import logging
import os
import socket
import time
import uuid
from datetime import datetime, timedelta
from importlib import metadata
from typing import Protocol

from mongosched._core.records import RunnerInfo
from mongosched.errors import StoreError
from mongosched.store.control import Admin

__all__ = ["FORGET_AFTER", "REFRESH", "Registration", "version"]

log = logging.getLogger("mongosched.runner")

REFRESH = 5.0
"""Seconds between two refreshes of a runner's entry (at most)."""
FORGET_AFTER = timedelta(minutes=10)
"""How long an entry is kept after its last refresh (a dead runner's stays this long)."""


class Registered(Protocol):
    """What the registration reads of its runner."""

    @property
    def name(self) -> str: ...

    @property
    def workers(self) -> int: ...

    @property
    def queues(self) -> list[str] | None: ...

    @property
    def in_flight(self) -> int: ...

    def registered_tasks(self) -> list[str]: ...

    def now(self) -> datetime: ...


@functools.lru_cache(maxsize=1)
def version() -> str:
    """This package's version (as installed). ``importlib.metadata`` is imported with
    this module, not here: a runner's thread importing it while the process forks would
    leave the child's import lock held, and the child's runner stuck at its first
    refresh (Python keeps a module's import lock across ``fork()``)."""
    try:
        return metadata.version("mongosched")
    except metadata.PackageNotFoundError:  # pragma: no cover - run from a source tree
        return "unknown"


class Registration:
    """One runner's entry in the registry (the store's ``admin`` part)."""

    def __init__(self, admin: Admin, runner: Registered, interval: float = REFRESH) -> None:
        self.admin = admin
        self.runner = runner
        self.interval = interval
        self.id = uuid.uuid4().hex
        self.host = socket.gethostname()
        self.started_at: datetime | None = None
        self._saved_at: float | None = None

    def refresh(self, *, force: bool = False) -> None:
        """Write the entry unless written less than ``interval`` seconds ago."""
        clock = time.monotonic()
        if not force and self._saved_at is not None and clock - self._saved_at < self.interval:
            return
        runner, now = self.runner, self.runner.now()
        if self.started_at is None:
            self.started_at = now
        info = RunnerInfo(
            id=self.id,
            name=runner.name,
            host=self.host,
            pid=os.getpid(),
            queues=None if runner.queues is None else tuple(runner.queues),
            tasks=tuple(runner.registered_tasks()),
            workers=runner.workers,
            in_flight=runner.in_flight,
            started_at=self.started_at,
            last_seen=now,
            version=version(),
        )
        self.admin.save_runner(info, now + FORGET_AFTER)
        self._saved_at = clock

    def remove(self) -> None:
        """Remove the entry (a graceful stop); a failure only leaves it to go stale."""
        if self._saved_at is None:
            return
        try:
            self.admin.remove_runner(self.id)
        except StoreError as exc:
            log.warning("runner %s: could not remove its runner entry: %s", self.runner.name, exc)
        self._saved_at = None
