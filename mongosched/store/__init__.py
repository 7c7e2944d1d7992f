"""The one seam between mongosched and its database: the :class:`Store` protocol.

Everything the scheduler asks of storage is a method of one of its parts
(:mod:`mongosched.store.parts`: jobs, leases, claims, admin, permits, dependents, limits,
workflows, transactions), in the scheduler's own terms (claim, renew, settle, reap,
cancel, permits); nothing else in the package knows how a job is laid out or which
database holds it. Two implementations pass one contract
suite (``tests/contract``):

* :class:`~mongosched.store.mongo.MongoStore` (``mongodb://``, ``mongodb+srv://``, or a
  pymongo ``Database``): every query, operator, field name, index and driver error;
* :class:`~mongosched.store.memory.MemoryStore` (``memory://[name]``): in-process,
  atomic under one lock, with ordered indexes; the embedded default for demos and tests.

Rules every implementation keeps (``../shared/design.md`` section 4):

* each method is one atomic step (or a small fixed number of them), takes the current
  time from its caller, and is safe to repeat after a network error;
* a claim is tagged with a token made before the call; a holder's writes (``renew``,
  ``record_slot``, ``write_progress``, ``settle``) land only while its token holds the
  lease (they are *fenced*), and report ``None``/``False`` when it does not;
* ids of new jobs are made before the insert, so a repeated insert finds its own job;
* a dedupe key is held only while its job is in the key's scope: ``active`` while
  pending or running, ``pending`` while pending;
* payloads, results and errors are BSON: what cannot be stored raises
  :class:`~mongosched.errors.SerializationError` naming the task and the field;
* database failures raise :class:`~mongosched.errors.StoreUnavailable` (could not
  reach the server) or :class:`~mongosched.errors.StoreError`, never a driver error.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from mongosched.errors import ConfigurationError
from mongosched.store.codec import schedule_id
from mongosched.store.due import DueHint, DueWatch
from mongosched.store.parts import (
    Admin,
    Claims,
    Database,
    Dependents,
    Jobs,
    Leases,
    Limits,
    Permits,
    Staged,
    StoreTransaction,
    Transactions,
    Workflows,
)
from mongosched.store.patience import Patience

if TYPE_CHECKING:
    from pymongo.client_session import ClientSession as Session
else:
    Session = Any
"""The driver's session a MongoDB transaction runs in (pymongo's ``ClientSession``),
named here so that only the store names the driver."""

__all__ = [
    "Database",
    "DueHint",
    "DueWatch",
    "Patience",
    "Session",
    "Staged",
    "Store",
    "StoreTransaction",
    "in_process",
    "open_store",
    "schedule_id",
]


@runtime_checkable
class Store(Protocol):
    """Storage of jobs, schedules and concurrency permits: one part for each protocol
    of :mod:`mongosched.store.parts`, and the store's lifecycle. A caller asks the
    part (``store.claims.claim(...)``); a piece of the scheduler that needs only some
    parts is given those."""

    transactions: Transactions
    jobs: Jobs
    leases: Leases
    claims: Claims
    admin: Admin
    permits: Permits
    dependents: Dependents
    limits: Limits
    workflows: Workflows

    def prepare(self) -> None:
        """Create what writes need (indexes); idempotent. Reads work without it."""

    def close(self) -> None:
        """Release connections; the store may be used again afterwards (reconnects)."""

    def clock_offset(self, local_now: Callable[[], datetime]) -> timedelta | None:
        """How far the server's clock is ahead of ``local_now()``, or None where the
        store has no clock of its own."""

    def parse_id(self, value: Any) -> Any:
        """A job id from what a user passed (an id, or its string form). Raises
        :class:`~mongosched.errors.InvalidJobId` for anything else."""

    def watch_due(self, queues: Sequence[str] | None) -> DueWatch:
        """Watch for jobs of ``queues`` (None: every queue) becoming pending, anywhere
        (not started until iterated; see :class:`DueWatch`)."""

    def within(self, transaction: StoreTransaction) -> Staged:
        """This store's scheduling and outcome writes, each made in ``transaction``
        (:class:`~mongosched.store.parts.Staged`). A write that conflicts raises
        :class:`~mongosched.errors.TransactionConflict`; none is repeated."""


def open_store(
    uri: str | None = None,
    *,
    database: Any = None,
    collection: str = "mongosched_jobs",
    write_concern: str | int | None = "majority",
    connect_timeout: float = 5.0,
) -> Store:
    """The store a URI names: ``memory://[name]`` or a MongoDB URI (which must name
    the database), or a pymongo ``Database`` given as ``database``. Connecting is
    lazy: nothing is contacted here. ``connect_timeout`` bounds how long any call waits
    for an unreachable server (a URI's ``serverSelectionTimeoutMS`` wins)."""
    if (uri is None) == (database is None):
        raise ConfigurationError("App: give exactly one of uri or database")
    if database is not None:
        from mongosched.store.mongo import MongoStore

        return MongoStore(database=database, collection=collection, write_concern=write_concern)
    if not isinstance(uri, str):
        raise ConfigurationError(f"App: uri must be a str, not {type(uri).__name__}")
    scheme = uri.partition("://")[0].lower()
    if in_process(uri):
        from mongosched.store.memory import MemoryStore

        return MemoryStore.named(uri)
    if scheme in ("mongodb", "mongodb+srv"):
        from mongosched.store.mongo import MongoStore

        return MongoStore(
            uri=uri,
            collection=collection,
            write_concern=write_concern,
            connect_timeout=connect_timeout,
        )
    raise ConfigurationError(
        f"App: unknown store URI {uri!r}: use mongodb://host/dbname, mongodb+srv://..., "
        "or memory:// (in-process, for demos and tests)"
    )


def in_process(uri: str | None) -> bool:
    """Whether ``uri`` names a store that lives in this process only (``memory://``):
    another process that opens the same URI gets a store of its own."""
    return isinstance(uri, str) and uri.partition("://")[0].lower() == "memory"
