"""The runner: claims due jobs, runs them on a thread pool, keeps their leases alive.

One *dispatcher* thread claims a job only when a worker thread is free, submits it to
a :class:`~concurrent.futures.ThreadPoolExecutor`, re-polls at once after a claim and
waits ``poll_interval`` when there was nothing to do. A heartbeat thread keeps each
claim's lease alive (:mod:`mongosched.claim`). The dispatcher also reaps jobs whose
lease ran out (their worker died).

The same steps are public, for tests, eager mode and tools that drive a runner by
hand: :meth:`Runner.claim_next`, :meth:`Runner.run_claim`, :meth:`Runner.run_until_idle`
and :meth:`Runner.reap`.
"""

from __future__ import annotations

import atexit
import logging
import os
import signal
import socket
import threading
import time
import weakref
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from datetime import datetime, timedelta
from types import FrameType
from typing import Any, Protocol

from . import outcome, validate
from .claim import Claim, Heartbeats
from .errors import (
    ConfigurationError,
    JobTimeout,
    MongoschedError,
    SerializationError,
    StoreError,
    WorkerShutdown,
)
from .job import Job
from .outcome import Decision, Ending, Retention
from .records import JobStatus
from .retry import Retry
from .store import Store
from .task import Task

__all__ = ["Runner", "RunnerHost"]

log = logging.getLogger("mongosched.runner")

NEVER_RETRY = Retry(max_attempts=1)


class RunnerHost(Protocol):
    """What a runner needs from its app (an :class:`~mongosched.App`)."""

    @property
    def tasks(self) -> Mapping[str, Task[Any, Any]]: ...

    @property
    def store(self) -> Store: ...

    @property
    def lease_duration(self) -> float: ...

    @property
    def poll_interval(self) -> float: ...

    @property
    def retention(self) -> Retention: ...

    def now(self) -> datetime: ...

    def emit(self, name: str, **fields: Any) -> None: ...

    def ensure_schedules(self, *, queues: Sequence[str] | None = None) -> list[str]: ...

    def attach(self, runner: Runner) -> None: ...

    def detach(self, runner: Runner) -> None: ...


