"""Flow control in the in-memory store: expiry sweeps, the release of dependents and the
limits (a part of :class:`~mongosched.store.memory.MemoryStore`, as
:mod:`mongosched.store.mongo.flow` and :mod:`mongosched.store.mongo.limits` are of the MongoDB
store). They read the flow-control indexes of
:class:`~mongosched.store.memory.index.FlowIndex`, so that nothing scans. Every method
runs under the store's one lock."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from mongosched._core import transitions
from mongosched._core.records import Admission, JobRecord, JobStatus, Settlement
from mongosched.store.memory.index import FlowIndex
from mongosched.store.memory.limits import Limits
from mongosched.store.memory.stored import StoredJob, ms

__all__ = ["MemoryFlow"]


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
