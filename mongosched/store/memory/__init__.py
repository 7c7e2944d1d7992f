"""The in-memory store (``memory://[name]``): every job held in this process.

It keeps what MongoDB would keep: datetimes in whole milliseconds (UTC); payloads,
results and repeat rules as BSON bytes, decoded afresh for every record it returns, so
no caller can change a stored job through what it was given. Every method runs under
one lock per store: each is one atomic step, as on the server.

Claims and the reaper read ordered indexes (:mod:`.index`), never scan: a claim costs
O(buckets + log n) whatever the backlog. Every change that moves a job gives it a new
version and pushes a fresh index entry; older entries stop counting.

:class:`MemoryStore` is composed as :class:`~mongosched.store.mongo.MongoStore` is: one
:class:`~mongosched.store.memory.table.MemoryTable` (the jobs, their maps and indexes,
the lock) and the parts that work through it, each in a module of its own, held as
``store.jobs``, ``store.leases``, ``store.claims`` and so on.
"""

from __future__ import annotations

import os
import threading
import weakref
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from typing import Any

from mongosched.errors import ConfigurationError, TransactionError
from mongosched.store import codec
from mongosched.store.control import Admin, Dependents, Limits, Permits
from mongosched.store.memory.admin import MemoryAdmin
from mongosched.store.memory.claims import MemoryClaims
from mongosched.store.memory.dependents import MemoryDependents
from mongosched.store.memory.jobs import MemoryJobs
from mongosched.store.memory.leases import MemoryLeases
from mongosched.store.memory.limits import MemoryLimits
from mongosched.store.memory.permits import MemoryPermits
from mongosched.store.memory.table import MemoryTable
from mongosched.store.memory.transactions import MemoryStaged, MemoryTransaction, MemoryTransactions
from mongosched.store.memory.watch import MemoryDueWatch
from mongosched.store.memory.workflows import MemoryWorkflows
from mongosched.store.parts import Claims, Jobs, Leases, Transactions, Workflows

__all__ = ["MemoryStore"]

_tables: weakref.WeakSet[MemoryTable] = weakref.WeakSet()
_named: dict[str, MemoryStore] = {}
_registry_lock = threading.Lock()


def _after_fork_in_child() -> None:
    """Give every store a fresh lock: a thread of the parent may have held one."""
    global _registry_lock
    _registry_lock = threading.Lock()
    for table in list(_tables):
        table.after_fork()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def _nothing() -> None:
    """Nothing to do: the indexes always exist, and nothing is held to release."""


def _no_offset(local_now: Callable[[], datetime]) -> timedelta | None:
    """No clock but this process's own."""
    return None


class MemoryStore:
    """An in-process :class:`~mongosched.store.Store` (whose docstrings say what each
    method does). ``MemoryStore()`` is private to its creator; :meth:`named` shares one
    store per name within the process."""

    def __init__(self) -> None:
        self.name: str | None = None
        self.table = table = MemoryTable()
        _tables.add(table)
        self.prepare = _nothing
        self.close = _nothing
        self.clock_offset = _no_offset
        self.parse_id = codec.parse_id
        self.watch_due: Callable[[Sequence[str] | None], MemoryDueWatch] = table.watchers.watch
        self.transactions: Transactions = MemoryTransactions(table)
        self.jobs: Jobs = MemoryJobs(table)
        self.leases: Leases = MemoryLeases(table)
        self.claims: Claims = MemoryClaims(table)
        self.admin: Admin = MemoryAdmin(table)
        self.permits: Permits = MemoryPermits(table)
        self.dependents: Dependents = MemoryDependents(table)
        self.limits: Limits = MemoryLimits(table)
        self.workflows: Workflows = MemoryWorkflows(table)

    @property
    def examined(self) -> int:
        """Index entries the last claim looked at (for tests: claims never scan)."""
        return self.table.indexes.examined

    def within(self, transaction: Any) -> MemoryStaged:
        if not isinstance(transaction, MemoryTransaction) or transaction.table is not self.table:
            raise TransactionError(f"not a transaction of this store: {transaction!r}")
        return MemoryStaged(transaction, self.jobs.get)  # the parts a transaction has

    def __repr__(self) -> str:
        return f"<MemoryStore {self.name or 'private'}: {len(self.table.jobs)} jobs>"

    @classmethod
    def named(cls, uri: str) -> MemoryStore:
        """The store ``memory://name`` names in this process (made on first use), or a
        new private one for ``memory://``."""
        scheme, sep, rest = uri.partition("://")
        if scheme.lower() != "memory" or not sep:
            raise ConfigurationError(f"not a memory:// URI: {uri!r}")
        name = rest.split("?", 1)[0].split("/", 1)[0]
        if not name:
            return cls()
        with _registry_lock:
            if name not in _named:
                _named[name] = cls()
                _named[name].name = name
            return _named[name]

    @classmethod
    def forget(cls, name: str | None = None) -> None:
        """Drop the store ``name`` (every named store if None) from the registry: who
        holds it keeps it, and the next :meth:`named` makes a new, empty one."""
        with _registry_lock:
            if name is None:
                _named.clear()
            else:
                _named.pop(name, None)