class Runner:
    """Runs an app's jobs. Make one with :meth:`App.runner`.

    :param workers: worker threads (jobs run at once by this runner).
    :param queues: queues to serve (None: every queue).
    :param name: owner name recorded in leases (default ``host:pid:id``).
    :param lease_duration: override the app's.
    :param poll_interval: override the app's.
    :param heartbeat_interval: seconds between lease renewals (at most a third of the
        lease; default exactly that).
    :param reap_interval: seconds between reaper passes (``lease_duration / 3``).
    :param shutdown_timeout: seconds a graceful stop (a signal, or the process
        exiting) waits for jobs in flight.
    """

    def __init__(
        self,
        app: RunnerHost,
        *,
        workers: int = 4,
        queues: Sequence[str] | None = None,
        name: str | None = None,
        lease_duration: float | None = None,
        poll_interval: float | None = None,
        heartbeat_interval: float | None = None,
        reap_interval: float | None = None,
        shutdown_timeout: float = 30.0,
    ) -> None:
        self.app = app
        self.store = app.store
        self.workers = validate.whole(workers, what="Runner: workers")
        if isinstance(queues, str):
            raise ConfigurationError("Runner: queues must be a list of names, not a str")
        self.queues = None if queues is None else [validate.queue(q, task="*") for q in queues]
        self.name = name or f"{socket.gethostname()}:{os.getpid()}:{id(self):x}"
        self.lease_duration = _duration(lease_duration, app.lease_duration, "lease_duration")
        self.poll_interval = _duration(poll_interval, app.poll_interval, "poll_interval")
        third = self.lease_duration / 3
        self.heartbeat_interval = _duration(heartbeat_interval, third, "heartbeat_interval")
        if self.heartbeat_interval > third:
            raise ConfigurationError(
                f"Runner: heartbeat_interval ({self.heartbeat_interval:g} s) must be at most a "
                f"third of lease_duration ({self.lease_duration:g} s), or leases expire "
                "between heartbeats"
            )
        self.reap_interval = _duration(reap_interval, third, "reap_interval")
        self.shutdown_timeout = validate.seconds(shutdown_timeout, what="Runner: shutdown_timeout")
        self._free = threading.Semaphore(self.workers)
        self._stopping = threading.Event()
        self._wake = threading.Event()
        self._claims: dict[Any, Claim] = {}
        self._idle = threading.Condition()
        self._pool: ThreadPoolExecutor | None = None
        self._heartbeats: Heartbeats | None = None
        self._dispatcher: threading.Thread | None = None
        self._saturated: dict[str, float] = {}
        self._last_reap = 0.0
        self._last_unknown_check = 0.0
        self.claimed = 0
        self.finished = 0

    # What a claim needs (LeaseKeeper) ---------------------------------------------------------
    def now(self) -> datetime:
        return self.app.now()

    def lease_lost(self, claim: Claim, why: str) -> None:
        log.warning(
            "job %s (%s): lease lost (%s); another worker may run it, and this worker's "
            "writes for it are refused",
            claim.job_id,
            claim.task.name,
            why,
        )
        self.app.emit("job:lease_lost", job=self._job(claim.record), runner=self)

    def _job(self, record: Any) -> Job:
        return Job(record, self.store)

    # Lifecycle -------------------------------------------------------------------------------
    @property
    def is_running(self) -> bool:
        return self._dispatcher is not None and self._dispatcher.is_alive()

    @property
    def in_flight(self) -> int:
        """Jobs this runner holds leases for."""
        with self._idle:
            return len(self._claims)

    def prepare(self) -> None:
        """Indexes, decorator-declared schedules and concurrency permits (what
        :meth:`start` does before it claims; the app prepares its store once)."""
        self.app.ensure_schedules(queues=self.queues)
        for task in self.app.tasks.values():
            if task.concurrency is not None:
                self.store.ensure_permits(task.name, task.concurrency)

    def start(self) -> Runner:
        """Start the dispatcher and workers in background threads; returns at once."""
        if self.is_running:
            raise ConfigurationError(f"runner {self.name} is already started")
        self.prepare()
        self.check_clock()
        self._stopping.clear()
        self._pool = ThreadPoolExecutor(self.workers, thread_name_prefix="mongosched-worker")
        self._heartbeats = Heartbeats(self.workers, self.heartbeat_interval, self.name)
        self._heartbeats.start()
        self._dispatcher = threading.Thread(
            target=self._dispatch, name="mongosched-dispatcher", daemon=True
        )
        self.app.attach(self)
        _at_exit.add(self)
        self._dispatcher.start()
        log.info(
            "runner %s started: %d worker(s), queues %s, tasks %s",
            self.name,
            self.workers,
            "all" if self.queues is None else ",".join(self.queues),
            ",".join(sorted(self.app.tasks)) or "none",
        )
        self.app.emit("runner:start", runner=self)
        return self

    def check_clock(self) -> float | None:
        """Compare this host's clock with the database server's (where the server reports
        it) and warn when they differ by more than a tenth of the lease (at least 1 s):
        leases compare times written by many hosts. Returns the offset in seconds
        (server ahead: positive), or None. Runners do this when they start."""
        offset = self.store.clock_offset(self.app.now)
        if offset is None:
            return None
        seconds = offset.total_seconds()
        if abs(seconds) > max(1.0, self.lease_duration / 10):
            log.warning(
                "runner %s: this host's clock is %.1f s %s the MongoDB server's; leases "
                "compare times written by many hosts, so keep clocks in sync (NTP): the "
                "difference must stay well below the lease duration (%g s)",
                self.name,
                abs(seconds),
                "behind" if seconds > 0 else "ahead of",
                self.lease_duration,
            )
        return seconds

    def wake(self) -> None:
        """Claim now instead of at the end of the idle wait."""
        self._wake.set()

    def stop(self, graceful: bool = True, timeout: float | None = 30.0) -> bool:
        """Stop claiming, then wait up to ``timeout`` seconds for the jobs in flight.

        Graceful: in-flight jobs finish normally and keep their leases alive meanwhile
        (if the wait times out they go on, heartbeating, until they finish or the process
        ends). Not graceful: in-flight jobs are interrupted with
        :class:`~mongosched.errors.WorkerShutdown` and go back to ``pending`` for
        another worker. Returns True when nothing is left in flight.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        self._stopping.set()
        self._wake.set()
        if not graceful:
            with self._idle:
                claims = list(self._claims.values())
            for claim in claims:
                claim.ctx.cancel("shutdown")
                claim.interrupt(WorkerShutdown)
        dispatcher = self._dispatcher
        if dispatcher is not None and dispatcher is not threading.current_thread():
            # It may be waiting on an unreachable database: one deadline bounds it all.
            dispatcher.join(_remaining(deadline))
        done = self._wait_idle(_remaining(deadline))
        if self._pool is not None:
            self._pool.shutdown(wait=False)
        if done and self._heartbeats is not None:
            self._heartbeats.stop()
        _at_exit.discard(self)
        self.app.detach(self)
        if done:
            log.info("runner %s stopped", self.name)
        else:
            log.warning(
                "runner %s stopped claiming; %d job(s) still running", self.name, self.in_flight
            )
        self.app.emit("runner:stop", runner=self)
        return done

    def _wait_idle(self, timeout: float | None) -> bool:
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._idle:
            while self._claims:
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    return False
                self._idle.wait(remaining)
        return True

    def run_forever(self) -> None:
        """Start, and block until SIGINT/SIGTERM (graceful stop; a second signal stops at
        once) or until :meth:`stop` is called from another thread."""
        signals = 0

        def handler(signum: int, frame: FrameType | None) -> None:
            nonlocal signals
            signals += 1
            log.info("signal %s: %s", signum, "stopping" if signals == 1 else "stopping now")
            self._stopping.set()
            self._wake.set()
            if signals > 1:
                threading.Thread(target=self.stop, kwargs={"graceful": False, "timeout": 5}).start()

        previous = {}
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                previous[sig] = signal.signal(sig, handler)
        try:
            self.start()
            while not self._stopping.wait(0.5):
                pass
            self.stop(graceful=True, timeout=self.shutdown_timeout)
        finally:
            for sig, old in previous.items():
                signal.signal(sig, old)

    # Public steps ----------------------------------------------------------------------------
    def claim_next(self, *, job_id: Any = None) -> Claim | None:
        """Claim the next due job of this runner's tasks and queues (or the pending job
        ``job_id``, due or not). None when there is none, or when it was given back
        because its task's concurrency permits are all taken."""
        return self._take(job_id)[0]

    def run_claim(self, claim: Claim) -> Decision | None:
        """Run a claimed job in this thread and record its outcome; returns the
        decision, or None when it did not run to a recorded outcome (its repeating
        slot moved on, or its lease was lost). Without a heartbeat (as in
        :meth:`run_until_idle`) a task's timeout is not enforced."""
        try:
            if claim.record.repeat and claim.record.attempts <= 1 and not self._start_slot(claim):
                return None
            self.app.emit("job:start", job=self._job(claim.record), runner=self)
            log.debug(
                "job %s (%s) attempt %d started",
                claim.job_id,
                claim.task.name,
                claim.record.attempts,
            )
            started = time.monotonic()
            result, error = claim.call()
            return self._conclude(claim, result, error, time.monotonic() - started)
        finally:
            claim.finish()
            self._release_permit(claim)

    def run_until_idle(self, *, limit: int = 10_000) -> int:
        """Run due jobs in this thread until none is due (or ``limit`` attempts ran);
        returns how many attempts ran."""
        ran = 0
        while ran < limit:
            claim, claimed = self._take()
            if not claimed:
                break
            if claim is not None:
                self.run_claim(claim)
                ran += 1
        return ran

    def reap(self) -> int:
        """Give back jobs whose lease expired (their worker stopped heartbeating): to
        pending while attempts remain, else failed (repeating jobs: the next slot).
        Returns how many were reaped. A job that cannot be processed is reported and
        skipped; it never stops the others."""
        now = self.app.now()
        reaped = 0
        retention = self.app.retention
        for record in self.store.expired(now):
            try:
                decision = outcome.decide(
                    record, Ending.LEASE_EXPIRED, now=now, retention=retention
                )
            except Exception as exc:  # its rule no longer computes: it fails alone
                decision = outcome.malformed(record, _why(exc), now, retention)
            stored = self.store.reap(record, now, decision.settlement)
            if stored is not None:
                reaped += 1
                log.warning("job %s (%s): %s", record.id, record.task, decision.settlement.error)
                event = "job:cancel" if stored.status is JobStatus.CANCELLED else decision.event
                self.app.emit(event, job=self._job(stored), runner=self)
        return reaped

    # Claiming ---------------------------------------------------------------------------------
    def _claimable(self) -> list[str]:
        """Registered tasks, less those whose concurrency permits were all taken a moment
        ago. (A task's jobs may sit in any queue: the claim filters on queues.)"""
        now = time.monotonic()
        return [name for name in self.app.tasks if self._saturated.get(name, 0.0) <= now]

    def _take(self, job_id: Any = None) -> tuple[Claim | None, bool]:
        """One claim: ``(claim, True)``; ``(None, True)`` when the job was given back
        because its task's permits are all held; ``(None, False)`` when nothing is due."""
        now = self.app.now()
        record = self.store.claim(
            owner=self.name,
            tasks=self._claimable() if job_id is None else list(self.app.tasks),
            queues=self.queues if job_id is None else None,
            now=now,
            lease_duration=self.lease_duration,
            job_id=job_id,
        )
        if record is None:
            return None, False
        task = self.app.tasks[record.task]
        claim = Claim(self, record, task)
        arrived = self.app.now()
        if arrived + timedelta(seconds=self.heartbeat_interval) >= claim.until:
            # The reply came so late that the lease ran out (or will before the first
            # heartbeat can renew it): another runner may take the job; never run it.
            log.warning(
                "job %s (%s): the claim's reply arrived at %s, too late for its lease "
                "(until %s); giving it back",
                claim.job_id,
                task.name,
                arrived,
                claim.until,
            )
            self._give_back(claim)
            return None, True
        if task.concurrency is not None:
            if not self.store.take_permit(
                task.name, task.concurrency, claim.token, claim.job_id, self.name, now, claim.until
            ):
                self._give_back(claim)
                self._saturated[task.name] = time.monotonic() + self.poll_interval
                return None, True
            claim.has_permit = True
        self.claimed += 1
        return claim, True

    def _give_back(self, claim: Claim) -> None:
        """A claim that will not run: pending again, uncounted, in its place in line."""
        claim.finish()
        self._release_permit(claim)
        self.store.settle(claim.record, outcome.given_back(claim.record, self.app.now()))

    def _release_permit(self, claim: Claim) -> None:
        if claim.has_permit:
            claim.has_permit = False
            try:
                self.store.release_permit(claim.task.name, claim.token)
            except StoreError as exc:  # the permit's lease expires on its own
                log.warning("could not release a permit of %s: %s", claim.task.name, exc)

    # Running one job ---------------------------------------------------------------------------
    def _start_slot(self, claim: Claim) -> bool:
        """Apply the misfire policy to a repeating job's first attempt at a slot.
        Returns False when no run happens now (the job moved to a later slot)."""
        now = self.app.now()
        try:
            plan = outcome.plan_run(claim.record, now)
        except Exception as exc:  # its rule no longer computes: it fails alone
            claim.finish()
            failed = outcome.malformed(claim.record, _why(exc), now, self.app.retention)
            self.store.settle(claim.record, failed.settlement)
            log.error("job %s (%s): %s", claim.job_id, claim.task.name, failed.error)
            return False
        if plan.missed:
            log.warning(
                "job %s (%s): %d missed slot(s) dropped by misfire policy %r",
                claim.job_id,
                claim.task.name,
                plan.missed,
                plan.policy,
            )
        if plan.slot is None:
            assert plan.settlement is not None
            claim.finish()
            self.store.settle(claim.record, plan.settlement)
            return False
        if plan.slot != claim.record.scheduled_for:
            # Record the slot this run is for, so a retry of it runs the same slot.
            if not self.store.record_slot(claim.job_id, claim.token, plan.slot, self.app.now()):
                claim.lose("slot write was fenced off")
                return False
        claim.slot = claim.ctx.scheduled_for = plan.slot
        return True

    def _ending(self, claim: Claim, error: BaseException | None) -> Ending:
        reason = claim.ctx.cancel_reason
        if reason == "cancelled":
            return Ending.CANCELLED
        if reason == "shutdown" or isinstance(error, WorkerShutdown):
            return Ending.SHUTDOWN
        if reason == "timeout" or isinstance(error, JobTimeout):
            return Ending.TIMEOUT
        return Ending.SUCCESS if error is None else Ending.ERROR

    def _conclude(
        self, claim: Claim, result: Any, error: BaseException | None, seconds: float
    ) -> Decision | None:
        """Record how one attempt ended, fenced on the lease token."""
        task = claim.task
        claim.finish()  # no heartbeat may race the outcome write
        if claim.lost:
            log.warning(
                "job %s (%s): finished after its lease was lost; outcome discarded (%s)",
                claim.job_id,
                task.name,
                "ok" if error is None else f"{type(error).__name__}: {error}",
            )
            return None
        decision = self._decide(claim, self._ending(claim, error), result, error, task.retry)
        try:
            stored = self.store.settle(claim.record, decision.settlement)
        except SerializationError as exc:  # the result cannot be stored
            decision = self._decide(claim, Ending.ERROR, None, exc, NEVER_RETRY)
            stored = self.store.settle(claim.record, decision.settlement)
        if stored is None:
            claim.lose("outcome write was fenced off")
            log.warning("job %s (%s): outcome rejected: lease lost", claim.job_id, task.name)
            return None
        if stored.status is JobStatus.CANCELLED and decision.status is not JobStatus.CANCELLED:
            decision = replace(
                decision,
                event="job:cancel",
                settlement=decision.settlement.on_cancel or decision.settlement,
            )
        _log_decision(claim, decision, seconds)
        self.app.emit(decision.event, job=self._job(stored), error=decision.error, runner=self)
        return decision

    def _decide(
        self,
        claim: Claim,
        ending: Ending,
        result: Any,
        error: BaseException | None,
        retry: Retry,
    ) -> Decision:
        now, retention = self.app.now(), self.app.retention
        try:
            return outcome.decide(
                claim.record,
                ending,
                now=now,
                retention=retention,
                retry=retry,
                result=result,
                error=error,
                slot=claim.slot,
                timeout=claim.task.timeout,
            )
        except Exception as exc:  # its rule no longer computes: it fails alone
            return outcome.malformed(claim.record, _why(exc), now, retention)

    # Dispatcher -------------------------------------------------------------------------------
    def _dispatch(self) -> None:
        backoff = 0.0
        while not self._stopping.is_set():
            if not self._free.acquire(timeout=self.poll_interval):
                self._maintain_safely()
                continue
            try:
                self._maintain()
                claimed = self._claim_and_submit()
            except StoreError as exc:
                self._free.release()
                backoff = min(max(backoff * 2, self.poll_interval), 30.0)
                log.warning(
                    "runner %s: database error (%s); retrying in %.1f s", self.name, exc, backoff
                )
                self._stopping.wait(backoff)
                continue
            except Exception:
                self._free.release()
                log.exception("runner %s: unexpected error in the dispatcher", self.name)
                self._stopping.wait(self.poll_interval)
                continue
            if backoff:
                log.info("runner %s: database reachable again", self.name)
                backoff = 0.0
            if not claimed:
                self._free.release()
                self._wake.wait(self.poll_interval)
                self._wake.clear()

    def _claim_and_submit(self) -> bool:
        """Claim one job and hand it to a worker. True if a job was claimed (even one
        given back), so the dispatcher re-polls at once."""
        if self._stopping.is_set():
            return False
        claim, claimed = self._take()
        if claim is None:
            if claimed:
                self._free.release()
            return claimed
        assert self._pool is not None and self._heartbeats is not None
        with self._idle:
            self._claims[claim.job_id] = claim
        try:
            self._pool.submit(self._work, claim)
        except RuntimeError:  # the pool is shut: the interpreter is exiting
            log.info("runner %s: workers are shut; giving job %s back", self.name, claim.job_id)
            self._stopping.set()
            self._forget(claim)
            self._give_back(claim)
            return False
        self._heartbeats.watch(claim)
        return True

    def _work(self, claim: Claim) -> None:
        try:
            self.run_claim(claim)
        except MongoschedError as exc:
            log.warning(
                "job %s (%s): database error (%s); its outcome may not be recorded: if not, "
                "it runs again once its lease expires",
                claim.job_id,
                claim.task.name,
                exc,
            )
        except Exception:
            log.exception(
                "job %s (%s): internal error while finishing", claim.job_id, claim.task.name
            )
        finally:
            self._forget(claim)
            self.finished += 1
            self._free.release()

    def _forget(self, claim: Claim) -> None:
        with self._idle:
            self._claims.pop(claim.job_id, None)
            self._idle.notify_all()

    def _maintain_safely(self) -> None:
        try:
            self._maintain()
        except StoreError as exc:
            log.warning("runner %s: maintenance failed: %s", self.name, exc)
        except Exception:
            log.exception("runner %s: maintenance failed", self.name)

    def _maintain(self) -> None:
        """Periodic work: reap expired leases; report due jobs of unknown tasks."""
        clock = time.monotonic()
        if clock - self._last_reap >= self.reap_interval:
            self._last_reap = clock
            self.reap()
        if clock - self._last_unknown_check >= 60.0:
            self._last_unknown_check = clock
            self.store.quarantine(self.app.now())
            unknown = self.store.unknown_due_tasks(self.app.tasks, self.app.now())
            if unknown:
                log.warning(
                    "due jobs of tasks this runner does not know (left pending): %s",
                    ", ".join(f"{task} ({n})" for task, n in unknown.items()),
                )

    def __repr__(self) -> str:
        return f"<Runner {self.name} workers={self.workers} running={self.is_running}>"


