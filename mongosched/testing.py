"""Helpers for testing code that uses mongosched.

Three ways to test, from the least to the most faithful:

* **Eager mode** (``App("memory://", eager=True)``): ``schedule()`` runs the task in
  the calling thread at once, retries included (without waiting out their delays), and
  returns the finished :class:`~mongosched.Job`. For unit tests of code that schedules.
* **drain()**: schedule normally, then ``drain(app)`` runs every due job in the calling
  thread. Delays, priorities and queues behave as in production; time can be moved with
  :class:`FakeClock`.
* **A real runner** against ``memory://`` or a test database, for tests of the
  running system (use short ``lease_duration`` and ``poll_interval``).

Eager mode and ``drain()`` run no heartbeat thread, so task timeouts are not enforced.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from datetime import datetime, timedelta, timezone

from mongosched.app import App, runner_host
from mongosched.errors import ConfigurationError
from mongosched.runner.runner import Runner

__all__ = ["FakeClock", "drain"]


class FakeClock:
    """A clock for ``App(clock=...)`` that moves only when told to.

    It starts at the real current time (whole seconds) unless told otherwise: the
    server's TTL index deletes finished jobs by *real* time, so a fake clock far in the
    past would see its finished jobs vanish.

    >>> clock = FakeClock()
    >>> later = clock.advance(seconds=90)
    """

    def __init__(self, start: datetime | None = None) -> None:
        start = start or datetime.now(timezone.utc).replace(microsecond=0)
        if start.tzinfo is None:
            raise ConfigurationError("FakeClock: start must be timezone-aware")
        self._now = start.astimezone(timezone.utc)
        self._lock = threading.Lock()

    def __call__(self) -> datetime:
        with self._lock:
            return self._now

    def set(self, when: datetime) -> None:
        if when.tzinfo is None:
            raise ConfigurationError("FakeClock: time must be timezone-aware")
        with self._lock:
            self._now = when.astimezone(timezone.utc)

    def advance(self, delta: timedelta | None = None, **kwargs: float) -> datetime:
        """Move forward by ``delta`` or by ``timedelta(**kwargs)``; returns the new time."""
        step = delta if delta is not None else timedelta(**kwargs)
        with self._lock:
            self._now += step
            return self._now


def drain(app: App, *, queues: Sequence[str] | None = None, limit: int = 10_000) -> int:
    """Run every due job (of tasks this app registered) in the calling thread until none
    is due; returns how many attempts ran. Jobs that become due meanwhile (a retry with
    no delay, a job scheduled by a job) run too; future ones wait for the clock."""
    runner = Runner(runner_host(app), workers=1, queues=queues, name="drain")
    return runner.run_until_idle(limit=limit)
