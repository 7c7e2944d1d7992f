"""A claimed job while a runner holds it (:class:`Claim`); the heartbeat threads that
keep its lease alive are :class:`~mongosched.runner.heartbeats.Heartbeats`, and what it
renews its lease through is its :class:`~mongosched.runner.keeper.LeaseKeeper`.

Each lease is renewed by a background thread of its own, never by the job's thread:
while a claim is held, one of a runner's long-lived heartbeat threads (one per worker)
renews it every ``heartbeat_interval``, renews its concurrency permit with it,
watches for a cancellation request and enforces the timeout (the job's own, else its
task's). When a renewal finds the lease gone, the lease is *lost*: the job's context is
cancelled and nothing more is written for it (every write is fenced on the lease token
anyway).
"""

from __future__ import annotations

import asyncio
import ctypes
import inspect
import logging
import threading
import time
from collections.abc import Callable, Coroutine
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from mongosched._core import outcome
from mongosched._core.outcome import Decision, Ending, Retention
from mongosched._core.records import JobRecord, LogEntry, MissedSlots, evolved
from mongosched.errors import JobTimeout, StoreError
from mongosched.job import JobContext, as_current
from mongosched.retry import RetryPolicy
from mongosched.runner.keeper import LeaseKeeper, stop_margin

if TYPE_CHECKING:
    from mongosched.task import Task

__all__ = ["Claim"]

log = logging.getLogger("mongosched.runner")


def _raise_in_thread(thread_id: int, exc_type: type[BaseException] | None) -> None:
    """Make ``exc_type`` raise in thread ``thread_id`` at its next bytecode (None clears
    a pending one). A thread blocked in C code sees it only when the call returns."""
    ctypes.pythonapi.PyThreadState_SetAsyncExc(
        ctypes.c_ulong(thread_id), ctypes.py_object(exc_type) if exc_type else None
    )


def _monotonic(end: datetime, now: datetime) -> float | None:
    """``end``, a time of the runner's clock (now ``now``), as a :func:`time.monotonic`
    time; None once it has passed."""
    left = (end - now).total_seconds()
    return time.monotonic() + left if left > 0 else None


