"""Writing the outcomes of finished jobs: alone, together when several finish at once,
or in the next batched claim's write (:class:`Settler`).

A job that finishes while no other outcome is being written writes its own at once, with
:meth:`Store.settle <mongosched.store.Store.settle>`: one round trip, no waiting. Jobs
that finish while a write is on its way queue up; when it returns, the first of them
writes every queued outcome in one :meth:`Store.settle_many
<mongosched.store.Store.settle_many>` (each still fenced on its own lease token), hands
each worker its own job's result, and lets the next queued worker write the outcomes
queued meanwhile. So the round trips per job fall as the load rises, and no worker waits
for more than the write on its way and its own.

With a backlog, a runner claims in batches as soon as its workers free, and a batch's
write can carry the outcomes too (:meth:`Store.settle_and_claim
<mongosched.store.Store.settle_and_claim>`). Then an outcome is *handed off*: it waits
in the queue, its worker's place is freed at once, and the dispatcher's next claim
takes every queued outcome, writes them with its claims and hands each worker its
job's result (:meth:`Settler.write_with`). A handed-off outcome that no claim takes
within :data:`HANDOFF_WAIT`, or that a failed claim gives back, is written by its own
worker, as above.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import TypeVar

from .errors import SerializationError
from .records import JobRecord, Settlement
from .store import Store

__all__ = ["HANDOFF_WAIT", "Settler"]

_T = TypeVar("_T")
Item = tuple[JobRecord, Settlement]
"""A job to settle, and its settlement."""
Result = JobRecord | SerializationError | None
"""What writing one outcome found (see :meth:`Store.settle_many
<mongosched.store.Store.settle_many>`)."""

MAX_BATCH = 100
"""Outcomes a writer waits for at most."""
HANDOFF_WAIT = 0.05
"""Seconds a handed-off outcome waits for a claim to take it before its worker writes
it (the dispatcher gathers its batch for :data:`~mongosched.steps.GATHER` seconds)."""


def _nobody() -> int:
    return 0


def _no_claim() -> bool:
    return False


class _Outcome:
    """One queued outcome, and what its write found."""

    __slots__ = ("job", "settlement", "signal", "done", "stored", "error", "handed_off")

    def __init__(self, job: JobRecord, settlement: Settlement, handed_off: bool) -> None:
        self.job = job
        self.settlement = settlement
        self.signal = threading.Lock()
        self.signal.acquire()  # released when written, or when it is this one's turn
        self.done = False
        self.stored: JobRecord | None = None
        self.error: BaseException | None = None
        self.handed_off = handed_off
        """It waits for a claim to write it (no turn is passed to it)."""

    def result(self) -> JobRecord | None:
        if self.error is not None:
            raise self.error
        return self.stored


_CLAIM = object()  # the writer when a claim took the queue


class Settler:
    """Writes holders' outcomes (see the module)."""

    def __init__(self, store: Store, gather: float = 0.0) -> None:
        self.store = store
        self.gather = gather
        """Seconds a writer waits for the others' outcomes when other jobs are running."""
        self.company: Callable[[], int] = _nobody
        """How many other jobs are running (that may finish in a moment)."""
        self.claiming: Callable[[], bool] = _no_claim
        """Whether a batched claim will take the queued outcomes in a moment (a runner
        with a backlog says so)."""
        self._lock = threading.Lock()
        self._full = threading.Condition(self._lock)
        self._queue: list[_Outcome] = []
        self._expect = 0  # a writer waits for this many outcomes
        self._writer: object | None = None  # an outcome whose worker writes, or _CLAIM
        self.bulk_writes = 0
        """Bulk writes made (for tests and benchmarks)."""

    @property
    def queued(self) -> int:
        """Outcomes waiting for the write on its way."""
        with self._lock:
            return len(self._queue)

    def settle(
        self,
        job: JobRecord,
        settlement: Settlement,
        hand_off: Callable[[], None] | None = None,
    ) -> JobRecord | None:
        """As :meth:`Store.settle <mongosched.store.Store.settle>`: the job as stored
        after the write, or None when its lease token no longer held it; raises what
        that raises (:class:`~mongosched.errors.SerializationError` with nothing
        written, a store error). ``hand_off``: called when the outcome is left for
        the next batched claim to write (see the module), before waiting for it."""
        with self._lock:
            handed_off = hand_off is not None and self.claiming()
            mine = _Outcome(job, settlement, handed_off)
            self._queue.append(mine)
            if self._writer is None and not handed_off:
                self._writer = mine  # nothing on its way: write at once
            elif self._expect and len(self._queue) >= self._expect:
                self._full.notify()
        if handed_off:
            assert hand_off is not None
            hand_off()
        if self._writer is not mine and not self._wait(mine):
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
            self._written(batch, mine)
        return mine.result()

    def _wait(self, mine: _Outcome) -> bool:
        """Wait until ``mine`` was written (False) or is for its worker to write (True):
        its turn came, or, handed off, no claim took it in time."""
        timeout = HANDOFF_WAIT if mine.handed_off else -1
        while True:
            signalled = mine.signal.acquire(timeout=timeout)
            with self._lock:
                if mine.done:
                    return False
                if self._writer is mine:
                    return True
                if not signalled:  # no claim took it: write it, or wait for a turn
                    mine.handed_off = False
                    if self._writer is None and mine in self._queue:
                        self._writer = mine
                        return True
                timeout = -1

    def write_with(self, claim: Callable[[list[Item]], tuple[Sequence[Result], _T]]) -> _T:
        """Run ``claim`` (a batched claim about to write), giving it every queued
        outcome to write with its own updates, and return what else it returns. It
        must return the outcomes' results, in order: each worker learns its own. When
        a write is already on its way, the claim gets none (that writer takes them).
        When the claim fails, its outcomes go back to their workers, who write them as
        if they had never been handed off, and the error is raised."""
        with self._lock:
            taken: list[_Outcome] = []
            if self._writer is None and self._queue:
                self._writer = _CLAIM
                taken, self._queue = self._queue, []
        try:
            results, claimed = claim([(o.job, o.settlement) for o in taken])
        except BaseException:
            if taken:
                self._give_back(taken)
            raise
        if taken:
            self._record(taken, results)
            self._written(taken, None)
        return claimed

    def _give_back(self, taken: list[_Outcome]) -> None:
        with self._lock:
            for outcome in taken:
                outcome.handed_off = False
            self._queue[:0] = taken
            self._writer = taken[0]
        taken[0].signal.release()

    def flush(self) -> None:
        """No claim is coming (the backlog is gone, the runner stops): the outcomes
        handed off are written by their workers at once."""
        with self._lock:
            for outcome in self._queue:
                outcome.handed_off = False
            following = self._queue[0] if self._writer is None and self._queue else None
            self._writer = following
        if following is not None:
            following.signal.release()

    def _written(self, batch: list[_Outcome], mine: _Outcome | None) -> None:
        """A write is done: release each of its outcomes' workers, and pass the turn to
        the first queued outcome not handed off (those wait for a claim)."""
        with self._lock:
            following = next((o for o in self._queue if not o.handed_off), None)
            self._writer = following
        for other in batch:
            if other is not mine:
                other.done = True
                other.signal.release()
        if following is not None:
            following.signal.release()

    def _write(self, batch: list[_Outcome]) -> None:
        """Write the batch's outcomes, recording each one's stored job or error."""
        try:
            if len(batch) == 1:
                batch[0].stored = self.store.settle(batch[0].job, batch[0].settlement)
                return
            self.bulk_writes += 1
            results = self.store.settle_many([(o.job, o.settlement) for o in batch])
        except BaseException as exc:  # every writer learns it
            for outcome in batch:
                outcome.error = exc
            return
        self._record(batch, results)

    @staticmethod
    def _record(batch: list[_Outcome], results: Sequence[Result]) -> None:
        for outcome, result in zip(batch, results, strict=True):
            if isinstance(result, SerializationError):
                outcome.error = result
            else:
                outcome.stored = result
