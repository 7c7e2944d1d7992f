"""What users do with jobs that exist: find them, count them, cancel, change, retry
and purge them, and the counts of :meth:`stats`. :class:`~mongosched.App` holds a
:class:`JobOperations` and offers its methods; they are here, apart from configuration
and scheduling, because they are a thin layer over the store's queries and the outcome
of a cancel."""

from __future__ import annotations

import enum
import logging
from collections.abc import Callable, Iterable
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from mongosched._core import outcome, validate
from mongosched._core.filters import JobFilters, job_query, statuses
from mongosched._core.records import (
    RETRYABLE_STATUSES,
    SORTABLE,
    JobRecord,
    JobStatus,
    PendingChanges,
)
from mongosched.errors import ConfigurationError, JobNotFound, JobStateError
from mongosched.job import Job
from mongosched.operations.audit import checked_actor
from mongosched.operations.base import AppParts, Operations
from mongosched.runner import dependencies

if TYPE_CHECKING:
    # Only for the type checker: ``Unpack`` is in ``typing`` from Python 3.11.
    from typing_extensions import Unpack

__all__ = ["Cancellation", "JobOperations"]

log = logging.getLogger("mongosched")


class Cancellation(str, enum.Enum):
    """What :meth:`App.cancel` did."""

    CANCELLED = "cancelled"
    """The job was pending: it is cancelled and will never start."""
    REQUESTED = "requested"
    """The job is running: its context reports cancellation at the next heartbeat, and it
    ends ``cancelled`` when the function returns."""
    ALREADY_FINISHED = "already_finished"
    """The job had already finished: nothing changed."""

    def __str__(self) -> str:
        return self.value


