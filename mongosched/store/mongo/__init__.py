"""The MongoDB store: every query, update operator, field name, index and driver error.

Each method is one atomic operation on the server (or a small fixed number of them),
takes the current time from its caller, and is written so that repeating it after a
network error is safe:

* a claim is tagged with a token made *before* the call, so a claim whose reply was
  lost is found again by its token instead of being lost or taken twice;
* a holder's writes are fenced on the lease token, and each leaves an id of its own
  in ``last_write``, so a write whose reply was lost can be recognised as landed (an
  id per write, not the token: one holder may make several writes);
* inserts use ids made on the client, so an insert repeated after a lost reply finds
  its own document instead of making a second one.

Driver errors never leave this package: a server that cannot be reached raises
:class:`~mongosched.errors.StoreUnavailable`, anything else it refuses
:class:`~mongosched.errors.StoreError`.

:class:`MongoStore` is composed, not inherited: one :class:`MongoConnection` (the
collections, the write concern, the retries) and the parts that work through it, each
in a module of its own. Each method of the :class:`~mongosched.store.Store` protocol is
written once, in its part, and the store holds it bound (no call passes through a
method of the store's own).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from mongosched.errors import TransactionError
from mongosched.store import codec
from mongosched.store.control import Admin, Dependents, Limits, Permits
from mongosched.store.mongo.admin import MongoAdmin
from mongosched.store.mongo.batches import MongoBatches
from mongosched.store.mongo.connection import MongoConnection
from mongosched.store.mongo.dependents import MongoDependents
from mongosched.store.mongo.jobs import MongoJobs
from mongosched.store.mongo.leases import MongoLeases
from mongosched.store.mongo.limits import MongoLimits
from mongosched.store.mongo.permits import MongoPermits
from mongosched.store.mongo.transactions import MongoTransaction, MongoTransactions
from mongosched.store.mongo.watch import MongoDueWatch
from mongosched.store.mongo.workflows import MongoWorkflows
from mongosched.store.parts import Claims, Jobs, Transactions

__all__ = ["MongoConnection", "MongoStore"]


class MongoStore:
    """Jobs in one MongoDB collection; permits for concurrency limits, flow-control
    limits, pauses and live runners beside it. Give either ``connection`` (a
    transaction's view) or the options of a new one."""

    def __init__(
        self,
        connection: MongoConnection | None = None,
        /,
        *,
        uri: str | None = None,
        database: Any = None,
        collection: str = "mongosched_jobs",
        write_concern: str | int | None = "majority",
        connect_timeout: float = 5.0,
        retries: int = 3,
        retry_delay: float = 0.1,
    ) -> None:
        if connection is None:
            connection = MongoConnection(
                uri=uri,
                database=database,
                collection=collection,
                write_concern=write_concern,
                connect_timeout=connect_timeout,
                retries=retries,
                retry_delay=retry_delay,
            )
        self.connection = connection
        # Lifecycle
        self.prepare = connection.prepare
        self.close = connection.close
        self.clock_offset = connection.clock_offset
        self.parse_id = codec.parse_id
        # Transactions
        transactions: Transactions = MongoTransactions(connection)
        self.database = transactions.database
        self.begin = transactions.begin
        self.join = transactions.join
        # Scheduling, reads, and users' changes to one job
        jobs: Jobs = MongoJobs(connection)
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
        leases = MongoLeases(connection)
        self.renew = leases.renew
        self.record_slot = leases.record_slot
        self.write_progress = leases.write_progress
        self.settle = leases.settle
        self.leases_expired = leases.leases_expired
        self.reap = leases.reap
        self.quarantine = leases.quarantine
        # Claims, one job or many; settlements many at once
        batches: Claims = MongoBatches(connection, leases)
        self.claim = batches.claim
        self.claim_batch = batches.claim_batch
        self.settle_many = batches.settle_many
        self.settle_and_claim = batches.settle_and_claim
        # Admin: bulk writes, pauses, schedule edits, runners
        admin: Admin = MongoAdmin(connection, jobs.retry_finished, jobs.insert)
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
        permits: Permits = MongoPermits(connection)
        self.ensure_permits = permits.ensure_permits
        self.take_permit = permits.take_permit
        self.renew_permit = permits.renew_permit
        self.release_permit = permits.release_permit
        self.permit_holders = permits.permit_holders
        # Expiry and dependencies
        deps: Dependents = MongoDependents(connection)
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
        limits: Limits = MongoLimits(connection)
        self.take_rate = limits.take_rate
        self.return_rate = limits.return_rate
        self.take_slot = limits.take_slot
        self.renew_slot = limits.renew_slot
        self.release_slot = limits.release_slot
        # Durable workflows: their steps and events
        workflows = MongoWorkflows(connection)
        self.steps = workflows.steps
        self.record_step = workflows.record_step
        self.fence_workflow = workflows.fence_workflow
        self.forget_steps = workflows.forget_steps
        self.send_event = workflows.send_event
        self.events = workflows.events
        self.prepare = self._prepare_with(workflows)

    def _prepare_with(self, workflows: MongoWorkflows) -> Any:
        """The store's ``prepare``: the job collection's indexes and the workflows'."""
        connection = self.connection

        def prepare() -> None:
            connection.prepare()
            workflows.prepare_workflows()

        return prepare

    def within(self, transaction: Any) -> MongoStore:
        if not isinstance(transaction, MongoTransaction):
            raise TransactionError(f"not a transaction of this store: {transaction!r}")
        return MongoStore(self.connection.within(transaction))

    def watch_due(self, queues: Sequence[str] | None) -> MongoDueWatch:
        return MongoDueWatch(self.connection, queues)

    def __repr__(self) -> str:
        return f"<MongoStore {self.connection.place}>"
