"""The parts of the store seam around a job's run: what decides when it may run
(concurrency permits, rate and keyed limits, what it waits on) and what operators do.

The parts a job's run itself goes through are in :mod:`mongosched.store.parts`, with
the list of every part.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any, Protocol

from mongosched._core.records import (
    Admission,
    AuditEntry,
    JobQuery,
    JobRecord,
    JobStatus,
    Pause,
    QueueBacklog,
    RunnerInfo,
    ScheduleChanges,
    Settlement,
)

__all__ = ["Admin", "Dependents", "Limits", "Permits"]


class Admin(Protocol):
    """What operators do: bulk actions, pauses, schedule edits, counts, live runners
    and the audit trail."""

    def select_ids(self, query: JobQuery, *, after: Any = None, limit: int = 500) -> list[Any]:
        """Ids of up to ``limit`` jobs matching ``query``, in id order, after the id
        ``after`` (None: from the first): one page of a walk over every match that
        later pages continue whatever was written meanwhile (keyset, not skip)."""

    def retry_many(self, ids: Sequence[Any], statuses: Sequence[JobStatus], now: datetime) -> int:
        """:meth:`retry_finished` for each of ``ids`` that is still in one of the final
        ``statuses`` (a job run again meanwhile is left alone); a job whose dedupe key
        another job holds now stays as it is. Returns how many went back to pending."""

    def cancel_many(self, ids: Sequence[Any], settlement: Settlement) -> tuple[int, int]:
        """Cancel each of ``ids`` as it stands: one neither running nor finished is
        settled with ``settlement`` (cancelled, its key released); a running one is
        marked for cancellation (:meth:`request_cancel`); a finished one is left alone.
        Returns ``(cancelled, requested)``."""

    def purge_many(self, ids: Sequence[Any], statuses: Sequence[JobStatus]) -> int:
        """Delete each of ``ids`` that is in one of the final ``statuses`` (declared
        schedules stay: their tombstones keep them off). A job still marked as having
        dependents stays too, checked in the delete itself: the jobs waiting for it
        would wait forever (release them first, :meth:`dependents_released` clears the
        mark). Returns how many."""

    def finished_counts(self, since: datetime, bucket: float) -> dict[tuple[int, JobStatus], int]:
        """Jobs completed or failed since ``since``: how many per (bucket number,
        status), bucket ``n`` covering ``since + n * bucket`` seconds onwards."""

    def open_counts(self) -> dict[tuple[str, str, JobStatus], int]:
        """How many unfinished jobs there are of each (queue, task, status) (for queue
        depth; index-backed: final jobs are not read)."""

    def backlog(self, now: datetime) -> dict[str, QueueBacklog]:
        """The work of each queue that has some due or running (see
        :class:`QueueBacklog`): due pending jobs and when the one due longest became
        due, running jobs and those of them whose lease expired (index-backed: the
        claim index and the reaper's, no job read)."""

    def add_pause(self, pause: Pause) -> bool:
        """Record a pause (its ``since`` kept if it exists). True if it is new."""

    def remove_pause(self, kind: str, name: str) -> bool:
        """Drop a pause; True if it existed."""

    def pauses(self) -> list[Pause]:
        """Every pause, by kind and name."""

    def pending_queues(self) -> list[str]:
        """The queues that hold pending jobs (from the claim index: cheap)."""

    def task_names(self) -> list[str]:
        """The tasks that have jobs stored, sorted (MongoDB: from an index led by the
        task, one key per task, no job read)."""

    def labels(self) -> list[str]:
        """The labels of stored jobs, sorted (MongoDB: from the label index)."""

    def pause_label(self, label: str, now: datetime, ids: Sequence[Any] | None = None) -> int:
        """Move the pending jobs labelled ``label`` (of ``ids``, if given) to ``paused``,
        where no claim takes them, while the label's pause (kind ``task``) is stored;
        how many (0 when it is not). A pause that races the pause's removal never
        leaves a job paused: it finds the pause gone and resumes what it moved, or
        the resume does (see :meth:`resume_label`)."""

    def resume_label(self, label: str, now: datetime) -> int:
        """Move the paused jobs labelled ``label`` back to pending, due as they were;
        how many."""

    def pause_schedules(self, ids: Sequence[Any], now: datetime) -> int:
        """Move each of the repeating jobs ``ids`` that is pending to ``paused``, while
        its pause (kind ``schedule``) is stored, as :meth:`pause_label` does."""

    def resume_unpaused(self, now: datetime) -> int:
        """Move the paused jobs that no stored pause holds (neither their label's nor
        their schedule's) back to pending, due as they were (the reaper's sweep: what
        a process that died between a pause's write and its check left behind); how many."""

    def resume_schedule(self, job_id: Any, now: datetime) -> JobRecord | None:
        """A paused repeating job back to pending, due as it was; None if not paused."""

    def insert_runs(
        self, schedule_id: Any, jobs: Sequence[JobRecord]
    ) -> list[tuple[JobRecord, bool]] | None:
        """:meth:`~mongosched.store.parts.Jobs.insert` ``jobs``, made to run slots of
        the repeating job ``schedule_id`` (a triggered run, a backfill's lanes), only
        while that job is not finished: None, and none of them left stored, when it is
        finished or gone. MongoDB: the jobs are inserted, then the schedule is read; a
        schedule finished by then has the jobs just made deleted while still pending
        (a schedule that finishes after that read finished after its runs existed, as
        when a trigger comes before a cancel)."""

    def update_schedule(
        self, job: JobRecord, changes: ScheduleChanges, now: datetime
    ) -> JobRecord | None:
        """Apply ``changes`` to the repeating job ``job`` if it is pending or paused and
        unchanged since it was read (its ``updated_at``): a run of it that starts, or
        another edit, fences this one off (None)."""

    def save_runner(self, runner: RunnerInfo, expire_at: datetime) -> None:
        """Register or refresh a runner's entry, kept until ``expire_at``."""

    def remove_runner(self, runner_id: str) -> None: ...

    def runners(self, now: datetime) -> list[RunnerInfo]:
        """Registered runners whose entry has not expired at ``now``, by name."""

    def record_audit(self, entry: AuditEntry, expire_at: datetime | None) -> None:
        """Keep ``entry`` until ``expire_at`` (None: for good). Safe to repeat: a
        repeated call after a network error keeps it once."""

    def audit_entries(self, now: datetime, limit: int = 100, job: Any = None) -> list[AuditEntry]:
        """The entries kept and not expired at ``now``, newest first (``limit=0``:
        all of them); with ``job``, only those whose ``job`` is that id."""


class Permits(Protocol):
    """A task's concurrency permits."""

    def ensure_permits(self, task: str, limit: int) -> None:
        """Make the ``limit`` permits of ``task`` exist (idempotent)."""

    def take_permit(
        self,
        task: str,
        limit: int,
        token: str,
        job_id: Any,
        owner: str,
        now: datetime,
        until: datetime,
    ) -> bool:
        """Take a free (or expired) permit of ``task`` for the lease ``token``."""

    def renew_permit(
        self, task: str, token: str, until: datetime, deadline: float | None = None
    ) -> bool:
        """Extend the permit held by ``token``; False when it is no longer held
        (``deadline`` as for :meth:`renew`)."""

    def release_permit(self, task: str, token: str) -> None: ...

    def permit_holders(self, task: str, now: datetime) -> int:
        """Permits of ``task`` held by a live lease."""


class Dependents(Protocol):
    """What waits on a job's time or on other jobs: start deadlines (expiry) and dependencies."""

    def start_deadlines_due(self, now: datetime, limit: int = 100) -> list[JobRecord]:
        """Pending and waiting jobs whose expiry is at or before ``now``, soonest
        first (index-backed)."""

    def link_dependencies(
        self, job_ids: Sequence[Any], now: datetime, dependent: Any = None
    ) -> dict[Any, JobStatus]:
        """Mark the jobs ``job_ids`` as having dependents (so that when each ends, its
        dependents are released) and return the status of each that exists, read after
        the mark. With ``dependent`` (a waiting job stored before the call), record
        that its dependencies are linked: until then :meth:`unlinked` lists it."""

    def unlinked(self, created_before: datetime, limit: int = 100) -> list[JobRecord]:
        """Waiting jobs created before the given time whose dependencies were never
        linked (the scheduling call failed or its process died between the insert and
        the link): the reaper links them (index-backed)."""

    def of(self, job_id: Any, limit: int = 100) -> list[JobRecord]:
        """Waiting jobs that still wait for ``job_id`` (index-backed)."""

    def release_dependent(
        self, job: JobRecord, dependency: Any, settlement: Settlement
    ) -> JobRecord | None:
        """``job`` (waiting) no longer waits for ``dependency``. With a pending
        ``settlement`` the dependency is crossed off and, if none remains, the job
        becomes pending as the settlement says; with a final one the job ends so.
        The job as stored after the write, or None if it did not wait for
        ``dependency`` (any more). Safe to repeat. ``dependency`` None (pending only):
        make the job pending if it waits for nothing any more."""

    def stranded(self, limit: int = 100) -> list[JobRecord]:
        """Waiting jobs that wait for nothing any more (a release interrupted between
        its two steps): the reaper makes them pending."""

    def dependents_released(self, job_id: Any) -> None:
        """Every dependent of the final job ``job_id`` was released: clear its mark."""

    def unreleased(self, finished_before: datetime, limit: int = 100) -> list[JobRecord]:
        """Final jobs, finished before the given time, still marked as having
        dependents: a release interrupted by a crash (the reaper's repair)."""

    def orphaned(
        self, after: Any = None, limit: int = 100
    ) -> tuple[list[tuple[JobRecord, tuple[Any, ...]]], Any]:
        """One page of a walk over the waiting jobs, in id order after the id
        ``after`` (None: from the first), for those that wait for a job that no longer
        exists (deleted before it released them: by retention, or by hand): each with
        the dependencies it waits for that are missing, in its own order. Also the id
        the next page goes on after, or None when the walk is through. A page reads up
        to ``limit`` jobs, by index, and their dependencies by id: the reaper's repair
        takes a page per pass."""


class Limits(Protocol):
    """Flow-control limits: rate limits and keyed concurrency."""

    def take_rate(
        self, task: str, key: str | None, count: int, window: timedelta, token: str, now: datetime
    ) -> Admission:
        """Record a start of ``task`` (under ``key``) at ``now`` if fewer than ``count``
        were recorded in the ``window`` before it (one atomic step; a sliding log of
        the last ``count`` starts). Not taken: ``free_at`` is when the oldest of those
        leaves the window. Taking again with the same ``token`` takes no second start.
        The record of an idle key expires after its window."""

    def return_rate(self, task: str, key: str | None, token: str) -> None:
        """Take back the start recorded for ``token`` (its job did not start)."""

    def take_slot(
        self,
        task: str,
        key: str,
        limit: int,
        token: str,
        now: datetime,
        until: datetime,
    ) -> Admission:
        """Take one of the ``limit`` concurrency slots of ``task`` under ``key`` for
        the lease ``token`` until ``until`` (slots whose holder's lease ran out are
        free). Taking again with the same token takes no second slot."""

    def renew_slot(
        self, task: str, key: str, token: str, until: datetime, deadline: float | None = None
    ) -> bool:
        """Extend the slot ``token`` holds; False when it no longer holds one
        (``deadline`` as for :meth:`renew`)."""

    def release_slot(self, task: str, key: str, token: str) -> None: ...
