"""The steps of a runner, synchronous, in the calling thread: claim the next job, run
a claim, run until idle, reap. The threaded :class:`~mongosched.runner.runner.Runner` is built
on them, and so are eager mode and :func:`mongosched.testing.drain`.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from typing import Any

from mongosched._core import outcome, spawn, validate
from mongosched._core.outcome import Decision, Ending
from mongosched._core.records import JobQuery, JobRecord, JobStatus, Settlement, evolved
from mongosched.errors import SerializationError, StoreError
from mongosched.job import Job
from mongosched.observe import logs, tracing
from mongosched.retry import RetryPolicy
from mongosched.runner import dependencies
from mongosched.runner.claim import Claim
from mongosched.runner.host import RunnerHost
from mongosched.runner.limiter import Gate
from mongosched.runner.outcomes import Leased, LeaseEnd, Settler
from mongosched.runner.pauses import PauseSet
from mongosched.runner.reaper import Reaper
from mongosched.runner.settings import RunnerSettings
from mongosched.runner.transactional import TransactionalRun
from mongosched.schedule import Runs
from mongosched.store import Patience

__all__ = ["RunnerSteps"]

log = logging.getLogger("mongosched.runner")

NEVER_RETRY = RetryPolicy(retries=0)


class RunnerSteps:
    """A runner's configuration and its synchronous steps (see the module; the
    parameters are :class:`~mongosched.runner.runner.Runner`'s)."""

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
    ) -> None:
        self.app = app
        self._ranked_of: tuple[int, list[str]] = (-1, [])
        self.store = app.store
        settings = RunnerSettings(
            app,
            workers=workers,
            queues=queues,
            name=name,
            lease_duration=lease_duration,
            poll_interval=poll_interval,
            heartbeat_interval=heartbeat_interval,
            reap_interval=reap_interval,
        )
        self.settings = settings
        self.workers = settings.workers
        self.queues = settings.queues
        self.name = settings.name
        self.lease_duration = settings.lease_duration
        self.poll_interval = settings.poll_interval
        self.heartbeat_interval = settings.heartbeat_interval
        self.reap_interval = settings.reap_interval
        self.gather = settings.gather
        self._saturated: dict[str, float] = {}
        self.settler = Settler(self.store, gather=self.gather, patience=self._patience)
        """Writes outcomes: alone, or in one bulk write when several finish at once."""
        self.gate = Gate(self.store, self.poll_interval)
        """Flow-control limits at claim time (rate limits, keyed concurrency)."""
        self.claimed = 0
        self.stop_by = math.inf
        """When a stop's deadline falls (a :func:`time.monotonic` time): no holder's
        write retries past it (see :meth:`_patience`)."""
        self.pause_set = PauseSet(self.store, self.poll_interval)
        """What is paused, as this runner last read it (once per poll interval)."""
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
        """Indexes, decorator-declared schedules and concurrency permits (what
        :meth:`start` does before it claims; the app prepares its store once)."""
        self.app.ensure_schedules(queues=self.queues)
        for task in self.app.tasks.values():
            if task.concurrency is not None and task.concurrency_key is None:
                self.store.ensure_permits(task.name, task.concurrency)

    # Public steps ----------------------------------------------------------------------------
    def claim_next(self, *, job_id: Any = None) -> Claim | None:
        """Claim the next due job of this runner's tasks and queues (or the pending job
        ``job_id``, due or not). None when there is none, or when it was given back
        because its task's concurrency permits are all taken."""
        return self._take(job_id)[0]

    def claim_batch(self, limit: int) -> list[Claim]:
        """Claim up to ``limit`` due jobs of this runner's tasks and queues at once (in a
        few round trips whatever ``limit``), in claim order; fewer when fewer are due.
        With ``limit`` 1, as :meth:`claim_next`. When it raises, the jobs it had claimed
        are given back, uncounted (nobody else would run them)."""
        limit = validate.whole(limit, what="claim_batch: limit")
        claims: list[Claim] = []
        try:
            self._take_batch(limit, claims)
        except BaseException:
            for claim in claims:
                self._give_back_or_leave(claim)
            raise
        return claims

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
            claim.finish()
            self._release_permit(claim)
            self.gate.release(claim, started=True)

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
                    decisions[n] = self._after_write(claim, decision, seconds, None, stored)
                else:
                    decisions[n] = self._announce(claim, decision, stored, seconds)
            return decisions
        finally:
            for claim in claims:
                claim.finish()
                self._release_permit(claim)
                self.gate.release(claim, started=True)

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
            claim, claimed = self._take()
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
            self.app.emit(event, job=self._job(record), error=error, runner=self)

    def _defer(self, claim: Claim, decision: Decision, seconds: float) -> bool:
        """Leave ``claim``'s outcome to the next batched claim's write, if one is
        coming: True when it was (announced after that write: see
        :class:`~mongosched.runner.outcomes.Settler`).
        Only a runner's workers do; here, never."""
        return False

    def _release_dependents(self, stored: JobRecord) -> None:
        """A job this runner settled is final: release the jobs waiting for it."""
        if stored.status.is_final and stored.has_dependents:
            now, retention = self.app.now(), self.app.retention
            dependencies.release(self.store, stored, now=now, retention=retention, emit=self._emit)

    # Claiming ---------------------------------------------------------------------------------
    # A claim is three steps: which tasks and queues may be claimed from now (_scope),
    # the store's claim, and what happens to each job claimed before it runs (_admit).

    @property
    def _ranked(self) -> list[str]:
        """The registered tasks whose jobs are claimed by rank (they age, or share
        fairly): none for most apps, and then a claim is one find as before. Looked
        at again only when a task is registered."""
        tasks = self.app.tasks
        if self._ranked_of[0] != len(tasks):
            self._ranked_of = (len(tasks), [name for name, task in tasks.items() if task.ranked])
        return self._ranked_of[1]

    def _claimable(self) -> list[str]:
        """Registered tasks, less the paused ones and those whose concurrency permits
        were all taken a moment ago. (A task's jobs may sit in any queue: the claim
        filters on queues.) Reads the pause set once per poll interval."""
        now = time.monotonic()
        self.pause_set.refresh(every_queue=self.queues is None)
        names = [name for name in self.app.tasks if self._saturated.get(name, 0.0) <= now]
        return self.gate.claimable(self.pause_set.claimable_tasks(names), self.app.now())

    def _scope(self) -> tuple[list[str], Sequence[str] | None]:
        """The tasks and queues a claim may take jobs of, now (not paused)."""
        return self._claimable(), self.pause_set.claimable_queues(self.queues)

    def _take(
        self, job_id: Any = None, scope: tuple[list[str], Sequence[str] | None] | None = None
    ) -> tuple[Claim | None, bool]:
        """One claim: ``(claim, True)``; ``(None, True)`` when the job was given back
        (see :meth:`_admit`); ``(None, False)`` when nothing is due. ``scope``: the
        tasks and queues, when the caller has just read them (:meth:`_scope`)."""
        now = self.app.now()
        if job_id is not None:
            tasks, queues = list(self.app.tasks), None
        else:
            tasks, queues = scope or self._scope()
        record = self.store.claim(
            owner=self.name,
            tasks=tasks,
            queues=queues,
            now=now,
            lease_duration=self.lease_duration,
            job_id=job_id,
            ranked=self._ranked,
        )
        if record is None:
            return None, False
        return self._admit(record, now, by_id=job_id is not None), True

    def _take_batch(self, limit: int, claims: list[Claim]) -> int:
        """Up to ``limit`` claims at once, added to ``claims`` as each is admitted, so
        that the caller holds every claim taken whatever fails after it (and runs it, or
        gives it back). Returns the jobs claimed, counting those given back. Jobs of
        tasks with a concurrency or rate limit are claimed one at a time (a batch would
        take more than their limits allow, only to give them back): when such tasks may
        be claimed, the last place is a single claim over every task, so they are not
        starved."""
        if limit <= 1 and not self.settler.queued:
            claim, taken = self._take()
            if claim is not None:
                claims.append(claim)
            return int(taken)
        tasks, queues = self._scope()
        unlimited = [name for name in tasks if not self.app.tasks[name].limited]
        single = len(unlimited) < len(tasks)
        now = self.app.now()
        records: list[JobRecord] = []

        def settle_and_claim(
            outcomes: list[tuple[JobRecord, Settlement]], patience: Patience | None
        ) -> Any:
            settled, got = self.store.settle_and_claim(
                outcomes,
                owner=self.name,
                tasks=unlimited,
                queues=queues,
                now=now,
                lease_duration=self.lease_duration,
                limit=limit - single,
                patience=patience,
                ranked=self._ranked,
            )
            records.extend(got)  # held from here on, whatever fails next
            return settled

        try:
            self.settler.write_with(settle_and_claim)  # with the outcomes just finished
        finally:
            self._admit_all(records, now, claims)
        claimed = len(records)
        if single:
            claim, taken = self._take(scope=(tasks, queues))
            claimed += int(taken)
            if claim is not None:
                claims.append(claim)
        return claimed

    def _admit_all(self, records: list[JobRecord], now: datetime, claims: list[Claim]) -> None:
        """Admit each job a batched claim took, adding the claims to ``claims``: one
        whose admission fails is given back (see :meth:`_admit`) and the others go on."""
        for record in records:
            try:
                claim = self._admit(record, now)
            except StoreError as exc:
                log.warning("job %s (%s): not admitted: %s", record.id, record.task, exc)
                continue
            except Exception:
                log.exception("job %s (%s): not admitted", record.id, record.task)
                continue
            if claim is not None:
                claims.append(claim)

    def _admit(self, record: JobRecord, now: datetime, by_id: bool = False) -> Claim | None:
        """A claimed job, about to run: its :class:`Claim`, or None when it was given
        back (its schedule was paused since the pauses were read, its lease would end
        before the first heartbeat, or its task's concurrency permits are all held, or
        a flow-control limit is saturated) or ended unrun (past its expiry).
        ``by_id``: claimed by its id (pauses do not apply). Whatever fails on the way,
        the job is given back (uncounted) before the error leaves: a claim taken is
        run or given back, never dropped."""
        claim = Claim(self, record, self.app.tasks[record.task])
        try:
            return self._admitted(claim, now, by_id)
        except BaseException:
            self._give_back_or_leave(claim)
            raise

    def _admitted(self, claim: Claim, now: datetime, by_id: bool) -> Claim | None:
        """The checks of :meth:`_admit`."""
        record, task = claim.record, claim.task
        arrived = self.app.now()  # the claim's reply: what the checks below go by
        if outcome.is_expired(record, arrived):
            self._settle_unrun(claim, outcome.expired(record, arrived, self.app.retention))
            return None
        if not by_id and self.pause_set.holds(record.id):  # paused since we read
            self._give_back(claim)
            self.store.hold_schedules([record.id], arrived)
            return None
        label = record.label
        if not by_id and label is not None and self.pause_set.holds_label(label):
            self._give_back(claim)  # scheduled since the pause: held as it held the others
            self.store.hold_label(label, arrived, ids=[record.id])
            return None
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
                extra=logs.fields(record),
            )
            self._give_back(claim)
            return None
        if task.concurrency is not None and task.concurrency_key is None:
            if not self.store.take_permit(
                task.name, task.concurrency, claim.token, claim.job_id, self.name, now, claim.until
            ):
                self._give_back(claim)
                self._saturated[task.name] = time.monotonic() + self.poll_interval
                return None
            claim.has_permit = True
        held = self.gate.admit(claim, now)  # the start counts at the claim (started_at)
        if held is not None:  # a flow-control limit is saturated
            self._give_back(claim, held)
            return None
        self.claimed += 1
        return claim

    def _give_back(self, claim: Claim, settlement: Settlement | None = None) -> None:
        """A claim that will not run: pending again, uncounted, in its place in line
        (or as ``settlement`` says: held back by a limit)."""
        claim.finish()
        self._release_permit(claim)
        self.gate.release(claim, started=False)
        back = settlement or outcome.given_back(claim.record, self.app.now())
        self._settle_held(claim, back)

    def _settle_held(self, claim: Claim, settlement: Settlement) -> JobRecord | None:
        """Write ``settlement`` for a claim that does not run to an outcome (given back,
        ended unrun), at once and alone, with its lease's patience."""
        return self.store.settle(claim.record, settlement, self._patience((claim,)))

    def _patience(self, held: Sequence[Leased]) -> Patience:
        """How long a holder's write (an outcome, a claim given back) retries a
        transient database error: until the last of the leases of ``held`` ends
        (nothing renews them during the write; until then no other holder can have the
        job, and the write stays fenced on its token anyway), or the runner's stop
        deadline (what is not written by then is left to the leases' expiry)."""
        return LeaseEnd(self, held)

    def _give_back_or_leave(self, claim: Claim) -> None:
        """Give back a claim that will not run, after something else failed; if that
        fails too, its job is left to run again once its lease expires (and says so)."""
        try:
            self._give_back(claim)
        except Exception as exc:
            log.warning(
                "job %s (%s): could not give it back (%s); it runs again once its lease expires",
                claim.job_id,
                claim.task.name,
                exc,
                extra=logs.fields(claim.record),
            )

    def _settle_unrun(self, claim: Claim, decision: Decision) -> None:
        """A claimed job that ends without running (expired): write the decision."""
        record = claim.record
        stored = self._settle_held(claim, decision.settlement)
        if stored is not None:
            decision = decision.as_written(stored.status)
            log.info("job %s (%s): %s", record.id, record.task, decision.error)
            self._emit(decision.event, stored)
            self._release_dependents(stored)

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
        to the next batched claim's write (:meth:`_defer`), and announce it after."""
        decision = self._decision(claim, result, error)
        if decision is None or self._defer(claim, decision, seconds):
            return decision
        try:
            settled = self.settler.settle(claim.record, decision.settlement, claim.until)
            stored, failure = settled, None
        except SerializationError as exc:
            stored, failure = None, exc
        return self._after_write(claim, decision, seconds, stored, failure)

    def _after_write(
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
        logs.log_decision(claim, decision, seconds)
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
            self.app.emit("schedule:missed", job=self._job(record), runner=self, missed=count)

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
