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
the lock) and the parts that work through it, each in a module of its own. Each method
of the :class:`~mongosched.store.Store` protocol is written once, in its part, and the
store holds it bound (no call passes through a method of the store's own).
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
from mongosched.store.memory.batches import MemoryBatches
from mongosched.store.memory.dependents import MemoryDependents
from mongosched.store.memory.jobs import MemoryJobs
from mongosched.store.memory.leases import MemoryLeases
from mongosched.store.memory.limits import MemoryLimits
from mongosched.store.memory.permits import MemoryPermits
from mongosched.store.memory.table import MemoryTable
from mongosched.store.memory.transactions import MemoryTransaction, MemoryTransactions, StagedStore
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
        # Lifecycle
        self.prepare = _nothing
        self.close = _nothing
        self.clock_offset = _no_offset
        self.parse_id = codec.parse_id
        self.watch_due: Callable[[Sequence[str] | None], MemoryDueWatch] = table.watchers.watch
        # Transactions
        transactions: Transactions = MemoryTransactions(table)
        self.database = transactions.database
        self.begin = transactions.begin
        self.join = transactions.join
        # Scheduling, reads, and users' changes to one job
        jobs: Jobs = MemoryJobs(table)
        self.insert = jobs.insert
        self.upsert_schedule = jobs.upsert_schedule
        self.get = jobs.get
        self.find = jobs.find
        self.count = jobs.count
        self.counts = jobs.counts
        self.oldest_due = jobs.oldest_due
        self.running = jobs.running
        self.unknown_due_tasks = jobs.unknown_due_tasks
        self.schedules = jobs.schedules
        self.cancel_pending = jobs.cancel_pending
        self.request_cancel = jobs.request_cancel
        self.update_pending = jobs.update_pending
        self.retry_finished = jobs.retry_finished
        self.purge = jobs.purge
        # The holder's writes, the reaper's
        leases: Leases = MemoryLeases(table)
        self.renew = leases.renew
        self.record_slot = leases.record_slot
        self.write_progress = leases.write_progress
        self.settle = leases.settle
        self.leases_expired = leases.leases_expired
        self.reap = leases.reap
        self.quarantine = leases.quarantine
        # Claims, and many at once
        batches: Claims = MemoryBatches(table)
        self.claim = batches.claim
        self.claim_batch = batches.claim_batch
        self.settle_many = batches.settle_many
        self.settle_and_claim = batches.settle_and_claim
        # Admin: bulk writes, pauses, schedule edits, runners
        admin: Admin = MemoryAdmin(table)
        self.select_ids = admin.select_ids
        self.retry_many = admin.retry_many
        self.cancel_many = admin.cancel_many
        self.purge_many = admin.purge_many
        self.finished_counts = admin.finished_counts
        self.open_counts = admin.open_counts
        self.backlog = admin.backlog
        self.add_pause = admin.add_pause
        self.remove_pause = admin.remove_pause
        self.pauses = admin.pauses
        self.pending_queues = admin.pending_queues
        self.task_names = admin.task_names
        self.labels = admin.labels
        self.hold_label = admin.hold_label
        self.release_label = admin.release_label
        self.hold_schedules = admin.hold_schedules
        self.release_unpaused = admin.release_unpaused
        self.release_schedule = admin.release_schedule
        self.insert_runs = admin.insert_runs
        self.update_schedule = admin.update_schedule
        self.save_runner = admin.save_runner
        self.remove_runner = admin.remove_runner
        self.runners = admin.runners
        self.record_audit = admin.record_audit
        self.audit_entries = admin.audit_entries
        # Concurrency permits
        permits: Permits = MemoryPermits(table)
        self.ensure_permits = permits.ensure_permits
        self.take_permit = permits.take_permit
        self.renew_permit = permits.renew_permit
        self.release_permit = permits.release_permit
        self.permit_holders = permits.permit_holders
        # Expiry and dependencies
        deps: Dependents = MemoryDependents(table)
        self.start_deadlines_due = deps.start_deadlines_due
        self.link_dependencies = deps.link_dependencies
        self.unlinked = deps.unlinked
        self.dependents = deps.dependents
        self.release_dependent = deps.release_dependent
        self.stranded = deps.stranded
        self.dependents_released = deps.dependents_released
        self.unreleased = deps.unreleased
        self.orphaned = deps.orphaned
        # Rate limits and keyed concurrency
        limits: Limits = MemoryLimits(table)
        self.take_rate = limits.take_rate
        self.return_rate = limits.return_rate
        self.take_slot = limits.take_slot
        self.renew_slot = limits.renew_slot
        self.release_slot = limits.release_slot
        # Durable workflows: their steps and events
        workflows: Workflows = MemoryWorkflows(table)
        self.steps = workflows.steps
        self.record_step = workflows.record_step
        self.fence_workflow = workflows.fence_workflow
        self.forget_steps = workflows.forget_steps
        self.send_event = workflows.send_event
        self.events = workflows.events

    @property
    def examined(self) -> int:
        """Index entries the last claim looked at (for tests: claims never scan)."""
        return self.table.indexes.examined

    def within(self, transaction: Any) -> StagedStore:
        if not isinstance(transaction, MemoryTransaction) or transaction.table is not self.table:
            raise TransactionError(f"not a transaction of this store: {transaction!r}")
        return StagedStore(transaction, self.get)  # the part of a store a transaction has

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
