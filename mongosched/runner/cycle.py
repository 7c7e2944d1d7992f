"""The steps of a runner, synchronous, in the calling thread: claim the next job, run
a claim, run until idle, reap. Each :class:`~mongosched.runner.runner.Runner` holds its
steps (:attr:`Runner.steps <mongosched.runner.runner.Runner.steps>`): its workers run
claims with them, and eager mode and :func:`mongosched.testing.drain` call them in the
caller's thread.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any

from mongosched._core import outcome, spawn
from mongosched._core.outcome import Decision, Ending
from mongosched._core.records import JobQuery, JobRecord, JobStatus, Settlement, evolved
from mongosched.errors import SerializationError
from mongosched.job import Job, Suspended
from mongosched.observe import logs, tracing
from mongosched.retry import RetryPolicy
from mongosched.runner import dependencies
from mongosched.runner.claim import Claim
from mongosched.runner.claimer import Claimer
from mongosched.runner.host import RunnerHost
from mongosched.runner.outcomes import Leased, Settler
from mongosched.runner.reaper import Reaper
from mongosched.runner.settings import RunnerSettings
from mongosched.runner.transactional import TransactionalRun
from mongosched.schedule import Runs
from mongosched.store import Patience

__all__ = ["RunnerSteps"]

log = logging.getLogger("mongosched.runner")

NEVER_RETRY = RetryPolicy(retries=0)

Defer = Callable[[Claim, Decision, float], bool]
"""Leaves a claim's outcome to the next batched claim's write, if one is coming: True
when it did (see :meth:`RunnerSteps._conclude`)."""


class RunnerSteps:
    """A runner's synchronous steps (see the module).

    :param app: the app as the runner sees it.
    :param settings: the runner's.
    :param runner: the runner its events name.
    :param settler: writes outcomes (with the runner's threads: together, or deferred
        to a batched claim).
    :param patience: how long a write for some leases retries a transient error.
    :param defer: leaves an outcome to the next batched claim, when one is coming.
    """

    def __init__(
        self,
        app: RunnerHost,
        settings: RunnerSettings,
        *,
        runner: object,
        settler: Settler,
        patience: Callable[[Sequence[Leased]], Patience],
        defer: Defer,
    ) -> None:
        self.app = app
        self.store = app.store
        self.settings = settings
        self.name = settings.name
        self.lease_duration = settings.lease_duration
        self.runner = runner
        self.settler = settler
        self._patience = patience
        """How long a holder's write (an outcome, a claim given back) retries a
        transient database error (see :meth:`Runner._patience
        <mongosched.runner.runner.Runner._patience>`)."""
        self._defer = defer
        self.claimer = Claimer(
            app,
            settings,
            keeper=self,
            settler=settler,
            settle_held=self._settle_held,
            settle_unrun=self._settle_unrun,
        )
        """Claims jobs and admits them (the pause set and the flow-control gate)."""
        self.reaper = Reaper(
            app,
            lease_duration=self.lease_duration,
            emit=self._emit,
            release_dependents=self._release_dependents,
            repeated=self._repeated,
        )
        """Reaps expired leases and sweeps (:meth:`reap`, :meth:`sweep`)."""

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
            extra=logs.fields(claim.record),
        )
        self._emit("job:lease_lost", claim.record)

    def _job(self, record: Any) -> Job:
        return Job(record, self.store)

    def prepare(self) -> None:
        """Indexes, decorator-declared schedules and concurrency permits (what a
        runner's dispatcher does before it claims; the app prepares its store once)."""
        self.app.ensure_schedules(queues=self.settings.queues)
        for task in self.app.tasks.values():
            if task.concurrency is not None and task.concurrency_key is None:
                self.store.ensure_permits(task.name, task.concurrency)

    # Public steps ----------------------------------------------------------------------------
    def claim_next(self, *, job_id: Any = None) -> Claim | None:
        """Claim the next due job of this runner's tasks and queues (or the pending job
        ``job_id``, due or not). None when there is none, or when it was given back
        because its task's concurrency permits are all taken."""
        return self.claimer.take(job_id)[0]

    def claim_batch(self, limit: int) -> list[Claim]:
        """Claim up to ``limit`` due jobs of this runner's tasks and queues at once (in a
        few round trips whatever ``limit``), in claim order; fewer when fewer are due.
        With ``limit`` 1, as :meth:`claim_next`. When it raises, the jobs it had claimed
        are given back, uncounted (nobody else would run them)."""
        return self.claimer.claim_batch(limit)

    def run_claim(self, claim: Claim) -> Decision | None:
        """Run a claimed job in this thread and record its outcome; returns the
        decision, or None when it did not run to a recorded outcome (its repeating
        slot moved on, or its lease was lost). In a runner's worker with a backlog, the
        outcome may be deferred to the next batched claim's write: the decision as made,
        announced after that write. Without a heartbeat (as in :meth:`run_until_idle`) a
        task's timeout is not enforced."""
        try:
            if claim.task.transactional:
                return TransactionalRun(self, claim).run()
            ran = self._run(claim)
            return None if ran is None else self._conclude(claim, *ran)
        finally:
            self.claimer.release(claim, started=True)

    def run_claims(self, claims: Sequence[Claim]) -> list[Decision | None]:
        """Run several claimed jobs in this thread, one after another, then record
        their outcomes together: one bulk write, each outcome still fenced on its own
        lease (a job whose lease was lost meanwhile is reported alone, as
        :meth:`run_claim` reports it). Returns the decisions, in order. Nothing renews
        a lease between its job's end and the write."""
        try:
            ran = [self._run(claim) for claim in claims]
            decisions: list[Decision | None] = [None] * len(claims)
            todo = []
            for n, (claim, ended) in enumerate(zip(claims, ran, strict=True)):
                decision = None if ended is None else self._decision(claim, *ended[:2])
                if decision is not None:
                    todo.append((n, decision))
            items = [(claims[n].record, decision.settlement) for n, decision in todo]
            patience = self._patience([claims[n] for n, _ in todo])
            results = self.store.settle_many(items, patience) if items else []
            for (n, decision), stored in zip(todo, results, strict=True):
                claim, seconds = claims[n], ran[n][2]  # type: ignore[index]
                if isinstance(stored, SerializationError):  # its result cannot be stored
                    decisions[n] = self.after_write(claim, decision, seconds, None, stored)
                else:
                    decisions[n] = self._announce(claim, decision, stored, seconds)
            return decisions
        finally:
            for claim in claims:
                self.claimer.release(claim, started=True)

    def _run(
        self, claim: Claim, call: Callable[[], tuple[Any, BaseException | None]] | None = None
    ) -> tuple[Any, BaseException | None, float] | None:
        """Run a claimed job's function (with ``call``: by calling that instead of
        :meth:`Claim.call`): ``(result, error, seconds)``, or None when it does not
        run (its repeating slot moved on, or its lease was lost)."""
        bound = logs.bind(claim.record)  # log records carry the job's fields
        level = claim.task.capture_logs
        capture = None if level is None else logs.Capture(claim.record, level)
        kept = None if capture is None else logs.capturing(capture)
        span = tracing.start(claim.record, self.name)  # None without OpenTelemetry
        try:
            if claim.record.repeat and claim.record.attempts <= 1 and not self._start_slot(claim):
                return None
            self._emit("job:start", claim.record)
            log.debug(
                "job %s (%s) attempt %d started",
                claim.job_id,
                claim.task.name,
                claim.record.attempts,
            )
            started = time.monotonic()
            result, error = (call or claim.call)()
            tracing.failed(span, error)
            return result, error, time.monotonic() - started
        finally:
            tracing.end(span)
            if kept is not None and capture is not None:
                logs.uncapture(kept)
                claim.logs = capture.result()  # written with the outcome
            logs.unbind(bound)

    def run_until_idle(self, *, limit: int = 10_000) -> int:
        """Run due jobs in this thread until none is due (or ``limit`` attempts ran);
        returns how many attempts ran (jobs past their expiry end first)."""
        self.sweep()
        ran = 0
        while ran < limit:
            claim, claimed = self.claimer.take()
            if not claimed:
                break
            if claim is not None:
                self.run_claim(claim)
                ran += 1
        return ran

    def reap(self) -> int:
        """Give back jobs whose lease expired (see :meth:`Reaper.reap
        <mongosched.runner.reaper.Reaper.reap>`); returns how many were reaped."""
        return self.reaper.reap()

    def sweep(self) -> int:
        """End jobs past their expiry and repair dependents' releases (see
        :meth:`Reaper.sweep <mongosched.runner.reaper.Reaper.sweep>`); returns how
        many jobs it moved."""
        return self.reaper.sweep()

    def _emit(self, event: str, record: JobRecord, error: BaseException | None = None) -> None:
        """Send ``event`` about the job ``record`` is (made a :class:`Job` only for
        listeners)."""
        if self.app.listening(event):
            self.app.emit(event, job=self._job(record), error=error, runner=self.runner)

    def _release_dependents(self, stored: JobRecord) -> None:
        """A job this runner settled is final: release the jobs waiting for it."""
        if stored.status.is_final and stored.has_dependents:
            now, retention = self.app.now(), self.app.retention
            dependencies.release(self.store, stored, now=now, retention=retention, emit=self._emit)

    # Jobs that do not run to an outcome ------------------------------------------------------
    def _settle_held(self, claim: Claim, settlement: Settlement) -> JobRecord | None:
        """Write ``settlement`` for a claim that does not run to an outcome (given back,
        ended unrun), at once and alone, with its lease's patience."""
        return self.store.settle(claim.record, settlement, self._patience((claim,)))

    def _settle_unrun(self, claim: Claim, decision: Decision) -> None:
        """A claimed job that ends without running (expired): write the decision."""
        record = claim.record
        stored = self._settle_held(claim, decision.settlement)
        if stored is not None:
            decision = decision.as_written(stored.status)
            log.info("job %s (%s): %s", record.id, record.task, decision.error)
            self._emit(decision.event, stored)
            self._release_dependents(stored)

    # Running one job ---------------------------------------------------------------------------
    def _start_slot(self, claim: Claim) -> bool:
        """Apply the misfire policy to a repeating job's first attempt at a slot.
        Returns False when no run happens now (the job moved to a later slot)."""
        now = self.app.now()
        try:
            plan = outcome.plan_run(claim.record, now)
        except Exception as exc:  # its rule no longer computes: it fails alone
            claim.finish()
            failed = outcome.uncomputable(claim.record, exc, now, self.app.retention)
            self._settle_held(claim, failed.settlement)
            log.error("job %s (%s): %s", claim.job_id, claim.task.name, failed.error)
            return False
        if plan.slot is None:
            assert plan.settlement is not None
            claim.finish()
            stored = self._settle_held(claim, plan.settlement)
            if stored is not None and plan.missed:
                self._missed(stored, plan.missed)
            return False
        if plan.slot != claim.record.scheduled_for:
            # Record the slot this run is for, so a retry of it runs the same slot.
            if not self.store.record_slot(claim.job_id, claim.token, plan.slot, self.app.now()):
                claim.lose("slot write was fenced off")
                return False
        # The slots it dropped are written with the run's outcome.
        claim.record = evolved(claim.record, scheduled_for=plan.slot, missed=plan.missed_slots)
        if plan.missed:
            self._missed(claim.record, plan.missed)
        if Runs.from_document(claim.record.repeat or {}).spawns:
            self._spawn(claim, plan.slot)
            return False
        claim.slot = claim.ctx.scheduled_for = plan.slot
        return True

    def _spawn(self, claim: Claim, slot: datetime) -> None:
        """Run ``slot`` of a repeating job whose runs may overlap as a job of its own
        (one per slot: its key holds while it waits or runs), first asking the runs
        still running to stop if its policy is ``cancel_running``; the schedule goes
        on to its next slot."""
        record, now = claim.record, self.app.now()
        if Runs.from_document(record.repeat or {}).overlap == "cancel_running":
            running = JobQuery(task=record.task, statuses=(JobStatus.RUNNING,))
            for other in self.store.find(running, limit=0):
                if spawn.is_run_of(other, record):
                    log.info("job %s (%s): cancelled for slot %s", other.id, other.task, slot)
                    self.store.request_cancel(other.id, now)
        [(run, created)] = self.store.insert([spawn.slot_run(record, slot, now)])
        claim.finish()
        self._settle_held(claim, outcome.spawned(record, slot, now))
        if created:  # due now: this runner claims it next (others within a poll)
            self._emit("job:created", run)

    def _conclude(
        self, claim: Claim, result: Any, error: BaseException | None, seconds: float
    ) -> Decision | None:
        """Record how one attempt ended, fenced on the lease token: now, or deferred
        to the next batched claim's write (its ``defer``), and announce it after."""
        decision = self._decision(claim, result, error)
        if decision is None or self._defer(claim, decision, seconds):
            return decision
        try:
            settled = self.settler.settle(claim.record, decision.settlement, claim.until)
            stored, failure = settled, None
        except SerializationError as exc:
            stored, failure = None, exc
        return self.after_write(claim, decision, seconds, stored, failure)

    def after_write(
        self,
        claim: Claim,
        decision: Decision,
        seconds: float,
        stored: JobRecord | None,
        failure: BaseException | None,
    ) -> Decision | None:
        """After the outcome write found ``stored`` (or raised ``failure``): a result
        that cannot be stored fails the job instead; otherwise as :meth:`_announce`."""
        if isinstance(failure, SerializationError):
            decision = self._decide_safely(claim, Ending.ERROR, None, failure, NEVER_RETRY)
            stored = self.settler.settle(claim.record, decision.settlement, claim.until)
        elif failure is not None:
            raise failure
        return self._announce(claim, decision, stored, seconds)

    def _decision(self, claim: Claim, result: Any, error: BaseException | None) -> Decision | None:
        """What follows an attempt's end; None when its lease was lost meanwhile."""
        claim.finish()  # no renewal starts after this
        if isinstance(error, Suspended):  # a workflow wrote its job back to wait
            return None
        if claim.lost:
            log.warning(
                "job %s (%s): finished after its lease was lost; outcome discarded (%s)",
                claim.job_id,
                claim.task.name,
                "ok" if error is None else f"{type(error).__name__}: {error}",
                extra=logs.fields(claim.record),
            )
            return None
        return self._decide_safely(
            claim, outcome.ending(claim.ctx.cancel_reason, error), result, error, claim.task.retry
        )

    def _announce(
        self, claim: Claim, decision: Decision, stored: JobRecord | None, seconds: float
    ) -> Decision | None:
        """After the outcome write: the decision that took effect, logged and sent
        with the job as stored; None when the write found the lease lost."""
        if stored is None:
            claim.lose("outcome write was fenced off")
            log.warning(
                "job %s (%s): outcome rejected: lease lost",
                claim.job_id,
                claim.task.name,
                extra=logs.fields(claim.record),
            )
            return None
        decision = decision.as_written(stored.status)
        logs.log_decision(claim.record, claim.task.name, decision, seconds)
        self._emit(decision.event, stored, decision.error)
        self._repeated(decision, stored)
        self._release_dependents(stored)
        return decision

    def _repeated(self, decision: Decision, stored: JobRecord) -> None:
        """After a repeating job's run landed: say which slots it dropped, and pause
        its schedule when it failed too many times in a row."""
        if stored.repeat is None or stored.status is not JobStatus.PENDING:
            return
        if decision.missed:
            self._missed(stored, decision.missed)
        reason = outcome.pause_reason(stored) if decision.event == "job:fail" else None
        if reason is not None:
            log.warning("job %s (%s): %s", stored.id, stored.task, reason)
            try:
                self.app.pause_schedule(stored.id, reason)
            except Exception as exc:  # the next failed run tries again
                log.warning("job %s (%s): could not pause: %s", stored.id, stored.task, exc)

    def _missed(self, record: JobRecord, count: int) -> None:
        """Log and send ``schedule:missed`` for ``count`` slots ``record`` dropped."""
        missed = record.missed
        log.warning(
            "job %s (%s): %d slot(s) missed (%s), the latest %s",
            record.id,
            record.task,
            count,
            missed.reason if missed else "?",
            missed.last_slot if missed else "?",
            extra=logs.fields(record),
        )
        if self.app.listening("schedule:missed"):
            job = self._job(record)
            self.app.emit("schedule:missed", job=job, runner=self.runner, missed=count)

    def _decide_safely(
        self,
        claim: Claim,
        ending: Ending,
        result: Any,
        error: BaseException | None,
        retry: RetryPolicy,
    ) -> Decision:
        """:func:`outcome.decide <mongosched._core.outcome.decide>` for ``claim``, or,
        when its rule no longer computes, the job failed as malformed."""
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
                timeout=claim.timeout,
                logs=claim.logs,
            )
        except Exception as exc:  # its rule no longer computes: it fails alone
            return outcome.uncomputable(claim.record, exc, now, retention)
