"""The runner: claims due jobs, runs them on a thread pool, keeps their leases alive.

One *dispatcher* thread claims a job only when a worker thread is free, submits it to
a :class:`~concurrent.futures.ThreadPoolExecutor`, re-polls at once after a claim and
waits ``poll_interval`` when there was nothing to do. Each claimed job gets a *lease*
with its own heartbeat thread that renews it every ``lease_duration / 3``, watches for
cancellation and enforces the task's timeout. The dispatcher also reaps jobs whose
lease ran out (their worker died) and keeps the decorator-declared schedules in place.
"""

from __future__ import annotations

import ctypes
import logging
import os
import signal
import socket
import threading
import time
import traceback
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timedelta
from types import FrameType
from typing import TYPE_CHECKING, Any

import bson
from pymongo.errors import PyMongoError

from .errors import ConfigurationError, JobTimeout, SerializationError, WorkerShutdown
from .job import Job, JobContext, _current
from .schedule import Misfire, plan_misfire, rule_from_document
from .store import _ms

if TYPE_CHECKING:
    from .app import App
    from .task import Task

__all__ = ["Runner"]

log = logging.getLogger("mongosched.runner")


def _raise_in_thread(thread_id: int, exc_type: type[BaseException] | None) -> None:
    """Make ``exc_type`` raise in thread ``thread_id`` at its next bytecode (None clears
    a pending one). A thread blocked in C code sees it only when the call returns."""
    ctypes.pythonapi.PyThreadState_SetAsyncExc(
        ctypes.c_ulong(thread_id), ctypes.py_object(exc_type) if exc_type else None
    )


def error_document(exc: BaseException, *, with_traceback: bool = True) -> dict[str, Any]:
    tb = "".join(traceback.format_exception(exc)) if with_traceback else None
    kind = type(exc)
    return {
        "type": kind.__qualname__,
        "module": kind.__module__,
        "message": str(exc),
        "traceback": tb,
    }


