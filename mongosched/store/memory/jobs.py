"""Scheduling, reads and users' changes to one job in the in-memory store (a part of
:class:`~mongosched.store.memory.MemoryStore`, as :mod:`mongosched.store.mongo.jobs` is
of the MongoDB store). Each method is one step under the store's lock."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any

from mongosched._core import transitions
from mongosched._core.records import (
    SORTABLE,
    UNSTARTED_STATUSES,
    JobQuery,
    JobRecord,
    JobStatus,
    PendingChanges,
    Settlement,
    evolved,
    is_listed_schedule,
)
from mongosched.errors import ConfigurationError
from mongosched.store import codec
from mongosched.store.memory.stored import (
    PENDING,
    RUNNING,
    decode_value,
    encode_result,
    ms,
    purgeable,
    sort_key,
)
from mongosched.store.memory.table import MemoryTable

__all__ = ["MemoryJobs"]


class MemoryJobs:
    """Inserts, reads and users' changes to one job, in memory."""

    def __init__(self, table: MemoryTable) -> None:
        self._table = table

    # Scheduling ----------------------------------------------------------------------------
    def insert(self, jobs: Sequence[JobRecord]) -> list[tuple[JobRecord, bool]]:
        """See :meth:`~mongosched.store.parts.Jobs.insert`. Every payload is checked
        first: a batch with one that cannot be stored writes nothing."""
        encoded = [self._table.encode(job) for job in jobs]
        with self._table.lock:
            added = [self._table.add(job, data) for job, data in zip(jobs, encoded, strict=True)]
            return [(job.snapshot(), created) for job, created in added]

    def upsert_schedule(self, job: JobRecord, now: datetime) -> bool:
        encoded = self._table.encode(job)
        rule = decode_value(encoded[1])
        with self._table.lock:
            current = self._table.find(job.id)
            if current is None:
                return self._table.add(job, encoded)[1]
            before = current.snapshot()
            after = transitions.redeclared(before, evolved(job, repeat=rule), now)
            if after is not before:
                current.repeat = encoded[1]
                self._table.write(current, evolved(after, result=current.record.result))
            return False

    # Reads -----------------------------------------------------------------------------------
    def get(self, job_id: Any) -> JobRecord | None:
        with self._table.lock:
            job = self._table.find(job_id)
            return None if job is None else job.snapshot()

    def find(
        self,
        query: JobQuery,
        *,
        sort: str = "updated_at",
        descending: bool = True,
        skip: int = 0,
        limit: int = 50,
    ) -> list[JobRecord]:
        if sort not in SORTABLE:
            raise ConfigurationError(f"cannot sort jobs by {sort!r}: use one of {SORTABLE}")
        with self._table.lock:
            jobs = sorted(
                self._table.select(query),
                key=lambda j: (sort_key(getattr(j.record, sort)), sort_key(j.id)),
                reverse=descending,
            )
            return [j.snapshot() for j in jobs[skip : skip + limit if limit else None]]

    def count(self, query: JobQuery) -> int:
        with self._table.lock:
            return len(self._table.select(query))

    def counts(self) -> dict[tuple[str, JobStatus], int]:
        with self._table.lock:
            records = [j.record for j in self._table.jobs.values()]
            return dict(Counter((r.label or r.task, r.status) for r in records))

    def oldest_due(self, now: datetime) -> JobRecord | None:
        now = ms(now)
        with self._table.lock:
            job = self._table.indexes.oldest_due(now)
            return None if job is None else job.snapshot()

    def running(self, limit: int = 1000) -> list[JobRecord]:
        with self._table.lock:
            jobs = sorted(
                self._table.by_status[RUNNING].values(),
                key=lambda j: (sort_key(j.record.lease and j.record.lease.until), j.seq),
            )
            return [j.snapshot() for j in jobs[: limit or None]]

    def unknown_due_tasks(self, known: Iterable[str], now: datetime) -> dict[str, int]:
        known, now = set(known), ms(now)
        with self._table.lock:
            if self._table.indexes.pending_tasks() <= known:
                return {}  # the usual answer, without a look at every pending job
            due = Counter(
                j.record.task
                for j in self._table.by_status[PENDING].values()
                if j.record.run_at <= now and j.record.task not in known
            )
        return dict(sorted(due.items(), key=lambda item: (-item[1], item[0]))[:20])

    def schedules(self) -> list[JobRecord]:
        with self._table.lock:
            jobs = [j for j in self._table.jobs.values() if is_listed_schedule(j.record)]
            jobs.sort(key=lambda j: (j.record.task, sort_key(j.id)))
            return [j.snapshot() for j in jobs]

    # Control by users -----------------------------------------------------------------------
    def cancel_pending(self, job_id: Any, settlement: Settlement) -> JobRecord | None:
        with self._table.lock:
            job = self._table.find(job_id)
            if job is None or job.record.status not in UNSTARTED_STATUSES:
                return None
            self._table.settle(job, settlement, encode_result(job.record.task, settlement))
            return job.snapshot()

    def request_cancel(self, job_id: Any, now: datetime) -> JobRecord | None:
        with self._table.lock:
            job = self._table.find(job_id, RUNNING)
            if job is None:
                return None
            job.record = transitions.cancel_requested(job.record, now)
            return job.snapshot()

    def update_pending(
        self, job: JobRecord, changes: PendingChanges, now: datetime
    ) -> JobRecord | None:
        """See :meth:`~mongosched.store.parts.Jobs.update_pending`. Args or kwargs left
        unchanged are taken from the job as stored, not as read."""
        with self._table.lock:
            stored = self._table.find(job.id, PENDING)
            if stored is None:
                return None
            if changes.args is not None or changes.kwargs is not None:
                current = codec.decode(stored.payload)
                args = current["args"] if changes.args is None else changes.args
                kwargs = current["kwargs"] if changes.kwargs is None else changes.kwargs
                stored.payload = codec.encode_payload(job.task, args, kwargs)  # raises first
            self._table.write(stored, transitions.edited(stored.record, changes, now))
            return stored.snapshot()

    def retry_finished(self, job_id: Any, status: JobStatus, now: datetime) -> JobRecord | None:
        with self._table.lock:
            job = self._table.find(job_id, JobStatus(status))
            if job is None:
                return None
            self._table.retry(job, now)
            return job.snapshot()

    def purge(
        self, statuses: Sequence[JobStatus], finished_before: datetime, task: str | None
    ) -> int:
        cutoff = ms(finished_before)
        with self._table.lock:
            doomed = [
                job
                for status in {JobStatus(s) for s in statuses}
                for job in self._table.by_status[status].values()
                if job.record.finished_at is not None
                and job.record.finished_at <= cutoff
                and (task is None or job.record.task == task)
                and purgeable(job)
            ]
            for job in doomed:
                self._table.delete(job)
            return len(doomed)
