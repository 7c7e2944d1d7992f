"""The dispatcher: the runner's thread that claims jobs and hands them to workers.

It prepares the database (retrying with backoff while it cannot be reached), then
loops: it takes a free worker's place, claims (one job, or with a backlog a batch for
every free worker), admits and submits each claim, re-polls at once after a claim and
waits when there was nothing to do, until a poll interval passes, a job it knows of
becomes due, or it is woken. Between claims it does the runner's maintenance: its
entry in the registry of live runners, the reaper and the sweep, the report of due
jobs of unknown tasks. See :mod:`mongosched.runner.runner` for what each thread owns.
"""

from __future__ import annotations

import logging
import threading
import time
from datetime import datetime

from mongosched._core.backoff import Backoff
from mongosched._core.scripts import SCRIPT_PREFIX, script_task_explanation
from mongosched.errors import StoreError
from mongosched.observe import logs
from mongosched.runner.claim import Claim
from mongosched.runner.parts import RunnerParts
from mongosched.runner.registration import Registration
from mongosched.runner.steps import RunnerSteps

__all__ = ["Dispatcher"]

log = logging.getLogger("mongosched.runner")


class Dispatcher:
    """The claiming loop of one runner (see the module).

    :param parts: the runner's: its settings, the settler, and what spans its threads
        (the free workers' places: the dispatcher takes one before it claims, and the
        worker that runs the claim gives it back; the stop; whether it batches).
    :param steps: the runner's synchronous steps: the preparation, the claimer, the
        reaper's passes.
    :param registration: the runner's entry among the live runners, which the
        dispatcher refreshes and, when it ends, removes.
    """

    def __init__(
        self,
        parts: RunnerParts,
        steps: RunnerSteps,
        *,
        registration: Registration,
    ) -> None:
        self.parts = parts
        self.steps = steps
        self.settings = parts.settings
        self.flight = parts.flight
        self.registration = registration
        self._free = parts.flight.free
        self._stopping = parts.flight.stopping
        self._thread: threading.Thread | None = None
        self._wake = threading.Event()
        self._ready = threading.Event()
        self._due_lock = threading.Lock()
        self._next_due: datetime | None = None  # guarded by _due_lock
        self._held = 0  # free workers' places the dispatcher holds
        self._full_rounds = 0  # claims in a row that found all they asked for
        self._last_reap = 0.0
        self._last_unknown_check = 0.0
        self._explained: set[str] = set()  # script tasks whose due jobs were explained
        self._backoff = Backoff(first=self.settings.poll_interval, most=30.0)
        """How long it waits after database errors in a row."""
        self.last_poll: float | None = None
        """When it last claimed without an error (a :func:`time.monotonic` time)."""
        self.last_error: str | None = None
        """The last error it met, until a claim succeeds again."""

    # Its thread -------------------------------------------------------------------------------
    @property
    def started(self) -> bool:
        """Whether its thread was ever started."""
        return self._thread is not None

    def is_alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def start(self) -> None:
        self._ready.clear()
        self._thread = threading.Thread(target=self._run, name="mongosched-dispatcher", daemon=True)
        self._thread.start()

    def join(self, timeout: float | None) -> None:
        """Wait for its thread to end (not from its own thread)."""
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)

    @property
    def ready(self) -> bool:
        """Whether it has prepared the database and is claiming."""
        return self._ready.is_set()

    def wait_ready(self, timeout: float | None = None) -> bool:
        return self._ready.wait(timeout)

    # Waking -----------------------------------------------------------------------------------
    def wake(self, at: datetime | None = None) -> None:
        """Claim now instead of at the end of the idle wait; with ``at`` (a job's due
        time), also claim again at that time rather than up to a poll interval later."""
        if at is not None:
            with self._due_lock:
                due = self._next_due
                # A due time already past is one the claim this wake-up causes serves:
                # keeping it would hide ``at`` (the idle wait drops a past time, then
                # waits a whole poll interval).
                if due is None or at < due or due <= self.parts.app.now():
                    self._next_due = at
        self.steps.claimer.ahead.wake()  # what batched claims read ahead may miss it
        self._wake.set()

    def _idle_wait(self) -> float:
        """How long an idle dispatcher waits: a poll interval, or less when a job this
        process scheduled becomes due sooner."""
        poll_interval = self.settings.poll_interval
        with self._due_lock:
            due = self._next_due
            if due is None:
                return poll_interval
            left = (due - self.parts.app.now()).total_seconds()
            if left <= 0:
                self._next_due = None
            return min(poll_interval, max(0.0, left))

    def _back_off(self, backoff: float) -> None:
        """Wait ``backoff`` seconds after a database error, or less when woken: a job
        reported due (by the change stream, or scheduled in this process) means the
        database answers again. Retries stay a poll interval (at most a second) apart
        whatever wakes them, so wake-ups during an outage never make a busy loop; the
        backoff itself keeps doubling while the database fails."""
        spacing = min(backoff, self.settings.poll_interval, 1.0)
        if self._stopping.wait(spacing):
            return
        self._wake.wait(backoff - spacing)  # a stop sets it too
        self._wake.clear()

    # The loop ---------------------------------------------------------------------------------
    def _run(self) -> None:
        try:
            if self._prepare_with_backoff():
                self._loop()
        except BaseException as exc:  # never expected: say so where operators look
            self.last_error = f"dispatcher died: {type(exc).__name__}: {exc}"
            log.critical("runner %s: %s; this runner claims nothing more", self.settings.name, exc)
            raise
        finally:  # the runner's entry is the dispatcher's: it refreshes it, and removes it
            self.registration.remove()

    def _prepare_with_backoff(self) -> bool:
        """Prepare, retrying while the database cannot be reached; False if stopped."""
        steps, failures = self.steps, 0
        while not self._stopping.is_set():
            try:
                steps.prepare()
                self.check_clock()
            except StoreError as exc:
                self.last_error = f"database: {exc}"
                failures += 1
                backoff = self._backoff.after(failures)
                log.warning(
                    "runner %s: waiting for the database (%s); retrying in %.1f s",
                    self.settings.name,
                    exc,
                    backoff,
                )
                self._back_off(backoff)
                continue
            self.last_error = None
            self._ready.set()
            return True
        return False

    def check_clock(self) -> float | None:
        """Compare this host's clock with the database server's (where the server reports
        it) and warn when they differ by more than a tenth of the lease (at least 1 s):
        leases compare times written by many hosts. Returns the offset in seconds
        (server ahead: positive), or None. It does this when it starts."""
        offset = self.parts.store.clock_offset(self.parts.app.now)
        if offset is None:
            return None
        seconds = offset.total_seconds()
        lease = self.settings.lease_duration
        if abs(seconds) > max(1.0, lease / 10):
            log.warning(
                "runner %s: this host's clock is %.1f s %s the MongoDB server's; leases "
                "compare times written by many hosts, so keep clocks in sync (NTP): the "
                "difference must stay well below the lease duration (%g s)",
                self.settings.name,
                abs(seconds),
                "behind" if seconds > 0 else "ahead of",
                lease,
            )
        return seconds

    def _loop(self) -> None:
        try:
            self._until_stopped()
        finally:  # (however it ends) the deferred outcomes are written now
            self._stop_batching()

    def _until_stopped(self) -> None:
        failures = 0
        while not self._stopping.is_set():
            if not self._free.acquire(timeout=self.settings.poll_interval):
                self._maintain_safely()
                continue
            self._held = 1
            try:
                self._maintain()
                claimed = self._claim_and_submit()
            except StoreError as exc:
                self._release_held()
                self._stop_batching()
                self.last_error = f"database: {exc}"
                failures += 1
                backoff = self._backoff.after(failures)
                log.warning(
                    "runner %s: database error (%s); retrying in %.1f s",
                    self.settings.name,
                    exc,
                    backoff,
                )
                self._back_off(backoff)
                continue
            except Exception as exc:
                self._release_held()
                self._stop_batching()
                self.last_error = f"{type(exc).__name__}: {exc}"
                log.exception("runner %s: unexpected error in the dispatcher", self.settings.name)
                self._stopping.wait(self.settings.poll_interval)
                continue
            self.last_poll = time.monotonic()
            if failures:
                log.info("runner %s: database reachable again", self.settings.name)
                failures = 0
                self.last_error = None
            if not claimed:
                self._wake.wait(self._idle_wait())
                self._wake.clear()

    def _claim_and_submit(self) -> bool:
        """Claim jobs for the free workers and hand them over; on entry the dispatcher
        holds one free worker's place (``_held``). True if a job was claimed (even one
        given back), so the dispatcher re-polls at once.

        One free worker claims one job (the least latency). When the last claim found as
        many jobs as it asked for (a backlog), the dispatcher takes every free worker's
        place, waiting up to the runner's ``gather`` seconds for the others to free, and
        one batched claim takes a job for each in a few round trips: with a backlog,
        jobs wait anyway, and a batch costs far less per job than claims one by one."""
        if self._stopping.is_set():
            self._release_held()
            return False
        more = self.settings.workers - self._held
        if self.flight.batching and more > 0:  # woken once, when they are all free
            self._held += self._free.take(more, self.settings.gather)
        asked = self._held
        claims: list[Claim] = []
        try:
            claimed = self.steps.claimer.take_batch(asked, claims)
            # A backlog: two claims in a row found all they asked for (one alone does
            # not say so: a lone job is claimed alone, and so is the next one).
            full = claimed >= asked
            if full and (asked > 1 or self._full_rounds > 0):
                self.flight.batching = True
                self._full_rounds += 1
            else:
                self._stop_batching()
                self._full_rounds = 1 if full else 0
        finally:  # every claim taken runs, whatever failed after it was taken
            self._held -= len(claims)  # each claim's worker releases its place
            self._release_held()
            for claim in claims:
                self._submit(claim)
        return claimed > 0

    def _submit(self, claim: Claim) -> None:
        """Hand a claim (holding one free worker's place) to a worker."""
        flight = self.flight
        assert flight.pool is not None and flight.heartbeats is not None
        flight.add(claim)
        # Watched before it is submitted: a stop shuts the pool before it lets the
        # heartbeat threads end, so a claim that reaches a worker is always kept alive.
        flight.heartbeats.watch(claim)
        try:
            flight.pool.submit(self.steps.attempt.work, claim)
        except RuntimeError:  # the pool is shut: stopping, or the interpreter exiting
            log.info(
                "runner %s: workers are shut; giving job %s back", self.settings.name, claim.job_id
            )
            flight.stopping.set()
            flight.heartbeats.forget(claim)
            flight.forget(claim)
            flight.free.release()
            self.steps.claimer.give_back_or_leave(claim)

    def _stop_batching(self) -> None:
        """Claim one job at a time again: no claim is coming, so the deferred
        outcomes are written now."""
        self.flight.batching, self._full_rounds = False, 0
        self.steps.claimer.ahead.drop()
        self.parts.settler.flush()

    def _release_held(self) -> None:
        """Give back the free workers' places the dispatcher holds."""
        held, self._held = self._held, 0
        if held:
            self._free.release(held)

    # Maintenance ------------------------------------------------------------------------------
    def _maintain_safely(self) -> None:
        failed = "runner %s: maintenance failed"
        with logs.Contained(log, f"{failed}: %s", failed, self.settings.name):
            self._maintain()

    def _maintain(self) -> None:
        """Periodic work: refresh the runner's entry (every few seconds), reap expired
        leases, report due jobs of unknown tasks."""
        steps = self.steps
        self.registration.refresh()
        clock = time.monotonic()
        if clock - self._last_reap >= self.settings.reap_interval:
            self._last_reap = clock
            steps.reap()
            steps.sweep()
        if clock - self._last_unknown_check >= 60.0:
            self._last_unknown_check = clock
            self.parts.store.leases.quarantine(self.parts.app.now())
            self.report_unknown_tasks()

    def report_unknown_tasks(self) -> dict[str, int]:
        """Log the due jobs of tasks the runner does not know (left pending), and
        returns how many of each; a task named after a script run as ``__main__`` is
        explained once."""
        tasks = self.parts.app.tasks
        unknown = self.parts.store.jobs.unknown_due_tasks(tasks, self.parts.app.now())
        if unknown:
            log.warning(
                "due jobs of tasks this runner does not know (left pending): %s",
                ", ".join(f"{task} ({n})" for task, n in unknown.items()),
            )
        for task in unknown:
            if task.startswith(SCRIPT_PREFIX) and task not in self._explained:
                self._explained.add(task)
                log.warning("%s", script_task_explanation(task, tasks))
        return unknown