def _why(exc: BaseException) -> str:
    return f"its outcome cannot be computed ({type(exc).__name__}: {exc})"


def _remaining(deadline: float | None) -> float | None:
    return None if deadline is None else max(0.0, deadline - time.monotonic())


def _duration(value: float | None, default: float, name: str) -> float:
    chosen = default if value is None else value
    return validate.seconds(chosen, what=f"Runner: {name}", strict=True)


def _log_decision(claim: Claim, decision: Decision, seconds: float) -> None:
    job, task, record = claim.job_id, claim.task.name, claim.record
    error = decision.error
    if decision.event == "job:success":
        log.info("job %s (%s) completed in %.3f s", job, task, seconds)
    elif decision.event == "job:cancel":
        log.info("job %s (%s) cancelled while running", job, task)
    elif decision.event == "job:retry" and error is None:
        log.info("job %s (%s) interrupted by shutdown; back to pending", job, task)
    elif decision.event == "job:retry":
        delay = decision.delay or timedelta(0)
        log.info(
            "job %s (%s) attempt %d/%d failed (%s: %s); retrying in %.1f s",
            job,
            task,
            record.attempts,
            record.max_attempts,
            type(error).__name__,
            error,
            delay.total_seconds(),
        )
    else:
        log.warning(
            "job %s (%s) failed on attempt %d/%d: %s: %s",
            job,
            task,
            record.attempts,
            record.max_attempts,
            type(error).__name__,
            error,
        )


