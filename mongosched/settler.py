"""Writing the outcomes of finished jobs: alone, or together when several finish at
once (:class:`Settler`).

A job that finishes while no other outcome is being written writes its own at once, with
:meth:`Store.settle <mongosched.store.Store.settle>`: one round trip, no waiting. Jobs
that finish while a write is on its way queue up; when it returns, the first of them
writes every queued outcome in one :meth:`Store.settle_many
<mongosched.store.Store.settle_many>` (each still fenced on its own lease token), hands
each worker its own job's result, and lets the next queued worker write the outcomes
queued meanwhile. So the round trips per job fall as the load rises, and no worker waits
for more than the write on its way and its own.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from .errors import SerializationError
from .records import JobRecord, Settlement
from .store import Store

__all__ = ["Settler"]

MAX_BATCH = 100
"""Outcomes a writer waits for at most."""


def _nobody() -> int:
    return 0


class _Outcome:
    """One queued outcome, and what its write found."""

    __slots__ = ("job", "settlement", "signal", "done", "stored", "error")

    def __init__(self, job: JobRecord, settlement: Settlement) -> None:
        self.job = job
        self.settlement = settlement
        self.signal = threading.Lock()
        self.signal.acquire()  # released when written, or when it is this one's turn
        self.done = False
        self.stored: JobRecord | None = None
        self.error: BaseException | None = None

    def result(self) -> JobRecord | None:
        if self.error is not None:
            raise self.error
        return self.stored


class Settler:
    """Writes holders' outcomes (see the module)."""

    def __init__(self, store: Store, gather: float = 0.0) -> None:
        self.store = store
        self.gather = gather
        """Seconds a writer waits for the others' outcomes when other jobs are running."""
        self.company: Callable[[], int] = _nobody
        """How many other jobs are running (that may finish in a moment)."""
        self._lock = threading.Lock()
        self._full = threading.Condition(self._lock)
        self._queue: list[_Outcome] = []
        self._expect = 0  # a writer waits for this many outcomes
        self._writing = False
        self.bulk_writes = 0
        """Bulk writes made (for tests and benchmarks)."""

    @property
    def queued(self) -> int:
        """Outcomes waiting for the write on its way."""
        with self._lock:
            return len(self._queue)

    def settle(self, job: JobRecord, settlement: Settlement) -> JobRecord | None:
        """As :meth:`Store.settle <mongosched.store.Store.settle>`: the job as stored
        after the write, or None when its lease token no longer held it; raises what
        that raises (:class:`~mongosched.errors.SerializationError` with nothing
        written, a store error)."""
        mine = _Outcome(job, settlement)
        with self._lock:
            self._queue.append(mine)
            wait = self._writing
            self._writing = True
            if wait and self._expect and len(self._queue) >= self._expect:
                self._full.notify()
        if wait:
            mine.signal.acquire()
            if mine.done:
                return mine.result()
        others = self.company() if self.gather > 0 else 0
        with self._lock:  # this one writes everything queued, itself first in line
            if others > 0:  # they may finish in a moment: one write for all
                self._expect = min(1 + others, MAX_BATCH)
                self._full.wait_for(lambda: len(self._queue) >= self._expect, self.gather)
                self._expect = 0
            batch, self._queue = self._queue, []
        try:
            self._write(batch)
        finally:
            with self._lock:
                following = self._queue[0] if self._queue else None
                self._writing = following is not None
            for other in batch:
                if other is not mine:
                    other.done = True
                    other.signal.release()
            if following is not None:
                following.signal.release()
        return mine.result()

    def _write(self, batch: list[_Outcome]) -> None:
        """Write the batch's outcomes, recording each one's stored job or error."""
        try:
            if len(batch) == 1:
                batch[0].stored = self.store.settle(batch[0].job, batch[0].settlement)
                return
            self.bulk_writes += 1
            results: list[Any] = self.store.settle_many([(o.job, o.settlement) for o in batch])
        except BaseException as exc:  # every writer learns it
            for outcome in batch:
                outcome.error = exc
            return
        for outcome, result in zip(batch, results, strict=True):
            if isinstance(result, SerializationError):
                outcome.error = result
            else:
                outcome.stored = result
