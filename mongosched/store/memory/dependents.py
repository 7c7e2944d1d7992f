"""Expiry and dependencies in the in-memory store (a part of
:class:`~mongosched.store.memory.MemoryStore`, as :mod:`mongosched.store.mongo.dependents` is
of the MongoDB store). They read the flow-control indexes of
:class:`~mongosched.store.memory.index.FlowIndex`, so that nothing scans. Every method
runs under the store's one lock."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from mongosched._core import transitions
from mongosched._core.records import JobRecord, JobStatus, Settlement
from mongosched.store.memory.stored import ms
from mongosched.store.memory.table import MemoryTable

__all__ = ["MemoryDependents"]


class MemoryDependents:
    """Expiry and dependencies of :class:`~mongosched.store.memory.MemoryStore`
    (see :class:`~mongosched.store.Store` for what each does)."""

    def __init__(self, table: MemoryTable) -> None:
        self._table = table

    # Expiry and dependencies -------------------------------------------------------------------
    def start_deadlines_due(self, now: datetime, limit: int = 100) -> list[JobRecord]:
        with self._table.lock:
            return [job.snapshot() for job in self._table.flow.start_deadlines_due(ms(now), limit)]

    def link_dependencies(
        self, job_ids: Sequence[Any], now: datetime, dependent: Any = None
    ) -> dict[Any, JobStatus]:
        with self._table.lock:
            found = {}
            for job_id in job_ids:
                job = self._table.find(job_id)
                if job is not None:
                    record = transitions.linked(job.record, now)
                    if record is not job.record:
                        self._table.write(job, record)
                    found[job.id] = record.status
            linked = None if dependent is None else self._table.find(dependent)
            if linked is not None and linked.unlinked:
                linked.unlinked = False
                self._table.write(linked, linked.record)
            return found

    def unlinked(self, created_before: datetime, limit: int = 100) -> list[JobRecord]:
        with self._table.lock:
            return [job.snapshot() for job in self._table.flow.unlinked(ms(created_before), limit)]

    def of(self, job_id: Any, limit: int = 100) -> list[JobRecord]:
        with self._table.lock:
            return [job.snapshot() for job in self._table.flow.dependents(job_id, limit)]

    def release_dependent(
        self, job: JobRecord, dependency: Any, settlement: Settlement
    ) -> JobRecord | None:
        with self._table.lock:
            stored = self._table.find(job.id, JobStatus.WAITING)
            if stored is None:
                return None
            record = stored.record
            if dependency is not None:
                if dependency not in record.waiting_for:
                    return None
                record = transitions.crossed_off(record, dependency)
            if settlement.status.is_final or not record.waiting_for:
                stored.record = record
                self._table.settle(stored, settlement, None)
            elif dependency is None:
                return None
            else:
                self._table.write(stored, record)
            return stored.snapshot()

    def stranded(self, limit: int = 100) -> list[JobRecord]:
        with self._table.lock:
            return [job.snapshot() for job in self._table.flow.stranded(limit)]

    def dependents_released(self, job_id: Any) -> None:
        with self._table.lock:
            job = self._table.find(job_id)
            if job is not None and job.record.status.is_final and job.record.has_dependents:
                self._table.write(job, transitions.dependents_released(job.record))

    def unreleased(self, finished_before: datetime, limit: int = 100) -> list[JobRecord]:
        with self._table.lock:
            return [
                job.snapshot() for job in self._table.flow.unreleased(ms(finished_before), limit)
            ]

    def orphaned(
        self, after: Any = None, limit: int = 100
    ) -> tuple[list[tuple[JobRecord, tuple[Any, ...]]], Any]:
        with self._table.lock:
            page = [
                (job.snapshot(), missing)
                for job, missing in self._table.flow.orphaned(after, limit)
            ]
        return page, page[-1][0].id if len(page) == limit else None
