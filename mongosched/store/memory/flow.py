"""Flow control in the in-memory store: expiry sweeps, the release of dependents and the
limits (a part of :class:`~mongosched.store.memory.MemoryStore`, as
:mod:`mongosched.store.mongo.flow` and :mod:`mongosched.store.mongo.limits` are of the MongoDB
store), with indexes of their own so that nothing scans: a heap of expiring jobs, the
waiting jobs by what they wait for, the finished jobs still marked as having
dependents, what is waited for but no longer exists. Every method runs under the
store's one lock."""

from __future__ import annotations

import heapq
import threading
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from mongosched._core import transitions
from mongosched._core.records import UNSTARTED_STATUSES as UNSTARTED
from mongosched._core.records import Admission, JobRecord, JobStatus, Settlement, evolved
from mongosched.store.memory.jobs import Entry, StoredJob, ms, sort_key
from mongosched.store.memory.limits import Limits

__all__ = ["FlowIndex", "MemoryFlow"]

SLACK = 1024


class FlowIndex:
    """The flow-control indexes over a store's jobs (kept current by :meth:`track`)."""

    def __init__(self, jobs: dict[Any, StoredJob]) -> None:
        self._jobs = jobs
        self._expiring: list[Entry] = []
        self._expiring_cap = SLACK
        self._waiting: dict[Any, set[Any]] = {}  # dependency -> jobs waiting for it
        self._registered: dict[Any, tuple[Any, ...]] = {}  # job -> what it is filed under
        self._stranded: set[Any] = set()  # waiting for nothing any more
        self._flagged: set[Any] = set()  # marked as having dependents
        self._unlinked: set[Any] = set()  # waiting, dependencies not yet linked
        self._gone: set[Any] = set()  # waited for, but no such job (any more)

    def track(self, job: StoredJob) -> None:
        """After a change of ``job`` (under a new version)."""
        r = job.record
        self._gone.discard(r.id)
        if r.expires_at is not None and r.status in UNSTARTED:
            heapq.heappush(self._expiring, (r.expires_at, job.seq, job.version, r.id))
            if len(self._expiring) > self._expiring_cap:
                self._rebuild_expiring()
        waits = r.waiting_for if r.status is JobStatus.WAITING else ()
        old = self._registered.get(job.id, ())
        if old != waits:
            for dep in set(old) - set(waits):
                self._waiting.get(dep, set()).discard(job.id)
                if not self._waiting.get(dep, True):
                    del self._waiting[dep]
                    self._gone.discard(dep)
            for dep in waits:
                self._waiting.setdefault(dep, set()).add(job.id)
                if dep not in self._jobs:
                    self._gone.add(dep)
            if waits:
                self._registered[job.id] = tuple(waits)
            else:
                self._registered.pop(job.id, None)
        if r.status is JobStatus.WAITING and not r.waiting_for:
            self._stranded.add(job.id)
        else:
            self._stranded.discard(job.id)
        if r.has_dependents:
            self._flagged.add(job.id)
        else:
            self._flagged.discard(job.id)
        if job.unlinked and r.status is JobStatus.WAITING:
            self._unlinked.add(job.id)
        else:
            self._unlinked.discard(job.id)

    def forget(self, job: StoredJob) -> None:
        """``job`` was deleted."""
        job.record = evolved(job.record, status=JobStatus.CANCELLED, has_dependents=False)
        job.unlinked = False
        self.track(job)
        if job.id in self._waiting:  # jobs wait for it still
            self._gone.add(job.id)

    def _rebuild_expiring(self) -> None:
        self._expiring = sorted(
            (j.record.expires_at, j.seq, j.version, j.id)
            for j in self._jobs.values()
            if j.record.expires_at is not None and j.record.status in UNSTARTED
        )
        self._expiring_cap = 2 * len(self._expiring) + SLACK

    def start_deadlines_due(self, now: datetime, limit: int) -> list[StoredJob]:
        heap, found = self._expiring, list[Entry]()
        while heap and len(found) < limit and heap[0][0] <= now:
            entry = heapq.heappop(heap)
            job = self._jobs.get(entry[3])
            if job is not None and job.version == entry[2] and job.record.status in UNSTARTED:
                found.append(entry)
        for entry in found:  # they stay until settled
            heapq.heappush(heap, entry)
        return [self._jobs[entry[3]] for entry in found]

    def dependents(self, job_id: Any, limit: int) -> list[StoredJob]:
        jobs = [self._jobs[i] for i in self._waiting.get(job_id, ()) if i in self._jobs]
        return sorted(jobs, key=lambda j: j.seq)[:limit]

    def stranded(self, limit: int) -> list[StoredJob]:
        return [self._jobs[i] for i in list(self._stranded)[:limit] if i in self._jobs]

    def orphaned(self, after: Any, limit: int) -> list[tuple[StoredJob, tuple[Any, ...]]]:
        start = None if after is None else sort_key(after)
        found = {
            self._jobs[i]
            for dep in self._gone
            for i in self._waiting.get(dep, ())
            if i in self._jobs and (start is None or sort_key(i) > start)
        }
        jobs = sorted(found, key=lambda j: sort_key(j.id))[:limit]
        return [(j, tuple(d for d in j.record.waiting_for if d in self._gone)) for j in jobs]

    def unlinked(self, before: datetime, limit: int) -> list[StoredJob]:
        jobs = [
            j
            for i in self._unlinked
            if (j := self._jobs.get(i)) is not None and j.record.created_at < before
        ]
        return sorted(jobs, key=lambda j: j.seq)[:limit]

    def unreleased(self, before: datetime, limit: int) -> list[StoredJob]:
        jobs = [
            j
            for i in self._flagged
            if (j := self._jobs.get(i)) is not None
            and j.record.status.is_final
            and j.record.finished_at is not None
            and j.record.finished_at < before
        ]
        return sorted(jobs, key=lambda j: (j.record.finished_at, j.seq))[:limit]


