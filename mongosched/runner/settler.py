"""Writing the outcomes of finished jobs: alone, together when several finish at once,
or in the next batched claim's write (:class:`Settler`).

A job that finishes while no other outcome is being written writes its own at once, with
:meth:`~mongosched.store.parts.Leases.settle`: one round trip, no waiting. Jobs that
finish while a write is on its way queue up; when it returns, the first of them writes
every queued outcome in one :meth:`~mongosched.store.parts.Claims.settle_many` (each
still fenced on its own lease token), hands each worker its own job's result, and lets
the next queued worker write the outcomes queued meanwhile. So the round trips per job
fall as the load rises, and no worker waits for more than the write on its way and its
own.

With a backlog, a runner claims in batches as soon as its workers free, and a batch's
write can carry the outcomes too
(:meth:`~mongosched.store.parts.Claims.settle_and_claim`). Then an outcome is
*deferred* (:meth:`Settler.defer`): it waits in the queue with what follows its write (an
:data:`AfterWrite`: the outcome announced, its dependents released), its worker goes on
to its next job at once, and the dispatcher's next claim takes every queued outcome,
writes them with its claims and has what follows each run (:meth:`Settler.write_with`,
:attr:`Settler.run_soon`). Nobody waits on a deferred outcome, so the write that carries
it must come: the next claim;
else the writer on its way, which writes what was deferred meanwhile once it is done;
else :meth:`Settler.flush`, when no claim is coming (the backlog ended, a claim failed,
the runner stops).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from datetime import datetime
from functools import partial
from typing import Protocol

from mongosched._core.records import JobRecord, Settlement
from mongosched.errors import SerializationError
from mongosched.store import Patience
from mongosched.store.parts import Landed

__all__ = ["AfterWrite", "Alone", "Crew", "LeaseEnd", "Leased", "Settler", "Settlements", "Stored"]

log = logging.getLogger("mongosched")

Item = tuple[JobRecord, Settlement]
"""A job to settle, and its settlement."""
Stored = JobRecord | Landed
"""What an outcome's write gives back of the job: the job as stored, or a
:class:`~mongosched.store.parts.Landed` that makes it when asked."""
Result = Stored | SerializationError | None
"""What writing one outcome found (see :meth:`~mongosched.store.parts.Claims.settle_many`)."""
AfterWrite = Callable[[Stored | None, BaseException | None], None]
"""What follows a deferred outcome's write, called with the job as stored (None: its
lease no longer held it) or the error the write raised."""

MAX_BATCH = 100
"""Outcomes a writer waits for at most."""


class LeaseSettlements(Protocol):
    """A holder's fenced settlement of one job (see
    :meth:`~mongosched.store.parts.Leases.settle`)."""

    def settle(
        self, job: JobRecord, settlement: Settlement, patience: Patience | None = None
    ) -> JobRecord | None: ...


class ClaimSettlements(Protocol):
    """Fenced settlements of several jobs at once (see
    :meth:`~mongosched.store.parts.Claims.settle_many`)."""

    def settle_many(
        self, items: Sequence[Item], patience: Patience | None = None
    ) -> Sequence[Result]: ...


class Settlements(Protocol):
    """The store's writes of outcomes, fenced on each job's lease token: of its parts,
    these alone (a :class:`~mongosched.store.Store` is one)."""

    @property
    def leases(self) -> LeaseSettlements: ...

    @property
    def claims(self) -> ClaimSettlements: ...


class Leased(Protocol):
    """Something held under a lease (a claim, a queued outcome)."""

    @property
    def until(self) -> datetime:
        """When its lease ends."""


class Holder(Protocol):
    """Who holds leases and writes for them (a runner)."""

    @property
    def stop_by(self) -> float:
        """When its stop's deadline falls, as a :func:`time.monotonic` time."""

    def now(self) -> datetime: ...


class LeaseEnd:
    """A :data:`~mongosched.store.Patience`: the end of the last of some leases, as a
    :func:`time.monotonic` time, worked out the first time it is asked (only a write
    that met a transient error asks), or the holder's stop deadline if that comes
    first (asked each time: a stop may come meanwhile)."""

    __slots__ = ("holder", "held", "end")

    def __init__(self, holder: Holder, held: Sequence[Leased]) -> None:
        self.holder = holder
        self.held = held
        self.end: float | None = None

    def __call__(self) -> float:
        if self.end is None:
            now = self.holder.now()
            until = max((h.until for h in self.held), default=now)
            self.end = time.monotonic() + (until - now).total_seconds()
        return min(self.end, self.holder.stop_by)


