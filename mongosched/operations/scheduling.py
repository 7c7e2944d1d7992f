"""Storing new jobs: the jobs of a scheduling call (:meth:`App.schedule_bulk`, which
``task.schedule(...)`` comes to), a run a schedule is triggered for and the lanes of a
backfill (:mod:`mongosched.operations.triggers`); each announced once stored, or run
here in eager mode (:class:`SchedulingOperations`, which :class:`~mongosched.App`
holds)."""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable
from datetime import datetime
from typing import Any

from mongosched._core.records import JobRecord, JobStatus
from mongosched.errors import ConfigurationError, TransactionError
from mongosched.job import Job
from mongosched.operations import triggers
from mongosched.operations.audit import checked_actor
from mongosched.operations.base import AppParts, Operations
from mongosched.operations.jobs import JobOperations
from mongosched.runner import dependencies
from mongosched.runner.host import RunnerHost
from mongosched.runner.runner import Runner
from mongosched.store import Staged
from mongosched.task import JobSpec
from mongosched.transaction import Transactions

__all__ = ["SchedulingOperations"]


class SchedulingOperations(Operations):
    """Scheduling, triggers and backfills, for :class:`~mongosched.App` (whose methods
    of the same names call these, with these docstrings).

    :param app: the app's parts (see :class:`~mongosched.operations.base.AppParts`).
    :param transactions: the app's transactions (the one a call's jobs join).
    :param jobs: the app's job operations (a job read back, a dependents' release
        reported, what follows a new job: its event, the wake-up of this process's
        runners).
    :param named: the repeating job a schedule argument names, as stored, for an
        operation (which a finished schedule refuses).
    :param host: the app as its runners see it (eager mode runs jobs in a runner).
    :param eager: whether jobs run here, at once (the app's ``eager``, read at each
        call; see :mod:`mongosched.testing`).
    """

    def __init__(
        self,
        app: AppParts,
        *,
        transactions: Transactions,
        jobs: JobOperations,
        named: Callable[[Any, str], JobRecord],
        host: RunnerHost,
        eager: Callable[[], bool],
    ) -> None:
        super().__init__(app)
        self.transactions = transactions
        self.jobs = jobs
        self.named = named
        self.host = host
        self.eager = eager
        self.eager_runner: Runner | None = None
        """The runner of eager mode, made at its first job."""

    def schedule_spec(self, spec: JobSpec) -> Job[Any]:
        """Schedule one job made by ``task.job(...)`` (what :meth:`Task.schedule` does)."""
        return self.schedule_bulk([spec])[0]

    def schedule_bulk(self, specs: Iterable[JobSpec], *, session: Any = None) -> list[Job[Any]]:
        """Schedule many jobs in one round trip: ``[task.job(...),
        task.configure(delay=60).job(...), ...]``. Returns the jobs in order; where a
        dedupe key was held, the job holding it.

        ``session``: a :class:`~mongosched.transaction.Transaction` or a pymongo
        ``ClientSession`` in a transaction (as ``configure(session=...)``): the jobs
        exist if and only if it commits. Without one, inside ``with
        app.transaction()`` or a transactional task, they join that transaction."""
        now = self.now()
        specs = list(specs)
        for spec in specs:
            if not isinstance(spec, JobSpec):
                raise ConfigurationError(
                    f"schedule_bulk takes task.job(...) specs, not {type(spec).__name__}"
                )
        given = [s for s in (session, *(spec.options.session for spec in specs)) if s is not None]
        what = f"task {specs[0].task.name!r}: session" if specs else "session"
        tx = self.transactions.of(given, what)
        writable = self.writable()
        store: Staged = writable
        if tx is not None:
            if self.eager() and not tx.sees_commit:
                raise TransactionError(
                    "eager mode runs a job when its transaction commits, which a session of "
                    "your own does out of mongosched's sight: use app.transaction()"
                )
            store = writable.within(tx.handle)
        records = [dependencies.checked(store, spec.build(now), now) for spec in specs]
        stored = store.jobs.insert(records)
        jobs = []
        for record, created in stored:
            if created and record.status is JobStatus.WAITING:
                if tx is not None and tx.handle.stores_at_commit:  # stored at the commit
                    tx.on_commit(functools.partial(self._link, record))
                else:
                    record = self._link(record, store)
            job = Job(record, self.store.jobs)
            jobs.append(job)
            if not created:
                continue
            if self.eager() and record.status is JobStatus.PENDING:
                if tx is None:
                    jobs[-1] = self._run_eagerly(record)
                else:
                    tx.on_commit(functools.partial(self._run_eagerly, record))
            elif tx is None:
                self.jobs.created(job)
            else:
                tx.on_commit(functools.partial(self.jobs.created, job))
        return jobs

    def _link(self, record: JobRecord, store: Staged | None = None) -> JobRecord:
        """A job stored waiting: resolve the dependencies that ended already (read
        after the insert, so none that ends meanwhile is missed). ``store``: the
        store's view of a transaction the job was stored in."""
        store = store or self.store
        statuses = store.dependents.link_dependencies(record.depends_on, self.now(), record.id)
        return dependencies.resolve_new(
            store,
            record,
            statuses,
            now=self.now(),
            retention=self.retention,
            emit=self.jobs.announce,
        )

    def _run_eagerly(self, record: JobRecord) -> Job:
        """Run a just-stored job here until it finishes (retries without their delays).
        A repeating job runs once and stays pending for its next slot."""
        self.jobs.announce("job:created", record)
        if self.eager_runner is None:
            self.eager_runner = Runner(self.host, workers=1, name="eager")
        runner = self.eager_runner
        while True:
            claim = runner.claim_next(job_id=record.id)
            if claim is None:
                break
            decision = runner.run_claim(claim)
            if decision is None or decision.event != "job:retry":
                break
        return self.jobs.require(record.id)

    def trigger_schedule(self, schedule: Any, *, actor: str | None = None) -> Job[Any]:
        """Run a repeating schedule (its id, its task or its task's name) once, now,
        beside its slots: its next slot does not move. The run is a job of its own,
        with the schedule's payload, queue, priority and attempts;
        ``current_job().scheduled_for`` is the time of the trigger. ``actor``: who did
        it, for the audit trail."""
        checked_actor(actor, "trigger_schedule")
        record = self.named(schedule, "trigger_schedule")
        stored = triggers.trigger(self.writable(), record, self.now())
        target = f"schedule {record.id} ({record.task})"
        self.audit.record("trigger", target, count=1, detail=f"job {stored.id}", actor=actor)
        return self._new_job(stored)

    def backfill(
        self,
        schedule: Any,
        start: datetime,
        end: datetime,
        *,
        at_once: int = 1,
        actor: str | None = None,
    ) -> list[Job[Any]]:
        """Run the slots of a repeating schedule (its id, its task or its task's name)
        from ``start`` to ``end`` (both included, timezone-aware), each once, in order,
        at most ``at_once`` at a time, as soon as runners can; its own slots go on.
        Returns the jobs that run them (``at_once`` lanes, each running a consecutive
        part of the range; a lane of the same range still running is returned, not
        doubled). ``current_job().scheduled_for`` is the slot a run is for. ``actor``:
        who did it, for the audit trail."""
        checked_actor(actor, "backfill")
        record = self.named(schedule, "backfill")
        lanes = triggers.backfill(self.writable(), record, start, end, at_once, self.now())
        made = sum(1 for _, created in lanes if created)
        self.audit.record(
            "backfill",
            f"schedule {record.id} ({record.task})",
            count=made,
            detail=f"{start.isoformat()} to {end.isoformat()}, {at_once} at once",
            actor=actor,
        )
        return [
            self._new_job(lane) if created else Job(lane, self.store.jobs)
            for lane, created in lanes
        ]

    def _new_job(self, record: JobRecord) -> Job[Any]:
        """A job just stored by a trigger or a backfill: announced, or in eager mode
        run here (each slot of a backfill's job, one after another)."""
        if not self.eager():
            job = Job(record, self.store.jobs)
            self.jobs.created(job)
            return job
        job = self._run_eagerly(record)
        runner = self.eager_runner
        while runner is not None and job.repeat is not None and job.status is JobStatus.PENDING:
            claim = runner.claim_next(job_id=record.id)  # a backfill's job: its next slot
            if claim is None:
                break
            runner.run_claim(claim)
            job = self.jobs.require(record.id)
        return job
