"""Flow-control limits of the in-memory store: rate logs and keyed concurrency slots,
as :mod:`mongosched.store.mongo.limits` keeps them in MongoDB (:class:`Limits`, used
under the store's lock by :class:`MemoryLimits`). Idle entries are pruned (as a TTL
index deletes idle documents), amortised over the writes: storage stays bounded by the
keys in use."""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from mongosched._core.records import Admission
from mongosched.limits import IDLE
from mongosched.store.memory.stored import ms
from mongosched.store.memory.table import MemoryTable

__all__ = ["Limits", "MemoryLimits"]


Key = tuple[str, str, str | None]  # (kind, task, key)


@dataclass
class Entry:
    """One (kind, task, key): the sorted log of starts ``(time, token)`` of a rate
    limit, or the holders ``token -> until`` of a keyed concurrency limit."""

    log: list[tuple[datetime, str]] = field(default_factory=list)
    holders: dict[str, datetime] = field(default_factory=dict)
    expire_at: datetime | None = None

    def keep_until(self, at: datetime) -> None:
        if self.expire_at is None or at > self.expire_at:
            self.expire_at = at


class Limits:
    """Every limit entry of a store, pruned once idle."""

    def __init__(self) -> None:
        self._entries: dict[Key, Entry] = {}
        self._pruned_size = 0

    def __len__(self) -> int:
        return len(self._entries)

    def _entry(self, key: Key, now: datetime) -> Entry:
        if len(self._entries) > 2 * self._pruned_size + 64:
            self.prune(now)
        entry = self._entries.get(key)
        if entry is not None and entry.expire_at is not None and entry.expire_at < now:
            del self._entries[key]  # expired: as if the TTL monitor had run
            entry = None
        if entry is None:
            entry = self._entries[key] = Entry()
        return entry

    def prune(self, now: datetime) -> int:
        """Drop entries idle past their expiry; returns how many."""
        idle = [
            k for k, e in self._entries.items() if e.expire_at is not None and e.expire_at < now
        ]
        for key in idle:
            del self._entries[key]
        self._pruned_size = len(self._entries)
        return len(idle)

    # Rate ------------------------------------------------------------------------------------
    def take_rate(
        self,
        task: str,
        key: str | None,
        count: int,
        window: timedelta,
        token: str,
        now: datetime,
    ) -> Admission:
        entry = self._entry(("rate", task, key), now)
        log = entry.log
        if any(t == token for _, t in log):
            return Admission(True)
        if len(log) >= count and log[-count][0] >= now - window:
            return Admission(False, log[-count][0] + window + timedelta(milliseconds=1))
        bisect.insort(log, (now, token))
        del log[:-count]
        entry.keep_until(now + window + IDLE)
        return Admission(True)

    def return_rate(self, task: str, key: str | None, token: str) -> None:
        entry = self._entries.get(("rate", task, key))
        if entry is not None:
            entry.log = [(at, t) for at, t in entry.log if t != token]

    # Keyed concurrency -----------------------------------------------------------------------
    def take_slot(
        self, task: str, key: str, limit: int, token: str, now: datetime, until: datetime
    ) -> Admission:
        entry = self._entry(("concurrency", task, key), now)
        holders = entry.holders
        if token in holders:
            return Admission(True)
        if len(holders) >= limit:
            for lapsed in [t for t, held in holders.items() if held < now]:
                del holders[lapsed]  # a crashed holder's slot returns after its lease
        if len(holders) >= limit:
            return Admission(False)
        holders[token] = until
        entry.keep_until(until + IDLE)
        return Admission(True)

    def renew_slot(self, task: str, key: str, token: str, until: datetime) -> bool:
        entry = self._entries.get(("concurrency", task, key))
        if entry is None or token not in entry.holders:
            return False
        entry.holders[token] = until
        entry.keep_until(until + IDLE)
        return True

    def release_slot(self, task: str, key: str, token: str) -> None:
        entry = self._entries.get(("concurrency", task, key))
        if entry is not None:
            entry.holders.pop(token, None)


class MemoryLimits:
    """Rate limits and keyed concurrency of :class:`~mongosched.store.memory.MemoryStore`
    (part of it, as :class:`~mongosched.store.mongo.limits.MongoLimits` is of the MongoDB
    store), each operation one step under the store's lock."""

    def __init__(self, table: MemoryTable) -> None:
        self._table = table
        self._limits = Limits()

    def take_rate(
        self, task: str, key: str | None, count: int, window: timedelta, token: str, now: datetime
    ) -> Admission:
        with self._table.lock:
            return self._limits.take_rate(task, key, count, window, token, ms(now))

    def return_rate(self, task: str, key: str | None, token: str) -> None:
        with self._table.lock:
            self._limits.return_rate(task, key, token)

    def take_slot(
        self, task: str, key: str, limit: int, token: str, now: datetime, until: datetime
    ) -> Admission:
        with self._table.lock:
            return self._limits.take_slot(task, key, limit, token, ms(now), ms(until))

    def renew_slot(
        self, task: str, key: str, token: str, until: datetime, deadline: float | None = None
    ) -> bool:
        with self._table.lock:
            return self._limits.renew_slot(task, key, token, ms(until))

    def release_slot(self, task: str, key: str, token: str) -> None:
        with self._table.lock:
            self._limits.release_slot(task, key, token)