class _RunnersAtExit:
    """Stops the runners still running when the process exits normally, before the
    interpreter shuts the worker pools (which would leave claims that never start).

    ``threading`` runs its exit hooks before it waits for the pools' threads, in the
    reverse order of registration; ours is registered after ``concurrent.futures``'s,
    so it runs first. Where that hook does not exist, :mod:`atexit` is the fallback.
    """

    def __init__(self) -> None:
        self._runners: weakref.WeakSet[Runner] = weakref.WeakSet()
        self._registered = False
        self._lock = threading.Lock()

    def add(self, runner: Runner) -> None:
        with self._lock:
            self._runners.add(runner)
            if not self._registered:
                self._registered = True
                register = getattr(threading, "_register_atexit", None)
                try:
                    (register or atexit.register)(self.stop_all)
                except RuntimeError:  # already shutting down
                    atexit.register(self.stop_all)

    def discard(self, runner: Runner) -> None:
        with self._lock:
            self._runners.discard(runner)

    def stop_all(self) -> None:
        with self._lock:
            runners = list(self._runners)
        for runner in runners:
            if runner.is_running:
                log.info("runner %s: the process is exiting; stopping gracefully", runner.name)
                runner.stop(graceful=True, timeout=runner.shutdown_timeout)


_at_exit = _RunnersAtExit()


def _reset_after_fork() -> None:
    global _at_exit
    _at_exit = _RunnersAtExit()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_reset_after_fork)