class Crew(Protocol):
    """What a settler needs of the runner whose outcomes it writes (an
    :class:`~mongosched.runner.inflight.InFlight`)."""

    def others(self) -> int:
        """How many other jobs are running (that may finish in a moment)."""

    def claiming(self) -> bool:
        """Whether a batched claim will take the queued outcomes in a moment."""

    def run_soon(self, work: Callable[[], None]) -> None:
        """Run what follows deferred outcomes once they are written."""

    def patience(self, held: Sequence[Leased]) -> Patience | None:
        """How long a write of the outcomes of ``held`` retries a transient error."""


class Alone:
    """A settler's crew outside a runner: no other job, no claim coming, what follows
    a write run at once, the store's usual few retries."""

    def others(self) -> int:
        return 0

    def claiming(self) -> bool:
        return False

    def run_soon(self, work: Callable[[], None]) -> None:
        work()

    def patience(self, held: Sequence[Leased]) -> Patience | None:
        return None


class _Outcome:
    """One queued outcome, and what its write found."""

    __slots__ = ("job", "settlement", "until", "signal", "done", "stored", "error", "after_write")

    def __init__(
        self,
        job: JobRecord,
        settlement: Settlement,
        until: datetime,
        after_write: AfterWrite | None,
    ) -> None:
        self.job = job
        self.settlement = settlement
        self.until = until
        """When its lease ends (nothing renews it any more)."""
        self.after_write = after_write
        """Deferred: called once it is written (nobody waits on it)."""
        self.signal = threading.Lock()
        self.signal.acquire()  # released when written, or when it is this one's turn
        self.done = False
        self.stored: Stored | None = None
        self.error: BaseException | None = None

    def result(self) -> Stored | None:
        if self.error is not None:
            raise self.error
        return self.stored


def _call_after_writes(written: list[_Outcome]) -> None:
    """Call what follows each deferred outcome written: each one alone (each contains
    its own errors; one that does not cannot keep the others from theirs)."""
    for outcome in written:
        assert outcome.after_write is not None
        try:
            outcome.after_write(outcome.stored, outcome.error)
        except Exception:
            log.exception("what follows the outcome of job %s raised", outcome.job.id)


_CLAIM = object()  # the writer when a claim took the queue
_FLUSH = object()  # the writer when a flush took it