class _Lease:
    """One claimed job: its token, its heartbeat thread, its timeout and its context.

    The heartbeat thread renews the lease (and the task's concurrency slot), sees a
    cancellation request, and on timeout cancels the context and raises
    :class:`JobTimeout` in the worker thread. When renewal finds the lease gone, the
    lease is *lost*: the context is cancelled and nothing more is written for the job.
    """

    def __init__(self, runner: Runner, doc: dict[str, Any], task: Task[Any, Any]) -> None:
        self.runner = runner
        self.app = runner.app
        self.doc = doc
        self.task = task
        self.job_id = doc["_id"]
        self.token: str = doc["lease"]["token"]
        self.until: datetime = doc["lease"]["until"]
        self.ctx = JobContext(doc, self, runner.app)
        self.has_slot = False
        self.lost = False
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._worker_thread: int | None = None
        self._interrupt: type[BaseException] | None = None
        self._started = time.monotonic()

    # Heartbeat thread ---------------------------------------------------------------------
    def start(self) -> None:
        self._thread = threading.Thread(
            target=self._beat, name=f"mongosched-heartbeat-{self.job_id}", daemon=True
        )
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join()

    def _beat(self) -> None:
        interval = self.runner.heartbeat_interval
        timeout = self.task.timeout
        deadline = None if timeout is None else self._started + timeout
        next_beat = time.monotonic() + interval
        while not self._stop.is_set():
            now = time.monotonic()
            wake = next_beat if deadline is None or deadline <= now else min(next_beat, deadline)
            if self._stop.wait(max(0.0, wake - now)):
                return
            if deadline is not None and time.monotonic() >= deadline:
                deadline = None
                log.warning(
                    "job %s (%s) exceeded its timeout of %s s", self.job_id, self.task.name, timeout
                )
                self.ctx._cancel("timeout")
                self.interrupt(JobTimeout)
            if time.monotonic() >= next_beat:
                next_beat = time.monotonic() + interval
                if not self.renew():
                    return

    def renew(self) -> bool:
        """Extend the lease (and slot). False once the lease is lost."""
        with self._lock:
            if self.lost:
                return False
            store = self.app._store
            now = self.app.now()
            until = _ms(now + timedelta(seconds=self.runner.lease_duration))
            try:
                # The slot first, to the same instant: the job's lease never outlives
                # its slot, so the concurrency limit holds even when a renewal fails.
                if self.has_slot and not store.renew_slot(self.task.name, self.token, until):
                    doc = None
                else:
                    doc = store.renew(self.job_id, self.token, now, until)
            except PyMongoError as exc:
                if self.app.now() < self.until:
                    log.warning("heartbeat for job %s failed (%s); will retry", self.job_id, exc)
                    return True
                doc = None
                log.warning("heartbeat for job %s failed past its lease: %s", self.job_id, exc)
            if doc is None:
                self._lose("heartbeat found the lease gone")
                return False
            self.until = until
            if doc.get("cancel_requested"):
                self.ctx._cancel("cancelled")
            return True

    def write_progress(self, value: float | None, message: str | None) -> bool:
        progress = {"value": value, "message": message, "at": self.app.now()}
        with self._lock:
            if self.lost:
                return False
            if self.app._store.progress(self.job_id, self.token, progress):
                return True
            self._lose("progress write was fenced off")
            return False

    def _lose(self, why: str) -> None:
        """Called with ``_lock`` held."""
        if self.lost:
            return
        self.lost = True
        self.ctx._cancel("lease_lost")
        log.warning(
            "job %s (%s): lease lost (%s); another worker may run it, and this worker's "
            "writes for it are refused",
            self.job_id,
            self.task.name,
            why,
        )
        self.app.emit("job:lease_lost", job=Job(self.app, self.doc), runner=self.runner)

    # Interrupting the worker thread ------------------------------------------------------------
    def arm(self) -> None:
        with self._lock:
            self._worker_thread = threading.get_ident()

    def disarm(self) -> None:
        """After the function returned: no interrupt may arrive any more."""
        with self._lock:
            if self._worker_thread is not None and self._interrupt is not None:
                _raise_in_thread(self._worker_thread, None)  # clear one not yet raised
            self._worker_thread = None

    def interrupt(self, exc_type: type[BaseException]) -> None:
        """Raise ``exc_type`` in the worker thread while the function runs (once)."""
        with self._lock:
            if self._worker_thread is not None and self._interrupt is None:
                self._interrupt = exc_type
                _raise_in_thread(self._worker_thread, exc_type)


