"""Concurrency permits of the in-memory store (as :mod:`mongosched.store.mongo.permits`
keeps them in MongoDB): every task's numbered permits, each operation one step under
the store's lock."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from mongosched.store.memory.stored import ms
from mongosched.store.memory.table import MemoryTable

__all__ = ["MemoryPermits", "Permit", "Permits"]


@dataclass(slots=True)
class Permit:
    """One of the numbered concurrency permits of a task."""

    token: str | None = None
    job: Any = None
    owner: str | None = None
    until: datetime | None = None


class Permits:
    """Every task's permits (the caller holds the store's lock)."""

    def __init__(self) -> None:
        self._by_task: dict[str, list[Permit]] = {}

    def ensure(self, task: str, limit: int) -> None:
        permits = self._by_task.setdefault(task, [])
        permits.extend(Permit() for _ in range(limit - len(permits)))

    def take(
        self,
        task: str,
        limit: int,
        token: str,
        job: Any,
        owner: str,
        now: datetime,
        until: datetime,
    ) -> bool:
        permits = self._by_task.get(task, [])
        if any(p.token == token for p in permits):
            return True
        for p in permits[:limit]:
            if p.token is None or (p.until is not None and p.until < now):
                p.token, p.job, p.owner, p.until = token, job, owner, until
                return True
        return False

    def renew(self, task: str, token: str, until: datetime) -> bool:
        for p in self._by_task.get(task, []):
            if p.token == token:
                p.until = until
                return True
        return False

    def release(self, task: str, token: str) -> None:
        for p in self._by_task.get(task, []):
            if p.token == token:
                p.token = p.job = p.owner = p.until = None

    def holders(self, task: str, now: datetime) -> int:
        permits = self._by_task.get(task, [])
        return sum(p.token is not None and p.until is not None and p.until >= now for p in permits)


class MemoryPermits:
    """Concurrency permits of :class:`~mongosched.store.memory.MemoryStore` (part of
    it), each operation one step under the store's lock."""

    def __init__(self, table: MemoryTable) -> None:
        self._table = table
        self._permits = Permits()

    def ensure_permits(self, task: str, limit: int) -> None:
        with self._table.lock:
            self._permits.ensure(task, limit)

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
        with self._table.lock:
            return self._permits.take(task, limit, token, job_id, owner, ms(now), ms(until))

    def renew_permit(
        self, task: str, token: str, until: datetime, deadline: float | None = None
    ) -> bool:
        with self._table.lock:
            return self._permits.renew(task, token, ms(until))

    def release_permit(self, task: str, token: str) -> None:
        with self._table.lock:
            self._permits.release(task, token)

    def permit_holders(self, task: str, now: datetime) -> int:
        with self._table.lock:
            return self._permits.holders(task, ms(now))
