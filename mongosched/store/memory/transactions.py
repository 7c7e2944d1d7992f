"""Transactions on ``memory://`` (a part of ``MemoryStore``): the jobs scheduled in one
are held by it and stored when it commits, all at once or none.

There is no database session and no isolation of anything else: a memory
transaction holds only what mongosched writes in it, which is what users' tests of
their own code look at (a job exists if and only if the block committed). A job's
outcome written in one (a transactional task's) is its last write: it lands together
with the jobs held, under the store's lock, or neither does.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from datetime import datetime
from typing import Any, NoReturn

from mongosched._core import transitions
from mongosched._core.records import DEDUPE_SCOPE_STATUSES as SCOPE_STATUSES
from mongosched._core.records import REPLACEABLE_STATUSES as REPLACEABLE
from mongosched._core.records import JobRecord, JobStatus, Settlement
from mongosched._core.steps import StepRecord
from mongosched.errors import StoreError, TransactionConflict, TransactionError
from mongosched.store import codec
from mongosched.store.memory.stored import StoredJob, encode_result
from mongosched.store.memory.table import MemoryTable, holds_window

__all__ = ["MemoryStaged", "MemoryTransaction", "MemoryTransactions"]


class MemoryTransaction:
    """The jobs a memory transaction holds until it commits."""

    stores_at_commit = True
    session = None

    def __init__(self, table: MemoryTable) -> None:
        self.table = table
        self.staged: list[StoredJob] = []
        self.replacing: list[tuple[Any, StoredJob]] = []
        """Debounces of stored jobs: each job's id, and the later call that replaces it."""
        self.open = True

    @property
    def active(self) -> bool:
        return self.open

    def commit(self) -> None:
        if self.open:
            self.commit_with(None)

    def commit_with(self, outcome: tuple[JobRecord, Settlement] | None) -> JobRecord | None:
        """Store what the transaction holds, with ``outcome`` (a job and its settlement,
        fenced on its lease) if given, in one step: all of it, or nothing when the
        outcome's lease no longer holds (None) or a held job's dedupe key was taken
        meanwhile, or a job it replaces (a debounce) was claimed meanwhile
        (:class:`~mongosched.errors.TransactionConflict`). Ends the transaction either
        way (committed, or aborted by the caller)."""
        if not self.open:
            raise TransactionError("the transaction has ended: it cannot commit")
        table = self.table
        result = None if outcome is None else encode_result(outcome[0].task, outcome[1])
        with table.lock:
            for job in self.staged:
                if table.rival(job) is not None:
                    conflict(job, "was taken")
            replaced = []
            for job_id, later in self.replacing:
                holder = table.rival(later)
                if holder is None or holder.id != job_id or holder.record.status not in REPLACEABLE:
                    conflict(later, "moved to another job")
                replaced.append((holder, later))
            stored = None
            if outcome is not None:
                stored = table.settle_locked(outcome[0], outcome[1], result)
                if stored is None:
                    return None
            for job in self.staged:
                table.put(job)
            for holder, later in replaced:
                table.replace(holder, later)
        self.abort()
        return stored

    def abort(self) -> None:
        self.open = False
        self.staged, self.replacing = [], []

    def end(self) -> None:
        self.abort()

    def retryable(self, error: BaseException) -> bool:
        return isinstance(error, TransactionConflict)


def conflict(job: StoredJob, what: str) -> NoReturn:
    r = job.record
    raise TransactionConflict(
        f"job {job.id} ({r.task}): dedupe key {r.dedupe_key!r} {what} since it was "
        "scheduled in the transaction; run it again"
    )


class MemoryTransactions:
    """``database``, ``begin`` and ``join`` of the memory store (its ``within`` makes a
    :class:`MemoryStaged`)."""

    def __init__(self, table: MemoryTable) -> None:
        self._table = table

    def database(self) -> None:
        """No pymongo database: the jobs are in this process."""
        return None

    def begin(self) -> MemoryTransaction:
        return MemoryTransaction(self._table)

    def join(self, session: Any) -> MemoryTransaction:
        raise TransactionError(
            "memory:// has no database sessions to join: use app.transaction() (or "
            "app.with_transaction), which works on every store"
        )


class MemoryStaged:
    """The memory store as a transaction sees it (:class:`~mongosched.store.parts.Staged`):
    new jobs are held (:class:`StagedJobs`), a job's outcome is the last write.
    Scheduling and outcomes only: the rest raises."""

    def __init__(
        self, transaction: MemoryTransaction, get: Callable[[Any], JobRecord | None]
    ) -> None:
        self.parse_id = codec.parse_id
        self.jobs = StagedJobs(transaction, get)
        self.leases = StagedLeases(transaction)
        self.dependents = StagedDependents(self.jobs)
        self.workflows = UnstagedWorkflows()


