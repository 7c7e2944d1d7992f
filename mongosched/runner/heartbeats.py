"""The heartbeat threads of a runner (:class:`Heartbeats`): long-lived threads, one per
worker, that keep each held lease alive while its job runs.

They know what they keep alive only through :class:`Kept` (a
:class:`~mongosched.runner.claim.Claim` is one): when it was made, its timeout, whether
it is finished, and its own loop of renewals (:meth:`Kept.keep_alive`).
"""

from __future__ import annotations

import collections
import logging
import threading
import time
from typing import Protocol

__all__ = ["Heartbeats", "Kept"]

log = logging.getLogger("mongosched.runner")


class Kept(Protocol):
    """What a heartbeat thread keeps alive: a held lease."""

    @property
    def started(self) -> float:
        """When it was made (a :func:`time.monotonic` time)."""

    @property
    def timeout(self) -> float | None:
        """Seconds its run may take (None: no limit): then it is adopted at once."""

    @property
    def finished(self) -> bool: ...

    def keep_alive(self, interval: float) -> None:
        """Renew the lease every ``interval`` seconds until finished (or lost)."""


class Heartbeats:
    """Long-lived heartbeat threads, one per worker: each adopts a held claim,
    keeps it alive until it finishes, and waits for the next one. No thread is started
    per job, and none is woken for a job that ends before its lease needs renewing: a
    claim is adopted a third of a heartbeat interval after it was made (one whose task
    has a timeout at once), well before its first renewal, one interval after the
    claim. One idle thread waits with a timer for the next adoption; the others wait
    to be called."""

    def __init__(self, count: int, interval: float, name: str) -> None:
        self.count = count
        self.interval = interval
        self.name = name
        self.adopt_after = interval / 3
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)  # idle threads but the timer
        self._timer_wake = threading.Condition(self._lock)  # the timer
        self._watched: dict[int, Kept] = {}  # watched, not adopted yet, by id()
        self._urgent: collections.deque[Kept] = collections.deque()
        self._timer = False  # an idle thread waits for the next adoption
        self._timer_due: float | None = None  # when the timer wakes on its own (None: never)
        self._stopping = False
        self._threads: list[threading.Thread] = []

    def start(self) -> None:
        self._stopping = False
        self._threads = [
            threading.Thread(target=self._loop, name=f"mongosched-heartbeat-{i}", daemon=True)
            for i in range(self.count)
        ]
        for thread in self._threads:
            thread.start()

    def watch(self, claim: Kept) -> None:
        """Keep ``claim`` alive from a heartbeat thread until it finishes (call
        :meth:`forget` once it has)."""
        with self._lock:
            if claim.timeout is not None:  # its deadline may come before a renewal
                self._urgent.append(claim)
                self._wake.notify()
                self._timer_wake.notify()
                return
            self._watched[id(claim)] = claim
            if not self._timer:
                if len(self._watched) == 1:  # no thread times adoptions: an idle one will
                    self._wake.notify()
            elif self._timer_due is None or claim.started + self.adopt_after < self._timer_due:
                # The timer would wake too late for this one. (Claims come in the order
                # they were made, so with a backlog the timer is rarely woken: it wakes
                # on its own for the first watched claim, and finds it gone or due.)
                self._timer_wake.notify()

    def forget(self, claim: Kept) -> None:
        """A finished claim: no thread needs to adopt it."""
        with self._lock:
            self._watched.pop(id(claim), None)
            self._stop_idle()

    def stop(self) -> None:
        """Let the threads end once the claims they hold or wait for finish."""
        with self._lock:
            self._stopping = True
            self._stop_idle()
        self._threads = []

    def _stop_idle(self) -> None:
        """Stopping, and no claim left to adopt: wake every idle thread, to end (called
        with the lock held)."""
        if self._stopping and not self._watched and not self._urgent:
            self._wake.notify_all()
            self._timer_wake.notify_all()

    def _loop(self) -> None:
        while True:
            claim = self._adopt()
            if claim is None:
                return
            try:
                claim.keep_alive(self.interval)
            except Exception:  # never lose the thread: the next claim needs it
                log.exception("runner %s: heartbeat of %r failed", self.name, claim)

    def _adopt(self) -> Kept | None:
        """The next claim to keep alive (None: stop), waiting until one needs it."""
        with self._lock:
            while True:
                if self._urgent:
                    urgent = self._urgent.popleft()
                    self._stop_idle()
                    return urgent
                for key in [k for k, c in self._watched.items() if c.finished]:
                    del self._watched[key]
                first = min(self._watched.values(), key=_started, default=None)
                now = time.monotonic()
                if first is not None and now >= first.started + self.adopt_after:
                    del self._watched[id(first)]
                    if self._watched:
                        self._wake.notify()  # someone else times the next one
                    self._stop_idle()
                    return first
                if self._stopping and first is None:
                    self._stop_idle()  # the others too
                    return None
                if self._timer:
                    self._wake.wait()
                    continue
                self._timer = True
                due = None if first is None else first.started + self.adopt_after
                self._timer_due = due
                try:
                    self._timer_wake.wait(None if due is None else due - now)
                finally:
                    self._timer = False


def _started(claim: Kept) -> float:
    return claim.started