class Settler:
    """Writes holders' outcomes (see the module).

    :param store: the store's writes of outcomes (:class:`Settlements`).
    :param gather: seconds a writer waits for the others' outcomes.
    :param crew: the runner whose outcomes it writes (by default, :class:`Alone`).
    """

    def __init__(
        self, store: Settlements, *, gather: float = 0.0, crew: Crew | None = None
    ) -> None:
        crew = Alone() if crew is None else crew
        self.store = store
        self.gather = gather
        """Seconds a writer waits for the others' outcomes when other jobs are running."""
        self.company = crew.others
        """How many other jobs are running (that may finish in a moment)."""
        self.claiming = crew.claiming
        """Whether a batched claim will take the queued outcomes in a moment (a runner
        with a backlog says so)."""
        self.run_soon = crew.run_soon
        """Runs what follows deferred outcomes once they are written (a runner has its
        workers run them, so that a claim's writer, the dispatcher, never runs
        listeners)."""
        self.patience = crew.patience
        """How long a write of the given outcomes goes on retrying a transient database
        error (a runner says: until the last of their leases ends, or it stops; see
        :data:`~mongosched.store.Patience`). By default the store's usual few retries."""
        self._lock = threading.Lock()
        self._full = threading.Condition(self._lock)
        self._queue: list[_Outcome] = []
        self._expect = 0  # a writer waits for this many outcomes
        self._writer: object | None = None  # an outcome whose worker writes, _CLAIM, _FLUSH
        self.bulk_writes = 0
        """Bulk writes made (for tests and benchmarks)."""

    @property
    def queued(self) -> int:
        """Outcomes waiting for the write on its way."""
        with self._lock:
            return len(self._queue)

    def settle(self, job: JobRecord, settlement: Settlement, until: datetime) -> Stored | None:
        """As :meth:`~mongosched.store.parts.Leases.settle`: the job as stored
        after the write (:data:`Stored`: a batched claim's write may have carried it),
        or None when its lease token no longer held it; raises what
        that raises (:class:`~mongosched.errors.SerializationError` with nothing
        written, a store error). ``until``: when the job's lease ends."""
        with self._lock:
            mine = _Outcome(job, settlement, until, None)
            self._queue.append(mine)
            if self._writer is None:
                self._writer = mine  # nothing on its way: write at once
            elif self._expect and len(self._queue) >= self._expect:
                self._full.notify()
        if self._writer is not mine:
            mine.signal.acquire()  # written, or this one's turn to write
            if mine.done:
                return mine.result()
        others = self.company() if self.gather > 0 else 0
        with self._lock:  # this one writes everything queued, itself first in line
            if others > 0:  # they may finish in a moment: one write for all
                self._expect = min(1 + others, MAX_BATCH)
                self._full.wait_for(lambda: len(self._queue) >= self._expect, self.gather)
                self._expect = 0
            batch, self._queue = self._queue, []
        self._write_all(batch, mine)
        return mine.result()

    def defer(
        self, job: JobRecord, settlement: Settlement, until: datetime, after_write: AfterWrite
    ) -> bool:
        """Leave the outcome to the next batched claim's write when one is coming
        (:attr:`claiming`), and return True: ``after_write`` is called once it is written
        (see the module), and nobody waits for it. False: no claim is coming (write it
        with :meth:`settle`). ``until``: when the job's lease ends."""
        with self._lock:
            if not self.claiming():
                return False
            self._queue.append(_Outcome(job, settlement, until, after_write))
            if self._expect and len(self._queue) >= self._expect:
                self._full.notify()
        return True

    def write_with(self, claim: Callable[[list[Item], Patience | None], Sequence[Result]]) -> None:
        """Run ``claim`` (a batched claim about to write), giving it every queued
        outcome to write with its own updates, and the :attr:`patience` of their write.
        It returns the outcomes' results, in order: each worker or after-write learns its
        own (what it claims, it keeps itself).
        When a write is already on its way, the claim gets none (that writer takes
        them). When the claim fails, its outcomes go back to the queue, at its head, and
        the error is raised: a waiting worker writes them, else :meth:`flush` does."""
        with self._lock:
            taken: list[_Outcome] = []
            if self._writer is None and self._queue:
                self._writer = _CLAIM
                taken, self._queue = self._queue, []
        try:
            patience = self.patience(taken) if taken else None
            results = claim([(o.job, o.settlement) for o in taken], patience)
        except BaseException:
            if taken:
                self._give_back(taken)
            raise
        if taken:
            self._record(taken, results)
            self._written(taken, None, drain=False)

    def _give_back(self, taken: list[_Outcome]) -> None:
        with self._lock:
            self._queue[:0] = taken
            following = self._writer = self._first_waiting()
        if following is not None:
            following.signal.release()

    def flush(self) -> None:
        """No claim is coming (the backlog is gone, a claim failed, the runner stops):
        write the deferred outcomes, in this thread, unless a write is on its way
        (that writer writes them once done)."""
        with self._lock:
            if self._writer is not None or not self._queue:
                return
            self._writer = _FLUSH
            batch, self._queue = self._queue, []
        self._write_all(batch, None)

    def _write_all(self, batch: list[_Outcome], mine: _Outcome | None) -> None:
        """Write ``batch``, then the outcomes deferred meanwhile, until the queue
        holds none that nobody else will write."""
        while batch:
            self._write(batch)  # (records errors: never raises)
            batch, mine = self._written(batch, mine, drain=True), None

    def _written(self, batch: list[_Outcome], mine: _Outcome | None, drain: bool) -> list[_Outcome]:
        """A write is done: release each of its outcomes' workers, have what follows
        the deferred ones run, and pass the turn to the first queued outcome whose
        worker waits. With none, and ``drain``: take the queued outcomes deferred
        meanwhile and return them, for this writer to write (a claim does not drain:
        its next claim takes them, or a flush)."""
        with self._lock:
            following = self._first_waiting()
            more: list[_Outcome] = []
            if following is None and drain and self._queue:
                more, self._queue = self._queue, []  # this writer goes on
            else:
                self._writer = following
        deferred = []
        for other in batch:
            if other.after_write is not None:
                deferred.append(other)
            elif other is not mine:
                other.done = True
                other.signal.release()
        if following is not None:
            following.signal.release()
        if deferred:
            self.run_soon(partial(_call_after_writes, deferred))
        return more

    def _first_waiting(self) -> _Outcome | None:
        """The first queued outcome whose worker waits (holding the lock): the next
        writer. Deferred outcomes wait for a claim, or a writer that drains."""
        return next((o for o in self._queue if o.after_write is None), None)

    def _write(self, batch: list[_Outcome]) -> None:
        """Write the batch's outcomes, recording each one's stored job or error."""
        patience = self.patience(batch)
        try:
            if len(batch) == 1:
                batch[0].stored = self.store.leases.settle(
                    batch[0].job, batch[0].settlement, patience
                )
                return
            self.bulk_writes += 1
            results = self.store.claims.settle_many(
                [(o.job, o.settlement) for o in batch], patience
            )
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
