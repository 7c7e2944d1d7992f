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
in a module of its own. The store holds one part per protocol of
:mod:`mongosched.store.parts` (``store.jobs``, ``store.leases``, ``store.claims``, ...),
and callers ask the part: each method is written once, in its part.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from mongosched.errors import TransactionError
from mongosched.store import codec
from mongosched.store.control import Admin, Dependents, Limits, Permits
from mongosched.store.mongo.admin import MongoAdmin
from mongosched.store.mongo.claims import MongoClaims
from mongosched.store.mongo.connection import MongoConnection
from mongosched.store.mongo.dependents import MongoDependents
from mongosched.store.mongo.jobs import MongoJobs
from mongosched.store.mongo.leases import MongoLeases
from mongosched.store.mongo.limits import MongoLimits
from mongosched.store.mongo.permits import MongoPermits
from mongosched.store.mongo.transactions import MongoTransaction, MongoTransactions
from mongosched.store.mongo.watch import MongoDueWatch
from mongosched.store.mongo.workflows import MongoWorkflows
from mongosched.store.parts import Claims, Jobs, Leases, Transactions, Workflows

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
        self.close = connection.close
        self.clock_offset = connection.clock_offset
        self.parse_id = codec.parse_id
        self.transactions: Transactions = MongoTransactions(connection)
        self.jobs: Jobs = MongoJobs(connection)
        leases = MongoLeases(connection)
        self.leases: Leases = leases
        self.claims: Claims = MongoClaims(connection, leases)
        self.admin: Admin = MongoAdmin(connection, self.jobs.retry_finished, self.jobs.insert)
        self.permits: Permits = MongoPermits(connection)
        self.dependents: Dependents = MongoDependents(connection)
        self.limits: Limits = MongoLimits(connection)
        self._workflows = MongoWorkflows(connection)
        self.workflows: Workflows = self._workflows

    def prepare(self) -> None:
        """The job collection's indexes and the workflows'."""
        self.connection.prepare()
        self._workflows.prepare_workflows()

    def within(self, transaction: Any) -> MongoStore:
        if not isinstance(transaction, MongoTransaction):
            raise TransactionError(f"not a transaction of this store: {transaction!r}")
        return MongoStore(self.connection.within(transaction))

    def watch_due(self, queues: Sequence[str] | None) -> MongoDueWatch:
        return MongoDueWatch(self.connection, queues)

    def __repr__(self) -> str:
        return f"<MongoStore {self.connection.place}>"