class MemoryFlow:
    """The flow-control operations of :class:`~mongosched.store.memory.MemoryStore`
    (see :class:`~mongosched.store.Store` for what each does)."""

    _lock: threading.Lock
    _jobs: dict[Any, StoredJob]
    _flow: FlowIndex
    _limits: Limits

    def _find(self, job_id: Any, status: JobStatus | None = None) -> StoredJob | None:
        raise NotImplementedError

    def _settle(self, job: StoredJob, settlement: Settlement, result: bytes | None) -> None:
        raise NotImplementedError

    def _write(self, job: StoredJob, record: JobRecord, hold: bool = False) -> None:
        raise NotImplementedError

    # Expiry and dependencies -------------------------------------------------------------------
    def start_deadlines_due(self, now: datetime, limit: int = 100) -> list[JobRecord]:
        with self._lock:
            return [job.snapshot() for job in self._flow.start_deadlines_due(ms(now), limit)]

    def link_dependencies(
        self, job_ids: Sequence[Any], now: datetime, dependent: Any = None
    ) -> dict[Any, JobStatus]:
        with self._lock:
            found = {}
            for job_id in job_ids:
                job = self._find(job_id)
                if job is not None:
                    record = transitions.linked(job.record, now)
                    if record is not job.record:
                        self._write(job, record)
                    found[job.id] = record.status
            linked = None if dependent is None else self._find(dependent)
            if linked is not None and linked.unlinked:
                linked.unlinked = False
                self._write(linked, linked.record)
            return found

    def unlinked(self, created_before: datetime, limit: int = 100) -> list[JobRecord]:
        with self._lock:
            return [job.snapshot() for job in self._flow.unlinked(ms(created_before), limit)]

    def dependents(self, job_id: Any, limit: int = 100) -> list[JobRecord]:
        with self._lock:
            return [job.snapshot() for job in self._flow.dependents(job_id, limit)]

    def release_dependent(
        self, job: JobRecord, dependency: Any, settlement: Settlement
    ) -> JobRecord | None:
        with self._lock:
            stored = self._find(job.id, JobStatus.WAITING)
            if stored is None:
                return None
            record = stored.record
            if dependency is not None:
                if dependency not in record.waiting_for:
                    return None
                record = transitions.crossed_off(record, dependency)
            if settlement.status.is_final or not record.waiting_for:
                stored.record = record
                self._settle(stored, settlement, None)
            elif dependency is None:
                return None
            else:
                self._write(stored, record)
            return stored.snapshot()

    def stranded(self, limit: int = 100) -> list[JobRecord]:
        with self._lock:
            return [job.snapshot() for job in self._flow.stranded(limit)]

    def dependents_released(self, job_id: Any) -> None:
        with self._lock:
            job = self._find(job_id)
            if job is not None and job.record.status.is_final and job.record.has_dependents:
                self._write(job, transitions.dependents_released(job.record))

    def unreleased(self, finished_before: datetime, limit: int = 100) -> list[JobRecord]:
        with self._lock:
            return [job.snapshot() for job in self._flow.unreleased(ms(finished_before), limit)]

    def orphaned(
        self, after: Any = None, limit: int = 100
    ) -> tuple[list[tuple[JobRecord, tuple[Any, ...]]], Any]:
        with self._lock:
            page = [(job.snapshot(), missing) for job, missing in self._flow.orphaned(after, limit)]
        return page, page[-1][0].id if len(page) == limit else None

    # Limits -----------------------------------------------------------------------------------
    def take_rate(
        self, task: str, key: str | None, count: int, window: timedelta, token: str, now: datetime
    ) -> Admission:
        with self._lock:
            return self._limits.take_rate(task, key, count, window, token, ms(now))

    def return_rate(self, task: str, key: str | None, token: str) -> None:
        with self._lock:
            self._limits.return_rate(task, key, token)

    def take_slot(
        self, task: str, key: str, limit: int, token: str, now: datetime, until: datetime
    ) -> Admission:
        with self._lock:
            return self._limits.take_slot(task, key, limit, token, ms(now), ms(until))

    def renew_slot(
        self, task: str, key: str, token: str, until: datetime, deadline: float | None = None
    ) -> bool:
        with self._lock:
            return self._limits.renew_slot(task, key, token, ms(until))

    def release_slot(self, task: str, key: str, token: str) -> None:
        with self._lock:
            self._limits.release_slot(task, key, token)
