"""Transactions on MongoDB: a caller's ``ClientSession`` joined, or one begun here
(:class:`MongoTransactions`, a part of ``MongoStore``), and the collections of the
store's view whose every call runs in it (:meth:`MongoTransaction.bind`, used by
:meth:`MongoConnection.within <mongosched.store.mongo.connection.MongoConnection.within>`).

Inside a transaction nothing is repeated: a driver error there aborts the whole
transaction on the server, so repeating one operation would be wrong. Errors the
driver labels ``TransientTransactionError`` (a write conflict, a lost connection), and
a duplicate key (a dedupe key another write took, unseen by the transaction's
snapshot, aborts it too), leave as :class:`TransientConflict`: a
:class:`~mongosched.errors.TransactionConflict` that is also a pymongo error carrying
that label, so ``ClientSession.with_transaction`` runs the caller's callback again.
A commit whose result is unknown is committed again, as the driver's specification
says, until the store's connect timeout; a commit is idempotent on the server.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from typing import Any, Protocol, TypeVar

from pymongo import WriteConcern
from pymongo.client_session import ClientSession
from pymongo.errors import (
    BulkWriteError,
    ConnectionFailure,
    DuplicateKeyError,
    OperationFailure,
    PyMongoError,
)

from mongosched.errors import StoreError, StoreUnavailable, TransactionConflict, TransactionError

__all__ = ["MongoTransaction", "MongoTransactions", "TransientConflict"]

T = TypeVar("T")

TRANSIENT = "TransientTransactionError"
UNKNOWN_COMMIT = "UnknownTransactionCommitResult"
MAX_TIME_EXPIRED = 50
"""A commit that ran out of its time limit: not committed again (the driver's rule)."""

SESSION_METHODS = frozenset(
    {
        "aggregate",
        "bulk_write",
        "count_documents",
        "delete_many",
        "delete_one",
        "find",
        "find_one",
        "find_one_and_delete",
        "find_one_and_update",
        "insert_many",
        "insert_one",
        "replace_one",
        "update_many",
        "update_one",
    }
)


class TransientConflict(TransactionConflict, PyMongoError):
    """A transaction to run again, as mongosched and as pymongo see it."""

    def __init__(self, message: str) -> None:
        PyMongoError.__init__(self, message, [TRANSIENT])


class InSession:
    """A collection whose calls pass ``session=``: the store's collections as its
    transaction's view sees them."""

    def __init__(self, collection: Any, session: ClientSession) -> None:
        self._collection = collection
        self._session = session

    def __getattr__(self, name: str) -> Any:
        value = getattr(self._collection, name)
        if name in SESSION_METHODS:
            return functools.partial(value, session=self._session)
        return value


class MongoTransaction:
    """A transaction on a pymongo session: one begun by the store (``owned``: it
    commits, aborts and ends it) or a caller's, joined (the caller does)."""

    stores_at_commit = False

    def __init__(self, session: ClientSession, *, owned: bool, timeout: float) -> None:
        self.session = session
        self.owned = owned
        self.timeout = timeout

    @property
    def active(self) -> bool:
        return bool(self.session.in_transaction)

    def commit(self) -> None:
        deadline = time.monotonic() + self.timeout
        while True:
            try:
                self.session.commit_transaction()
                return
            except PyMongoError as exc:
                unknown = exc.has_error_label(UNKNOWN_COMMIT)
                expired = isinstance(exc, OperationFailure) and exc.code == MAX_TIME_EXPIRED
                if unknown and not expired and time.monotonic() < deadline:
                    time.sleep(0.05)
                    continue  # committing again is safe: the server commits once
                self._discard()
                if exc.has_error_label(TRANSIENT):
                    raise TransientConflict(f"commit: {exc}") from exc
                if unknown:
                    raise StoreUnavailable(f"commit: result unknown: {exc}") from exc
                raise StoreError(f"commit: {exc}") from exc

    def _discard(self) -> None:
        """After a commit that failed: end the transaction on the server, if it is
        still open there (the driver allows nothing but another commit after one),
        so that it holds no document until its time limit: killing its session
        aborts it, and what it had not committed never will be."""
        try:
            self.session.client.admin.command("killSessions", [self.session.session_id])
        except PyMongoError:  # the server's time limit ends it
            pass

    def abort(self) -> None:
        if self.session.in_transaction:
            try:
                self.session.abort_transaction()
            except PyMongoError:  # the server aborts it anyway (its time limit)
                pass

    def retryable(self, error: BaseException) -> bool:
        return isinstance(error, PyMongoError) and error.has_error_label(TRANSIENT)

    def end(self) -> None:
        if self.owned:
            self.abort()
            self.session.end_session()

    def bind(self, collection: Any) -> Any:
        """``collection`` as this transaction sees it: every call passes its session."""
        return InSession(collection, self.session)

    def once(self, what: str, op: Callable[[int], T]) -> T:
        """``op(0)``, run once in this transaction (see the module), its errors
        translated: what makes the transaction run again leaves as
        :class:`TransientConflict`."""
        try:
            return op(0)
        except (DuplicateKeyError, BulkWriteError) as exc:
            raise TransientConflict(
                f"{what}: a unique key (a dedupe key) was taken by a write this transaction "
                f"could not see; run it again ({exc})"
            ) from exc
        except PyMongoError as exc:
            if exc.has_error_label(TRANSIENT):
                raise TransientConflict(f"{what}: {exc}") from exc
            if isinstance(exc, ConnectionFailure):
                raise StoreUnavailable(f"{what}: {exc}") from exc
            raise StoreError(f"{what}: {exc}") from exc


class Connected(Protocol):
    """What the transactions need of the store's connection (a
    :class:`~mongosched.store.mongo.connection.MongoConnection`)."""

    @property
    def database(self) -> Any:
        """The pymongo ``Database`` of the jobs."""

    @property
    def write_concern(self) -> int | str | None: ...

    @property
    def connect_timeout(self) -> float: ...


class MongoTransactions:
    """``database``, ``begin`` and ``join`` of the MongoDB store."""

    def __init__(self, connection: Connected) -> None:
        self.connection = connection

    def database(self) -> Any:
        """The pymongo ``Database`` the jobs are in, for the application's own writes."""
        return self.connection.database

    def begin(self) -> MongoTransaction:
        connection = self.connection
        session = connection.database.client.start_session()
        concern = (
            None if connection.write_concern is None else WriteConcern(w=connection.write_concern)
        )
        try:
            session.start_transaction(write_concern=concern)
        except PyMongoError as exc:
            session.end_session()
            raise StoreError(f"start a transaction: {exc}") from exc
        return MongoTransaction(session, owned=True, timeout=connection.connect_timeout)

    def join(self, session: Any) -> MongoTransaction:
        if not isinstance(session, ClientSession):
            raise TransactionError(
                f"session must be a pymongo ClientSession (or app.transaction()), not "
                f"{type(session).__name__}"
            )
        if session.client is not self.connection.database.client:
            raise TransactionError(
                "session belongs to another MongoClient than the app's: start it from the "
                "app's client (App(database=client.get_database(...)) shares yours)"
            )
        if not session.in_transaction:
            raise TransactionError(
                "session is not in a transaction: schedule inside session.with_transaction"
                "(...) or after session.start_transaction()"
            )
        return MongoTransaction(session, owned=False, timeout=self.connection.connect_timeout)
