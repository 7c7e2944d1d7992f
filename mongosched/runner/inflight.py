"""What spans a runner's threads (:class:`InFlight`): the claims in flight, the free
workers' places, the stop, and whether a batched claim is coming. It is made first,
before any part of the runner, and each part that shares it is given it (see the
thread table in :mod:`mongosched.runner.runner`)."""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any

from mongosched.runner.claim import Claim
from mongosched.runner.heartbeats import Heartbeats
from mongosched.runner.pool import WorkerPool
from mongosched.runner.settler import Leased, LeaseEnd
from mongosched.store import Patience

__all__ = ["InFlight", "Places"]


class Places:
    """The free workers' places, counted: a semaphore whose one taker (the dispatcher)
    may wait for several at once, and is woken once, when they are all free, rather
    than by each worker that frees one."""

    __slots__ = ("_changed", "_free", "_want")

    def __init__(self, count: int) -> None:
        self._changed = threading.Condition(threading.Lock())
        self._free = count
        self._want = 0  # how many the taker waits for (0: it does not wait)

    def release(self, count: int = 1) -> None:
        with self._changed:
            self._free += count
            if self._want and self._free >= self._want:
                self._changed.notify()

    def acquire(self, timeout: float | None = None) -> bool:
        """Take one place, waiting up to ``timeout`` seconds for it; False if none
        was freed by then."""
        return self.take(1, timeout) == 1

    def take(self, most: int, timeout: float | None) -> int:
        """Take up to ``most`` places, waiting up to ``timeout`` seconds for that many
        to be free: how many it took (fewer when the time ran out first)."""
        with self._changed:
            if self._free < most:
                self._want = most
                try:
                    self._changed.wait_for(lambda: self._free >= most, timeout)
                finally:
                    self._want = 0
            taken = min(self._free, most)
            self._free -= taken
            return taken


class InFlight:
    """A runner's state shared by its threads (see the module).

    :param workers: the runner's worker threads: as many free places at first.
    :param now: the app's clock.
    """

    def __init__(self, workers: int, now: Callable[[], datetime]) -> None:
        self.now = now
        self.free = Places(workers)
        """One place per free worker thread: the dispatcher takes one before it claims,
        and a claim's worker gives it back when its outcome is written, or at once
        when the outcome is deferred."""
        self.stopping = threading.Event()
        """Set when the runner stops."""
        self.stop_by = math.inf
        """When a stop's deadline falls (a :func:`time.monotonic` time): no holder's
        write retries past it (see :meth:`patience`)."""
        self.batching = False
        """Whether the last claims found a backlog, so a batched claim comes in a moment
        (the dispatcher's: only it changes it)."""
        self.pool: WorkerPool | None = None
        """The worker threads, while the runner runs."""
        self.heartbeats: Heartbeats | None = None
        """The heartbeat threads, while the runner runs."""
        self.idle = threading.Condition()
        """Guards :attr:`claims` and :attr:`finished`; notified when the last claim leaves."""
        self.claims: dict[Any, Claim] = {}
        """The claims in flight, by job id."""
        self.finished = 0
        """Jobs its workers ran to their end."""

    def claiming(self) -> bool:
        """Whether a batched claim comes in a moment (the settler defers outcomes to it)."""
        return self.batching and not self.stopping.is_set()

    def others(self) -> int:
        """How many other jobs are in flight beside the caller's."""
        with self.idle:
            return len(self.claims) - 1

    def count(self) -> int:
        """How many jobs are in flight."""
        with self.idle:
            return len(self.claims)

    def held(self) -> list[Claim]:
        """The claims in flight, now."""
        with self.idle:
            return list(self.claims.values())

    def add(self, claim: Claim) -> None:
        with self.idle:
            self.claims[claim.job_id] = claim

    def forget(self, claim: Claim, finished: bool = False) -> None:
        """``claim`` is no longer in flight (``finished``: it ran to its end)."""
        with self.idle:
            self.claims.pop(claim.job_id, None)
            if finished:
                self.finished += 1
            if not self.claims:  # what wait_idle waits for
                self.idle.notify_all()

    def done(self, claim: Claim) -> None:
        """``claim``'s outcome is written (or could not be): it is no longer in flight,
        and its worker's place is free (unless it was freed when the outcome was
        deferred)."""
        heartbeats = self.heartbeats
        if heartbeats is not None:
            heartbeats.forget(claim)
        self.forget(claim, finished=True)
        if not claim.deferred:
            self.free.release()

    def wait_idle(self, timeout: float | None) -> bool:
        """Wait up to ``timeout`` seconds until no claim is in flight; True then."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self.idle:
            while self.claims:
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    return False
                self.idle.wait(remaining)
        return True

    def run_soon(self, work: Callable[[], None]) -> None:
        """Have a worker run ``work`` (what follows the outcomes a claim wrote)."""
        pool = self.pool
        try:
            if pool is not None:
                pool.submit(work)
                return
        except RuntimeError:  # the pool is shut: the interpreter is exiting
            pass
        work()

    def patience(self, held: Sequence[Leased]) -> Patience:
        """How long a holder's write (an outcome, a claim given back) retries a
        transient database error: until the last of the leases of ``held`` ends
        (nothing renews them during the write; until then no other holder can have the
        job, and the write stays fenced on its token anyway), or the runner's stop
        deadline (what is not written by then is left to the leases' expiry)."""
        return LeaseEnd(self, held)