class StagedJobs:
    """New jobs held by a transaction: ids made, dedupe keys looked up in the store
    and among the jobs held."""

    def __init__(
        self, transaction: MemoryTransaction, get: Callable[[Any], JobRecord | None]
    ) -> None:
        self.transaction = transaction
        self.table = transaction.table
        self._get_stored = get

    def _held(self, job_id: Any) -> StoredJob | None:
        return next((j for j in self.transaction.staged if j.id == job_id), None)

    def get(self, job_id: Any) -> JobRecord | None:
        held = self._held(job_id)
        return held.snapshot() if held is not None else self._get_stored(job_id)

    def insert(self, jobs: Sequence[JobRecord]) -> list[tuple[JobRecord, bool]]:
        if not self.transaction.open:
            raise TransactionError("the transaction has ended: nothing can be scheduled in it")
        table = self.table
        encoded = [table.encode(job) for job in jobs]
        results: list[tuple[JobRecord, bool]] = []
        for record, data in zip(jobs, encoded, strict=True):
            job = table.stored(record, data, codec.new_id() if record.id is None else record.id)
            holder = self._holder(job)
            if holder is None:
                self.transaction.staged.append(job)
                results.append((job.snapshot(), True))
                continue
            if job.record.dedupe_replace and not holds_window(holder, job):
                holder = self._replace(holder, job)
            results.append((holder.snapshot(), False))
        return results

    def _holder(self, job: StoredJob) -> StoredJob | None:
        """The job, held or stored, that holds ``job``'s dedupe key: a throttle window's
        holder first (a call with a window), else the key's holder in its scope."""
        if job.key is None:
            return None
        held = [other for other in self.transaction.staged if other.key == job.key]
        r = job.record  # a window holds the key whatever scope either call gives
        keyed = (o for o in self.transaction.staged if o.record.dedupe_key == r.dedupe_key)
        windows = (o for o in keyed if o.record.task == r.task and holds_window(o, job))
        holder = next(windows, None)
        with self.table.lock:
            if holder is None:
                holder = self.table.window_holder(job)
            if holder is None and job.record.status in SCOPE_STATUSES[job.key[0]]:
                holder = next(iter(held), None)
            return holder if holder is not None else self.table.rival(job)

    def _replace(self, holder: StoredJob, job: StoredJob) -> StoredJob:
        """Debounce ``holder`` with ``job``: at once if the transaction holds it, else
        when it commits (a copy shows the job as it will be)."""
        if any(other is holder for other in self.transaction.staged):
            self.table.replace(holder, job)
            return holder
        if holder.record.status not in REPLACEABLE:
            return holder
        self.transaction.replacing.append((holder.id, job))
        return replace(
            holder, record=transitions.replaced(holder.record, job.record), payload=job.payload
        )


class StagedLeases:
    """A job's outcome in a transaction: the last one is written at the commit."""

    def __init__(self, transaction: MemoryTransaction) -> None:
        self.transaction = transaction

    def settle(self, job: JobRecord, settlement: Settlement) -> JobRecord | None:
        return self.transaction.commit_with((job, settlement))


class StagedDependents:
    """Dependencies in a transaction: the statuses of those that exist; the rest is
    done at the commit."""

    def __init__(self, jobs: StagedJobs) -> None:
        self._jobs = jobs

    def link_dependencies(
        self, job_ids: Sequence[Any], now: datetime, dependent: Any = None
    ) -> dict[Any, JobStatus]:
        """The statuses of the jobs that exist (they are linked when the transaction
        commits: see :attr:`MemoryTransaction.stores_at_commit`)."""
        found = {}
        for job_id in job_ids:
            job = self._jobs.get(job_id)
            if job is not None:
                found[job.id] = job.status
        return found

    # memory:// links and releases dependencies, and records a workflow's steps, at
    # the commit, outside the transaction: a call of these here is a bug.

    def of(self, job_id: Any, limit: int = 100) -> list[JobRecord]:
        raise _not_staged("dependents")

    def release_dependent(
        self, job: JobRecord, dependency: Any, settlement: Settlement
    ) -> JobRecord | None:
        raise _not_staged("release_dependent")

    def dependents_released(self, job_id: Any) -> None:
        raise _not_staged("dependents_released")


class UnstagedWorkflows:
    """A workflow's steps are recorded at the commit, outside the transaction."""

    def fence_workflow(self, job_id: Any, token: str, now: datetime) -> bool:
        raise _not_staged("fence_workflow")

    def record_step(self, step: StepRecord, token: str | None) -> StepRecord:
        raise _not_staged("record_step")


def _not_staged(name: str) -> StoreError:
    return StoreError(f"memory:// transactions hold new jobs and a job's outcome only, not {name}")