class JobOperations(Operations):
    """Queries and control of stored jobs, for :class:`~mongosched.App` (whose methods
    of the same names call these, with these docstrings). Its tasks check new
    arguments, and name the due tasks no runner knows.

    :param app: the app's parts (see :class:`~mongosched.operations.base.AppParts`).
    :param created: what follows a job made pending again (its event, the wake-up of
        this process's runners).
    """

    def __init__(self, app: AppParts, *, created: Callable[[Job], None]) -> None:
        super().__init__(app)
        self.created = created

    def announce(self, event: str, record: JobRecord) -> None:
        """Send ``event`` about a stored job (what a dependents' release reports)."""
        self.events.emit(event, job=Job(record, self.store.jobs))

    # Queries ------------------------------------------------------------------------------------
    def get_job(self, job_id: Any) -> Job | None:
        """The job with that id (an ObjectId or its hex string), or None. Raises
        :class:`~mongosched.errors.InvalidJobId` for what cannot be an id."""
        record = self.store.jobs.get(self._parse_id(job_id))
        return None if record is None else Job(record, self.store.jobs)

    def _parse_id(self, job_id: Any) -> Any:
        return job_id.id if isinstance(job_id, Job) else self.store.parse_id(job_id)

    def require(self, job_id: Any) -> Job:
        """The job with that id; raises :class:`~mongosched.errors.JobNotFound`."""
        job = self.get_job(job_id)
        if job is None:
            raise JobNotFound(f"no job with id {job_id}")
        return job

    def get_jobs(
        self,
        *,
        sort: tuple[str, int] = ("updated_at", -1),
        limit: int = 50,
        skip: int = 0,
        **filters: Unpack[JobFilters],
    ) -> list[Job]:
        """Jobs matching every filter given (see :class:`~mongosched._core.filters.JobFilters`:
        ``task``, ``queue``, ``label``, ``status``, ``error_type``,
        ``created_after``/``_before``, ``finished_after``/``_before``,
        ``due_after``/``_before``), sorted (then by id, so pages are stable).

        Filters and sorts use indexes: ``task`` (with ``status``), ``label`` (with
        ``status``) and ``status`` lead an index each, sorted by ``updated_at``.
        """
        field, direction = sort
        if field not in SORTABLE or direction not in (1, -1):
            raise ConfigurationError(
                f"get_jobs: sort must be (field, 1 or -1) with field in {', '.join(SORTABLE)}"
            )
        validate.whole(limit, what="get_jobs: limit", minimum=0)
        validate.whole(skip, what="get_jobs: skip", minimum=0)
        records = self.store.jobs.find(
            job_query("get_jobs", filters),
            sort=field,
            descending=direction == -1,
            skip=skip,
            limit=limit,
        )
        return [Job(record, self.store.jobs) for record in records]

    def count_jobs(self, **filters: Unpack[JobFilters]) -> int:
        """How many jobs match the filters (as :meth:`get_jobs`)."""
        return self.store.jobs.count(job_query("count_jobs", filters))

    # Control ------------------------------------------------------------------------------------
    def cancel(self, job_id: Any, *, actor: str | None = None) -> Cancellation:
        """Cancel a job: a pending or waiting one at once (the jobs waiting for it
        end too, unless they run on a dependency's failure); a running one at its next heartbeat
        (it ends ``cancelled`` when its function returns). A finished job is left as
        it is, and the result says so. A repeating job stops for good. ``actor``:
        who did it, for the audit trail (as for every operator action here)."""
        checked_actor(actor, "cancel")
        job_id = self._parse_id(job_id)
        done = self._cancel(job_id)
        count = 0 if done is Cancellation.ALREADY_FINISHED else 1
        self.audit.record(
            "cancel", f"job {job_id}", count=count, detail=done.value, actor=actor, job=job_id
        )
        return done

    def _cancel(self, job_id: Any) -> Cancellation:
        for _ in range(3):  # its status may change between the two writes
            now = self.now()
            record = self.store.jobs.cancel_pending(job_id, outcome.cancelled(now, self.retention))
            if record is not None:
                log.info("job %s (%s) cancelled", record.id, record.task)
                self.announce("job:cancel", record)
                if record.has_dependents:
                    dependencies.release(
                        self.store,
                        record,
                        now=now,
                        retention=self.retention,
                        emit=self.announce,
                    )
                return Cancellation.CANCELLED
            record = self.store.jobs.request_cancel(job_id, now)
            if record is not None:
                log.info("job %s (%s) is running: cancellation requested", record.id, record.task)
                return Cancellation.REQUESTED
            job = self.require(job_id)
            if job.is_finished:
                log.info("job %s (%s) already %s: nothing to cancel", job.id, job.task, job.status)
                return Cancellation.ALREADY_FINISHED
        raise JobStateError(f"job {job_id} keeps changing status; not cancelled")

    def update_job(self, /, job_id: Any, *, actor: str | None = None, **changes: Any) -> Job:
        """Change a pending job: ``priority``, ``run_at`` (or ``delay``), ``queue``,
        ``args``, ``kwargs``. Raises :class:`JobStateError` unless it is pending. New
        arguments are bound to the function's parameters when this process knows the
        task (:class:`~mongosched.errors.ArgumentError`); a process that does not, as
        an operator's shell, cannot check them."""
        allowed = {"priority", "run_at", "delay", "queue", "args", "kwargs"}
        unknown = set(changes) - allowed
        if unknown:
            raise ConfigurationError(
                f"update_job: cannot change {', '.join(sorted(unknown))} "
                f"(only {', '.join(sorted(allowed))})"
            )
        checked_actor(actor, "update_job")
        current = self.require(job_id)
        name = current.task
        if "run_at" in changes and "delay" in changes:
            raise ConfigurationError(f"task {name!r}: give either delay or run_at, not both")
        now = self.now()
        run_at = None
        if "run_at" in changes:
            run_at = validate.aware_datetime(changes["run_at"], task=name)
        if "delay" in changes:
            delay = validate.seconds(changes["delay"], what=f"task {name!r}: delay")
            run_at = now + timedelta(seconds=delay)
        kwargs = changes.get("kwargs")
        if kwargs is not None:
            if not isinstance(kwargs, dict):
                raise ConfigurationError(f"task {name!r}: kwargs must be a dict")
        args = changes.get("args")
        task = self.tasks.get(name)
        if task is not None and (args is not None or kwargs is not None):
            task.parameters.bind(
                current.args if args is None else tuple(args),
                current.kwargs if kwargs is None else kwargs,
            )
        update = PendingChanges(
            priority=None
            if "priority" not in changes
            else validate.priority(changes["priority"], task=name),
            queue=None if "queue" not in changes else validate.queue(changes["queue"], task=name),
            run_at=run_at,
            args=None if args is None else tuple(args),
            kwargs=kwargs,
        )
        record = self.store.jobs.update_pending(current.record, update, now)
        if record is None:
            status = self.require(job_id).status
            raise JobStateError(
                f"job {current.id} ({name}) is {status}; only pending jobs can change"
            )
        detail = ", ".join(sorted(changes))
        self.audit.record(
            "update",
            f"job {current.id} ({name})",
            count=1,
            detail=detail,
            actor=actor,
            job=current.id,
        )
        return Job(record, self.store.jobs)

    def retry_job(self, job_id: Any, *, actor: str | None = None) -> Job:
        """Run a failed, cancelled or expired job again: back to pending, due now, attempts reset.
        Raises :class:`JobStateError` for any other status, or when its dedupe key is now
        held by another job."""
        checked_actor(actor, "retry_job")
        job = self.require(job_id)
        if job.status not in RETRYABLE_STATUSES:
            raise JobStateError(
                f"job {job.id} ({job.task}) is {job.status}; only failed, cancelled or "
                "expired jobs can be retried"
            )
        record = self.store.jobs.retry_finished(job.id, job.status, self.now())
        if record is None:
            raise JobStateError(f"job {job.id} ({job.task}) changed status; not retried")
        result = Job(record, self.store.jobs)
        self.created(result)
        self.audit.record("retry", f"job {job.id} ({job.task})", count=1, actor=actor, job=job.id)
        return result

    def delete_job(self, job_id: Any, *, actor: str | None = None) -> None:
        """Delete one finished job (completed, failed or cancelled) now. Raises
        :class:`JobNotFound` when there is no such job, :class:`JobStateError` when it
        has not finished (cancel it first). A declared schedule's job is never deleted
        (cancel the schedule instead). Jobs still waiting for it are released first,
        as its outcome says."""
        checked_actor(actor, "delete_job")
        for _ in range(3):  # a job may depend on it between the release and the delete
            job = self.require(job_id)
            if not job.is_finished:
                raise JobStateError(
                    f"job {job.id} ({job.task}) is {job.status}; only finished jobs can be deleted"
                )
            if job.record.has_dependents:
                dependencies.release(
                    self.store,
                    job.record,
                    now=self.now(),
                    retention=self.retention,
                    emit=self.announce,
                )
            if self.store.admin.purge_many([job.id], [job.status]):
                log.info("job %s (%s) deleted", job.id, job.task)
                self.audit.record(
                    "delete", f"job {job.id} ({job.task})", count=1, actor=actor, job=job.id
                )
                return
        raise JobStateError(f"job {job.id} ({job.task}) changed or stays; not deleted")

    def purge(
        self,
        *,
        status: str | JobStatus | Iterable[str | JobStatus] = ("completed",),
        older_than: timedelta | float = timedelta(0),
        task: str | None = None,
        actor: str | None = None,
    ) -> int:
        """Delete finished jobs of the given final statuses that finished more than
        ``older_than`` ago. Jobs still waiting for one of them are released first, as
        its outcome says. Returns how many were deleted."""
        checked_actor(actor, "purge")
        chosen = statuses(status)
        bad = [s.value for s in chosen if not s.is_final]
        if bad:
            raise ConfigurationError(f"purge: only final statuses can be purged, not {bad}")
        age = validate.seconds(older_than, what="purge: older_than")
        cutoff = self.now() - timedelta(seconds=age)
        self.release_for_purge(cutoff)
        deleted = self.store.jobs.purge(chosen, cutoff, task)
        what = "/".join(s.value for s in chosen)
        log.info("purged %d %s job(s)", deleted, what)
        target = f"status={what}, finished_before={cutoff.isoformat()}"
        target += "" if task is None else f", task={task}"
        self.audit.record("purge", target, count=deleted, actor=actor)
        return deleted

    def release_for_purge(self, through: datetime) -> None:
        """Before a purge of jobs that finished by ``through``: release the dependents
        of those still marked as having some (a crash stopped their release), or the
        store's delete would leave them (a job marked again meanwhile stays until a
        later purge)."""
        dependencies.release_finished(
            self.store,
            before=through + timedelta(milliseconds=1),  # stored times: whole milliseconds
            now=self.now(),
            retention=self.retention,
            emit=self.announce,
        )

    def stats(self, *, running: bool = True) -> dict[str, Any]:
        """Counts by task (a labelled job under its label) and status, the oldest due
        pending job, the ``backlog`` of each queue with jobs due or running (``due``:
        how many, ``oldest_run_at`` and ``late_seconds`` of the one due longest, None
        when none is; ``running``, ``expired``: running jobs whose lease expired,
        ``total``: due and running, what to scale runners on), the running
        leases, due jobs whose task no runner of this app knows, and ``clock_offset``:
        seconds the server's clock is ahead of this app's (None where the store has no
        clock).
        ``running=False`` leaves the running leases out (an empty list): they are up to
        1,000 jobs read, which a page of counts does not need."""
        now = self.now()
        by_task: dict[str, dict[str, int]] = {}
        totals: dict[str, int] = {s.value: 0 for s in JobStatus}
        for (task, status), n in self.store.jobs.counts().items():
            by_task.setdefault(task, {})[status.value] = n
            totals[status.value] += n
        oldest = self.store.jobs.oldest_due(now)
        offset = self.store.clock_offset(self.now)
        return {
            "now": now,
            "clock_offset": None if offset is None else offset.total_seconds(),
            "totals": totals,
            "by_task": by_task,
            "oldest_due": None
            if oldest is None
            else {
                "id": oldest.id,
                "task": oldest.task,
                "run_at": oldest.run_at,
                "late_seconds": (now - oldest.run_at).total_seconds(),
            },
            "backlog": {
                queue: {
                    "due": waiting.due,
                    "oldest_run_at": waiting.oldest,
                    "late_seconds": None
                    if waiting.oldest is None
                    else (now - waiting.oldest).total_seconds(),
                    "running": waiting.running,
                    "expired": waiting.expired,
                    "total": waiting.total,
                }
                for queue, waiting in sorted(self.store.admin.backlog(now).items())
            },
            "running": [
                {
                    "id": r.id,
                    "task": r.task,
                    "owner": r.lease.owner if r.lease else None,
                    "lease_until": r.lease.until if r.lease else None,
                    "expired": bool(r.lease and r.lease.until < now),
                }
                for r in (self.store.jobs.running() if running else ())
            ],
            "unknown_tasks": self.store.jobs.unknown_due_tasks(self.tasks, now),
        }
