"""The holder's writes to a claimed job and the reaper's, in the in-memory store (a
part of :class:`~mongosched.store.memory.MemoryStore`, as
:mod:`mongosched.store.mongo.leases` is of the MongoDB store): each is fenced on the
lease token, one step under the store's lock."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from mongosched._core import transitions
from mongosched._core.records import JobRecord, Renewal, Settlement
from mongosched.store.memory.stored import encode_result, ms
from mongosched.store.memory.table import MemoryTable
from mongosched.store.patience import Patience

__all__ = ["MemoryLeases"]


class MemoryLeases:
    """Renewals, the holder's other writes, settlements and the reaper's, in memory."""

    def __init__(self, table: MemoryTable) -> None:
        self._table = table

    def renew(
        self,
        job_id: Any,
        token: str,
        now: datetime,
        until: datetime,
        deadline: float | None = None,
    ) -> Renewal:
        with self._table.lock:
            job = self._table.holding(job_id, token)
            if job is None:
                return Renewal(held=False)
            self._table.write(job, transitions.renewed(job.record, now, until))
            return Renewal(held=True, cancel_requested=job.record.cancel_requested)

    def record_slot(self, job_id: Any, token: str, slot: datetime, now: datetime) -> bool:
        with self._table.lock:
            job = self._table.holding(job_id, token)
            if job is not None:
                job.record = transitions.slot_recorded(job.record, slot, now)
            return job is not None

    def write_progress(
        self, job_id: Any, token: str, value: float | None, message: str | None, now: datetime
    ) -> bool:
        with self._table.lock:
            job = self._table.holding(job_id, token)
            if job is not None:
                job.record = transitions.progressed(job.record, value, message, now)
            return job is not None

    def settle(
        self, job: JobRecord, settlement: Settlement, patience: Patience | None = None
    ) -> JobRecord | None:
        return self._settle_if(job, settlement, expired_before=None)

    def leases_expired(self, now: datetime, limit: int = 100) -> list[JobRecord]:
        now = ms(now)
        with self._table.lock:
            return [job.snapshot() for job in self._table.indexes.leases_expired(now, limit)]

    def reap(self, job: JobRecord, now: datetime, settlement: Settlement) -> JobRecord | None:
        return self._settle_if(job, settlement, expired_before=ms(now))

    def _settle_if(
        self, claimed: JobRecord, settlement: Settlement, expired_before: datetime | None
    ) -> JobRecord | None:
        """Apply ``settlement`` if the lease ``claimed`` came with still holds the job
        (and, for the reaper, ran out before ``expired_before``)."""
        result = encode_result(claimed.task, settlement)  # raises before any write
        with self._table.lock:
            return self._table.settle_locked(claimed, settlement, result, expired_before)

    def quarantine(self, now: datetime, limit: int = 100) -> list[str]:
        """Nothing to do: every job here was made from a well-formed record."""
        return []