class Claim:
    """One job this runner claimed: its record as claimed, its lease, its context."""

    def __init__(self, keeper: LeaseKeeper, record: JobRecord, task: Task[Any, Any]) -> None:
        assert record.lease is not None, "a claimed job has a lease"
        self.keeper = keeper
        self.record = record
        self.task = task
        self.token: str = record.lease.token
        self.until: datetime = record.lease.until
        self.slot: datetime | None = record.scheduled_for
        """For a repeating job: the slot this run is for."""
        self.ctx = JobContext(record, self)
        self.has_permit = False
        self.slot_key: str | None = None
        """The key of the keyed concurrency slot it holds (renewed with the lease)."""
        self.rate_taken = False
        """Whether a start of its task's rate limit was recorded for it."""
        self.lost = False
        self.logs: tuple[LogEntry, ...] | None = None
        """The job's log entries after its run, to write with its outcome (None:
        unchanged; see :class:`~mongosched.observe.logs.Capture`)."""
        self.renewals_stopped = False
        """Whether the heartbeat leaves the job's document alone: a transaction of a
        transactional task is to write it (:meth:`hold`)."""
        self.deferred = False
        """Whether its outcome was deferred to the next batched claim's write (its
        worker's place freed at once; announced after that write: see
        :class:`~mongosched.runner.settler.Settler`)."""
        self._lock = threading.Lock()
        self._finished = False
        self._running = threading.Lock()
        """Held until :meth:`finish`: what a heartbeat thread waits on (a bare lock, not
        an Event: every job makes one, and an Event costs as much as the rest of the
        claim)."""
        self._running.acquire()
        self._worker_thread: int | None = None
        self._interrupt: type[BaseException] | None = None
        self._started = time.monotonic()
        """When the claim was made (monotonic seconds): its renewals count from here."""

    @property
    def job_id(self) -> Any:
        return self.record.id

    @property
    def finished(self) -> bool:
        return self._finished

    @property
    def started(self) -> float:
        """When the claim was made, in :func:`time.monotonic` seconds."""
        return self._started

    @property
    def timeout(self) -> float | None:
        """Seconds a run may take: the job's own timeout, else its task's."""
        own = self.record.timeout
        return own if own is not None else self.task.timeout

    # What the runner records on it (each field changes here only) ----------------------------
    def took_permit(self) -> None:
        """It holds a concurrency permit of its task (renewed with the lease)."""
        self.has_permit = True

    def drop_permit(self) -> None:
        """It no longer holds its permit (about to release it)."""
        self.has_permit = False

    def took_slot(self, key: str) -> None:
        """It holds the keyed concurrency slot ``key`` (renewed with the lease)."""
        self.slot_key = key

    def drop_slot(self) -> None:
        """It no longer holds its keyed slot (about to release it)."""
        self.slot_key = None

    def took_rate(self) -> None:
        """A start of its task's rate limit was recorded for it."""
        self.rate_taken = True

    def drop_rate(self) -> None:
        """Its recorded start is given back (about to be returned)."""
        self.rate_taken = False

    def defer(self) -> None:
        """Its outcome waits for the next batched claim's write."""
        self.deferred = True

    def kept_logs(self, entries: tuple[LogEntry, ...] | None) -> None:
        """The job's log entries after its run, written with its outcome."""
        self.logs = entries

    def run_for(self, slot: datetime, missed: MissedSlots | None) -> None:
        """A repeating job's run is for ``slot`` (its record says so, with the slots it
        dropped, ``missed``, written with the outcome)."""
        self.record = evolved(self.record, scheduled_for=slot, missed=missed)

    def runs_slot(self, slot: datetime) -> None:
        """The run that follows is for ``slot`` (a retry of it runs the same slot)."""
        self.slot = self.ctx.scheduled_for = slot

    def decision(
        self,
        ending: Ending,
        result: Any,
        error: BaseException | None,
        retry: RetryPolicy,
        now: datetime,
        retention: Retention,
    ) -> Decision:
        """What follows its attempt's end (:func:`~mongosched._core.outcome.decide`
        for its job at ``now``, with the slot it ran for, its timeout and its logs)."""
        return outcome.decide(
            self.record,
            ending,
            now=now,
            retention=retention,
            retry=retry,
            result=result,
            error=error,
            slot=self.slot,
            timeout=self.timeout,
            logs=self.logs,
        )

    def finish(self) -> None:
        """No more heartbeats: from here on the holder writes only its outcome. Called
        by the one thread that ends the claim. It does not wait for a renewal in flight,
        which may last until the lease's end on a silent server: the outcome would
        wait as long. Such a renewal is harmless: it lands only while the job still
        runs under this token (before the outcome), and what it finds once the claim
        is finished is ignored (:meth:`renew`)."""
        if not self._finished:
            self._finished = True
            self._running.release()

    def _wait_finished(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for :meth:`finish`; True once finished."""
        if self._running.acquire(timeout=timeout):
            self._running.release()  # for any other waiter
            return True
        return self._finished

    # Heartbeats (called from a heartbeat thread) -------------------------------------------
    def keep_alive(self, interval: float) -> None:
        """Renew the lease every ``interval`` seconds and enforce the timeout, until the
        claim finishes or its lease is lost."""
        timeout = self.timeout
        deadline = None if timeout is None else self._started + timeout
        next_beat = self._started + interval
        while not self._finished:
            now = time.monotonic()
            wake = next_beat if deadline is None else min(next_beat, deadline)
            if self._wait_finished(max(0.0, wake - now)):
                return
            if deadline is not None and time.monotonic() >= deadline:
                deadline = None
                log.warning(
                    "job %s (%s) exceeded its timeout of %s s", self.job_id, self.task.name, timeout
                )
                self.abort("timeout", JobTimeout)
            if time.monotonic() >= next_beat:
                next_beat = time.monotonic() + interval
                if not self.renew():
                    return

    def renew(self) -> bool:
        """Extend the lease (and the permit). False once the lease is lost."""
        keeper, store = self.keeper, self.keeper.store
        with self._lock:
            if self.lost:
                return False
            if self._finished or self.renewals_stopped:
                return True
            now = keeper.now()
            until = now + timedelta(seconds=keeper.lease_duration)
            give_up = self.until - timedelta(seconds=stop_margin(keeper.lease_duration))
            deadline = _monotonic(give_up, now)
            try:
                # The permit first, to the same instant: the job's lease never outlives
                # its permit, so the concurrency limit holds even when a renewal fails.
                if self.has_permit and not store.permits.renew_permit(
                    self.task.name, self.token, until, deadline
                ):
                    held, cancel = False, False
                elif self.slot_key is not None and not store.limits.renew_slot(
                    self.task.name, self.slot_key, self.token, until, deadline
                ):
                    held, cancel = False, False
                else:
                    renewal = store.leases.renew(self.job_id, self.token, now, until, deadline)
                    held, cancel = renewal.held, renewal.cancel_requested
            except StoreError as exc:
                if keeper.now() < give_up:
                    log.warning("heartbeat for job %s failed (%s); will retry", self.job_id, exc)
                    return True
                held, cancel = False, False
                log.warning("heartbeat for job %s failed by its lease's end: %s", self.job_id, exc)
            if self._finished:  # meanwhile: its outcome is written, or being written
                return True
            if not held:
                self._lose("heartbeat found the lease gone")
                return False
            self.until = until
            if cancel:
                self.ctx.cancel("cancelled")
            return True

    def hold(self, seconds: float) -> bool:
        """Renew the lease to last ``seconds`` from now, then stop the heartbeat's
        renewals until :meth:`renew_again`: a transaction is about to write the job's
        document, and a renewal landing after the transaction's first read would make
        that write conflict (and abort the transaction). False once the lease is
        lost; raises the store's error."""
        keeper = self.keeper
        with self._lock:
            if self.lost:
                return False
            now = keeper.now()
            until = now + timedelta(seconds=seconds)
            renewal = keeper.store.leases.renew(self.job_id, self.token, now, until)
            if not renewal.held:
                self._lose("the lease was gone when its transaction began")
                return False
            self.until, self.renewals_stopped = until, True
            if renewal.cancel_requested:
                self.ctx.cancel("cancelled")
            return True

    def renew_again(self) -> None:
        """The heartbeat renews the lease again (after :meth:`hold`)."""
        with self._lock:
            self.renewals_stopped = False

    def write_progress(self, value: float | None, message: str | None) -> bool:
        with self._lock:
            if self.lost:
                return False
            store = self.keeper.store
            if store.leases.write_progress(
                self.job_id, self.token, value, message, self.keeper.now()
            ):
                return True
            self._lose("progress write was fenced off")
            return False

    def lose(self, why: str) -> None:
        """The lease is gone (a fenced write found another holder, or none)."""
        with self._lock:
            self._lose(why)

    def _lose(self, why: str) -> None:
        """Called with ``_lock`` held."""
        if self.lost:
            return
        self.lost = True
        self.ctx.cancel("lease_lost")
        self.keeper.lease_lost(self.record, why)

    # Running the function, and interrupting it --------------------------------------------
    def call(self) -> tuple[Any, BaseException | None]:
        """Run the task's function in this thread: ``(result, None)`` or ``(None, the
        exception)``, an interrupt raised into it (timeout, shutdown) included."""
        fn: Callable[..., Any] = self.task.fn
        try:
            with as_current(self.ctx):
                try:
                    with self._lock:
                        self._worker_thread = threading.get_ident()
                    result = fn(*self.ctx.args, **self.ctx.kwargs)
                    if inspect.iscoroutine(result):  # an async def task: its own loop
                        result = asyncio.run(_bounded(result, self.timeout))
                    return result, None
                finally:
                    self._disarm()
        except BaseException as exc:  # the task's own, or an interrupt we raised
            self._disarm()
            return None, exc

    def _disarm(self) -> None:
        """After the function returned: no interrupt may arrive any more."""
        with self._lock:
            if self._worker_thread is not None and self._interrupt is not None:
                _raise_in_thread(self._worker_thread, None)  # clear one not yet raised
            self._worker_thread = None

    def abort(self, reason: str, exc_type: type[BaseException]) -> None:
        """Stop the job: cancel its context for ``reason`` (``"timeout"``,
        ``"shutdown"``) and raise ``exc_type`` in the worker thread while the function
        runs (once). Under the claim's lock, as every cancel: the first reason stays."""
        with self._lock:
            self.ctx.cancel(reason)
            if self._worker_thread is not None and self._interrupt is None:
                self._interrupt = exc_type
                _raise_in_thread(self._worker_thread, exc_type)

    def __repr__(self) -> str:
        return f"<Claim {self.job_id} {self.task.name} attempt {self.record.attempts}>"


async def _bounded(run: Coroutine[Any, Any, Any], timeout: float | None) -> Any:
    """Await an async task's coroutine within its timeout (the interrupt the heartbeat
    raises cannot reach a thread waiting in the event loop's selector)."""
    try:
        return await asyncio.wait_for(run, timeout)
    except asyncio.TimeoutError:
        raise JobTimeout(f"exceeded its timeout of {timeout} s") from None