class Runner:
    """Runs an app's jobs. Make one with :meth:`App.runner`.

    :param workers: worker threads (jobs run at once by this runner).
    :param queues: queues to serve (None: every queue).
    :param name: owner name recorded in leases (default ``host:pid:id``).
    :param lease_duration: override the app's.
    :param poll_interval: override the app's.
    :param heartbeat_interval: seconds between lease renewals (``lease_duration / 3``).
    :param reap_interval: seconds between reaper passes (``lease_duration / 3``).
    """

    def __init__(
        self,
        app: App,
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
        if not isinstance(workers, int) or isinstance(workers, bool) or workers < 1:
            raise ConfigurationError(f"Runner: workers must be an int >= 1, not {workers!r}")
        if isinstance(queues, str):
            raise ConfigurationError("Runner: queues must be a list of names, not a str")
        self.app = app
        self.workers = workers
        self.queues = None if queues is None else list(queues)
        self.name = name or f"{socket.gethostname()}:{os.getpid()}:{id(self):x}"
        self.lease_duration = lease_duration or app.lease_duration
        self.poll_interval = poll_interval or app.poll_interval
        self.heartbeat_interval = heartbeat_interval or self.lease_duration / 3
        self.reap_interval = reap_interval or self.lease_duration / 3
        self.shutdown_timeout = shutdown_timeout
        self._free = threading.Semaphore(workers)
        self._stopping = threading.Event()
        self._wake = threading.Event()
        self._leases: dict[Any, _Lease] = {}
        self._leases_lock = threading.Lock()
        self._idle = threading.Condition(self._leases_lock)
        self._pool: ThreadPoolExecutor | None = None
        self._dispatcher: threading.Thread | None = None
        self._saturated: dict[str, float] = {}
        self._last_reap = 0.0
        self._last_unknown_check = 0.0
        self.claimed = 0
        self.finished = 0

    # Lifecycle -------------------------------------------------------------------------------
    @property
    def is_running(self) -> bool:
        return self._dispatcher is not None and self._dispatcher.is_alive()

    @property
    def in_flight(self) -> int:
        """Jobs this runner holds leases for."""
        with self._leases_lock:
            return len(self._leases)

    def start(self) -> Runner:
        """Start the dispatcher and workers in background threads; returns at once."""
        if self.is_running:
            raise RuntimeError("runner already started")
        self._prepare()
        self.check_clock()
        self._stopping.clear()
        self._pool = ThreadPoolExecutor(self.workers, thread_name_prefix="mongosched-worker")
        self._dispatcher = threading.Thread(
            target=self._dispatch, name="mongosched-dispatcher", daemon=True
        )
        self.app._runners.add(self)
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

    def _prepare(self) -> None:
        """Indexes, decorator-declared schedules and concurrency slots."""
        self.app.ensure_schedules(queues=self.queues)
        for task in self.app.tasks.values():
            if task.concurrency is not None:
                self.app._store.ensure_slots(task.name, task.concurrency)

    def check_clock(self) -> float | None:
        """Compare this host's clock with the MongoDB server's (where the server reports
        it) and warn when they differ by more than a tenth of the lease (at least 1 s):
        leases compare times written by many hosts. Returns the offset in seconds
        (server ahead: positive), or None. Runners do this when they start."""
        offset = self.app._reader.clock_offset(self.app.now)
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
        self._stopping.set()
        self._wake.set()
        if self._dispatcher is not None and self._dispatcher is not threading.current_thread():
            self._dispatcher.join()
        if not graceful:
            with self._leases_lock:
                leases = list(self._leases.values())
            for lease in leases:
                lease.ctx._cancel("shutdown")
                lease.interrupt(WorkerShutdown)
        done = self._wait_idle(timeout)
        if self._pool is not None:
            self._pool.shutdown(wait=done)
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
            while self._leases:
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

    # Dispatcher ----------------------------------------------------------------------------------
    def _dispatch(self) -> None:
        backoff = 0.0
        while not self._stopping.is_set():
            if not self._free.acquire(timeout=self.poll_interval):
                self._maintain_safely()
                continue
            try:
                self._maintain()
                claimed = self._claim_one()
            except PyMongoError as exc:
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

    def _maintain_safely(self) -> None:
        try:
            self._maintain()
        except PyMongoError as exc:
            log.warning("runner %s: maintenance failed: %s", self.name, exc)

    def _maintain(self) -> None:
        """Periodic work: reap expired leases; report due jobs of unknown tasks."""
        clock = time.monotonic()
        if clock - self._last_reap >= self.reap_interval:
            self._last_reap = clock
            self.reap()
        if clock - self._last_unknown_check >= 60.0:
            self._last_unknown_check = clock
            unknown = self.app._store.unknown_due_tasks(self.app.tasks, self.app.now())
            if unknown:
                log.warning(
                    "due jobs of tasks this runner does not know (left pending): %s",
                    ", ".join(f"{row['_id']} ({row['n']})" for row in unknown),
                )

    def _claimable(self) -> list[str]:
        """Registered tasks, less those whose concurrency slots were all taken a moment
        ago. (A task's jobs may sit in any queue: the claim filters on queues.)"""
        now = time.monotonic()
        return [name for name in self.app.tasks if self._saturated.get(name, 0.0) <= now]

    def _claim_one(self) -> bool:
        """Claim and start one job. True if a job was claimed (even one given back for
        want of a concurrency slot), so the dispatcher re-polls at once."""
        lease, claimed = self._claim()
        if lease is None:
            if claimed:
                self._free.release()
            return claimed
        with self._leases_lock:
            self._leases[lease.job_id] = lease
        self.claimed += 1
        lease.start()
        assert self._pool is not None
        self._pool.submit(self._run, lease)
        return True

    def _claim(self) -> tuple[_Lease | None, bool]:
        """One claim: ``(lease, True)``; ``(None, True)`` when the job was given back
        because the task's concurrency slots are all held; ``(None, False)`` when
        nothing is due."""
        app = self.app
        now = app.now()
        doc = app._store.claim(
            owner=self.name,
            tasks=self._claimable(),
            queues=self.queues,
            now=now,
            lease_duration=self.lease_duration,
        )
        if doc is None:
            return None, False
        task = app.tasks[doc["task"]]
        lease = _Lease(self, doc, task)
        if task.concurrency is not None:
            if not app._store.take_slot(
                task=task.name,
                limit=task.concurrency,
                token=lease.token,
                job_id=lease.job_id,
                owner=self.name,
                now=now,
                lease_duration=self.lease_duration,
            ):
                app._store.unclaim(lease.job_id, lease.token, app.now())
                self._saturated[task.name] = time.monotonic() + self.poll_interval
                return None, True
            lease.has_slot = True
        return lease, True

    # Running one job -----------------------------------------------------------------------------
    def _run(self, lease: _Lease) -> None:
        try:
            self._execute(lease)
        except PyMongoError as exc:
            log.warning(
                "job %s (%s): database error (%s); its outcome may not be recorded: if not, "
                "it runs again once its lease expires",
                lease.job_id,
                lease.task.name,
                exc,
            )
        except Exception:
            log.exception(
                "job %s (%s): internal error while finishing", lease.job_id, lease.task.name
            )
        finally:
            lease.stop()
            if lease.has_slot:
                try:
                    self.app._store.release_slot(lease.task.name, lease.token)
                except PyMongoError as exc:  # the slot's lease expires on its own
                    log.warning("could not release slot of %s: %s", lease.task.name, exc)
            with self._idle:
                self._leases.pop(lease.job_id, None)
                self._idle.notify_all()
            self.finished += 1
            self._free.release()

    def _execute(self, lease: _Lease) -> str | None:
        """Run one claimed job in this thread and write its outcome; returns the event
        name of the outcome (None when nothing ran or the lease was lost)."""
        app, doc, task, ctx = self.app, lease.doc, lease.task, lease.ctx
        if doc.get("repeat") and doc.get("attempts", 1) <= 1 and not self._plan_slot(lease):
            return None
        app.emit("job:start", job=Job(app, doc), runner=self)
        log.debug("job %s (%s) attempt %d started", lease.job_id, task.name, ctx.attempt)
        reset = _current.set(ctx)
        result: Any = None
        error: BaseException | None = None
        try:
            try:
                lease.arm()
                result = task.fn(*ctx.args, **ctx.kwargs)
            finally:
                lease.disarm()
        except BaseException as exc:  # the task's own, or an interrupt we raised
            error = exc
        finally:
            lease.disarm()
            _current.reset(reset)
        return self._finish(lease, result, error)

    def _plan_slot(self, lease: _Lease) -> bool:
        """Apply the misfire policy to a repeating job's first attempt at a slot.
        Returns False when no run happens now (the job was moved to a later slot)."""
        doc = lease.doc
        now = self.app.now()
        rule = rule_from_document(doc["repeat"])
        misfire = Misfire.from_document(doc["repeat"].get("misfire") or {})
        plan = plan_misfire(rule, doc["scheduled_for"], now, misfire)
        if plan.missed:
            log.warning(
                "job %s (%s): %d missed slot(s) dropped by misfire policy %r",
                lease.job_id,
                lease.task.name,
                plan.missed,
                misfire.policy,
            )
        if plan.run_slot is not None:
            if plan.run_slot != doc["scheduled_for"]:
                # Record the slot this run is for, so a retry of it runs the same slot.
                if not self.app._store.transition(
                    lease.job_id,
                    lease.token,
                    {"$set": {"scheduled_for": plan.run_slot, "updated_at": now}},
                ):
                    with lease._lock:
                        lease._lose("slot write was fenced off")
                    return False
                doc["scheduled_for"] = plan.run_slot
            lease.ctx.scheduled_for = plan.run_slot
            return True
        lease.stop()
        self.app._store.transition(
            lease.job_id,
            lease.token,
            {
                "$set": {
                    "status": "pending",
                    "lease": None,
                    "attempts": 0,
                    "run_at": plan.next_slot,
                    "scheduled_for": plan.next_slot,
                    "updated_at": now,
                }
            },
        )
        return False

    def _finish(self, lease: _Lease, result: Any, error: BaseException | None) -> str | None:
        """Write the outcome of one attempt, fenced on the lease token."""
        app, task = self.app, lease.task
        lease.stop()  # no heartbeat may race the outcome write
        now = app.now()
        if lease.lost:
            log.warning(
                "job %s (%s): finished after its lease was lost; outcome discarded (%s)",
                lease.job_id,
                task.name,
                "ok" if error is None else f"{type(error).__name__}: {error}",
            )
            return None
        event, update = self._outcome(lease, result, error, now)
        if not app._store.transition(lease.job_id, lease.token, update):
            with lease._lock:
                lease._lose("outcome write was fenced off")
            log.warning("job %s (%s): outcome rejected: lease lost", lease.job_id, task.name)
            return None
        app.emit(event, job=Job(app, applied(lease.doc, update)), error=error, runner=self)
        if event == "job:cancel":
            log.info("job %s (%s) cancelled while running", lease.job_id, task.name)
        return event

    def _outcome(
        self, lease: _Lease, result: Any, error: BaseException | None, now: datetime
    ) -> tuple[str, dict[str, Any]]:
        """(event, update) for how an attempt ended."""
        app, task, ctx, doc = self.app, lease.task, lease.ctx, lease.doc
        if ctx.cancel_reason == "cancelled":
            return "job:cancel", app._final_update("cancelled", now)
        if ctx.cancel_reason == "shutdown" or isinstance(error, WorkerShutdown):
            log.info(
                "job %s (%s) interrupted by shutdown; back to pending", lease.job_id, task.name
            )
            return "job:retry", {
                "$set": {"status": "pending", "lease": None, "run_at": now, "updated_at": now},
                "$inc": {"attempts": -1},
            }
        if ctx.cancel_reason == "timeout" or isinstance(error, JobTimeout):
            # Timed out, whatever the function did after the interrupt (even returning).
            error = JobTimeout(f"task {task.name!r} exceeded its timeout of {task.timeout} s")
            return self._failed(lease, error, now, retry=ctx.attempt < task.retry.max_attempts)
        if error is None:
            try:
                bson.encode({"result": result})
            except (bson.errors.InvalidDocument, OverflowError, TypeError) as exc:
                error = SerializationError(
                    f"task {task.name!r}: return value is not BSON-encodable "
                    f"({type(result).__name__}: {exc})"
                )
                return self._failed(lease, error, now, retry=False)
            if doc.get("repeat"):
                return "job:success", self._next_slot(lease, now, "completed", result=result)
            return "job:success", app._final_update("completed", now, result=result, error=None)
        return self._failed(lease, error, now, retry=task.retry.should_retry(error, ctx.attempt))

    def _failed(
        self, lease: _Lease, error: BaseException, now: datetime, *, retry: bool
    ) -> tuple[str, dict[str, Any]]:
        task, ctx = lease.task, lease.ctx
        err = error_document(error)
        if retry:
            delay = task.retry.delay_for(ctx.attempt)
            log.info(
                "job %s (%s) attempt %d/%d failed (%s: %s); retrying in %.1f s",
                lease.job_id,
                task.name,
                ctx.attempt,
                ctx.max_attempts,
                type(error).__name__,
                error,
                delay.total_seconds(),
            )
            return "job:retry", {
                "$set": {
                    "status": "pending",
                    "lease": None,
                    "run_at": _ms(now + delay),
                    "error": err,
                    "updated_at": now,
                }
            }
        log.warning(
            "job %s (%s) failed on attempt %d/%d: %s: %s",
            lease.job_id,
            task.name,
            ctx.attempt,
            ctx.max_attempts,
            type(error).__name__,
            error,
        )
        if lease.doc.get("repeat"):
            return "job:fail", self._next_slot(lease, now, "failed", error=err)
        return "job:fail", self.app._final_update("failed", now, error=err)

    def _next_slot(
        self, lease: _Lease, now: datetime, status: str, *, result: Any = None, error: Any = None
    ) -> dict[str, Any]:
        """A repeating job's run ended: record it and wait for the slot after the one it
        ran for (the nominal slot, so the schedule never drifts)."""
        slot = lease.ctx.scheduled_for or lease.doc.get("scheduled_for") or now
        nxt = rule_from_document(lease.doc["repeat"]).next_after(slot)
        return next_slot_update(nxt, now, slot, status, result=result, error=error)

    # Reaper --------------------------------------------------------------------------------------
    def reap(self) -> int:
        """Give back jobs whose lease expired (their worker stopped heartbeating): to
        pending while attempts remain, else failed (repeating jobs: the next slot).
        Returns how many were reaped."""
        app = self.app
        now = app.now()
        reaped = 0
        for doc in app._store.expired(now):
            lease = doc.get("lease") or {}
            attempts, max_attempts = doc.get("attempts", 1), doc.get("max_attempts", 1)
            err = {
                "type": "LeaseExpired",
                "message": (
                    f"worker {lease.get('owner')} stopped renewing its lease (expired "
                    f"{lease.get('until')}); attempt {attempts} of {max_attempts}"
                ),
                "traceback": None,
            }
            if attempts < max_attempts:
                update = {
                    "$set": {
                        "status": "pending",
                        "lease": None,
                        "run_at": now,
                        "error": err,
                        "updated_at": now,
                    }
                }
                event = "job:retry"
            elif doc.get("repeat"):
                slot = doc.get("scheduled_for") or now
                nxt = rule_from_document(doc["repeat"]).next_after(slot)
                update = next_slot_update(nxt, now, slot, "failed", error=err)
                event = "job:fail"
            else:
                update = app._final_update("failed", now, error=err)
                event = "job:fail"
            if app._store.reap(doc["_id"], lease["token"], now, update):
                reaped += 1
                log.warning("job %s (%s): %s", doc["_id"], doc["task"], err["message"])
                app.emit(event, job=Job(app, doc), runner=self)
        return reaped

    def __repr__(self) -> str:
        return f"<Runner {self.name} workers={self.workers} running={self.is_running}>"


def applied(doc: dict[str, Any], update: dict[str, Any]) -> dict[str, Any]:
    """The document as ``update`` (top-level ``$set``/``$unset``/``$inc``) leaves it:
    lets events carry the job's new state without reading it back."""
    new = dict(doc)
    new.update(update.get("$set", {}))
    for key in update.get("$unset", {}):
        new.pop(key, None)
    for key, step in update.get("$inc", {}).items():
        new[key] = new.get(key, 0) + step
    return new


def next_slot_update(
    next_slot: datetime,
    now: datetime,
    slot: datetime,
    status: str,
    *,
    result: Any = None,
    error: Any = None,
) -> dict[str, Any]:
    """Update taking a repeating job back to pending at ``next_slot`` after a run for
    ``slot`` that ended ``status``."""
    return {
        "$set": {
            "status": "pending",
            "lease": None,
            "attempts": 0,
            "run_at": next_slot,
            "scheduled_for": next_slot,
            "result": result,
            "error": error,
            "updated_at": now,
            "last_run": {"slot": slot, "status": status, "finished_at": now, "error": error},
        }
    }
