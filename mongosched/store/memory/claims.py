"""Claims and settlements in batches, in memory (part of
:class:`~mongosched.store.memory.MemoryStore`): each batch is one atomic step under the
store's lock, as its MongoDB counterpart is a fixed number of round trips."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from mongosched._core.records import JobRecord, Settlement
from mongosched.errors import SerializationError
from mongosched.store.memory.stored import PENDING, encode_result, ms
from mongosched.store.memory.table import MemoryTable
from mongosched.store.parts import Landed, ReadAhead
from mongosched.store.patience import Patience

__all__ = ["MemoryClaims"]


class MemoryClaims:
    """Batched claims and settlements, in memory."""

    def __init__(self, table: MemoryTable) -> None:
        self._table = table

    def claim(
        self,
        *,
        owner: str,
        tasks: Sequence[str],
        queues: Sequence[str] | None,
        now: datetime,
        lease_duration: float,
        job_id: Any = None,
        ranked: Sequence[str] = (),
    ) -> JobRecord | None:
        if not tasks:  # ranked jobs are known by their rank: ``ranked`` is not needed
            return None
        now = ms(now)
        with self._table.lock:
            if job_id is not None:
                job = self._table.find(job_id, PENDING)
                if job is None or job.record.task not in tasks:
                    return None
            else:
                self._table.place(tasks, queues, now)
                job = self._table.indexes.take_first_due(tasks, queues, now)
                if job is None:
                    return None
            return self._table.start(job, owner, now, lease_duration)

    def claim_batch(
        self,
        *,
        owner: str,
        tasks: Sequence[str],
        queues: Sequence[str] | None,
        now: datetime,
        lease_duration: float,
        limit: int,
        ranked: Sequence[str] = (),
    ) -> list[JobRecord]:
        if not tasks:  # ranked jobs are known by their rank: ``ranked`` is not needed
            return []
        now = ms(now)
        claimed: list[JobRecord] = []
        with self._table.lock:
            self._table.place(tasks, queues, now)
            while len(claimed) < limit:
                job = self._table.indexes.take_first_due(tasks, queues, now)
                if job is None:
                    break
                claimed.append(self._table.start(job, owner, now, lease_duration))
        return claimed

    def settle_many(
        self, items: Sequence[tuple[JobRecord, Settlement]], patience: Patience | None = None
    ) -> list[JobRecord | SerializationError | None]:
        results: list[Any] = []
        encoded: list[bytes | None] = []
        for job, settlement in items:  # checked before anything is written
            try:
                encoded.append(encode_result(job.task, settlement))
                results.append(None)
            except SerializationError as exc:
                encoded.append(None)
                results.append(exc)
        with self._table.lock:
            for n, (job, settlement) in enumerate(items):
                if results[n] is None:
                    results[n] = self._table.settle_locked(job, settlement, encoded[n])
        return results

    def settle_and_claim(
        self,
        items: Sequence[tuple[JobRecord, Settlement]],
        *,
        owner: str,
        tasks: Sequence[str],
        queues: Sequence[str] | None,
        now: datetime,
        lease_duration: float,
        limit: int,
        patience: Patience | None = None,
        ranked: Sequence[str] = (),
        ahead: ReadAhead | None = None,
        records: bool = True,
    ) -> tuple[list[JobRecord | Landed | SerializationError | None], list[JobRecord]]:
        """(``ahead`` is not used: a read here costs no round trip; the records are at
        hand whatever ``records`` says.)"""
        settled: list[JobRecord | Landed | SerializationError | None] = []
        settled.extend(self.settle_many(items))
        claimed = self.claim_batch(
            owner=owner,
            tasks=tasks,
            queues=queues,
            now=now,
            lease_duration=lease_duration,
            limit=limit,
        )
        return settled, claimed
