"""The connection under the MongoDB store: a lazy client, the collections, and the
one place driver errors are classified and translated (:func:`transient`: retried, then
:class:`StoreUnavailable`; anything else :class:`StoreError` at once).

Every part of :class:`~mongosched.store.mongo.MongoStore` holds the one
:class:`MongoConnection` of its store and reaches the database through it: its
collections, and :meth:`MongoConnection.retrying` around each call. A transaction's view
of the store is a view of the connection (:meth:`MongoConnection.within`)."""

from __future__ import annotations

import copy
import logging
import os
import re
import threading
import time
import weakref
from collections.abc import Callable, Mapping
from contextvars import ContextVar
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, TypeVar

import pymongo
from pymongo import ReadPreference, ReturnDocument, WriteConcern
from pymongo.collection import Collection
from pymongo.errors import (
    BulkWriteError,
    ConnectionFailure,
    DuplicateKeyError,
    InvalidURI,
    OperationFailure,
    PyMongoError,
    ServerSelectionTimeoutError,
)
from pymongo.errors import ConfigurationError as DriverConfigurationError

from mongosched.errors import ConfigurationError, StoreError, StoreUnavailable
from mongosched.store import codec
from mongosched.store.mongo.documents import aware
from mongosched.store.mongo.indexes import (
    AUDIT_INDEXES,
    INDEXES,
    LIMIT_INDEXES,
    PAUSE_INDEXES,
    PERMIT_INDEXES,
    RUNNER_INDEXES,
)
from mongosched.store.patience import Patience

if TYPE_CHECKING:
    from mongosched.store.mongo.transactions import MongoTransaction

__all__ = ["MongoConnection", "patiently", "redact", "transient"]

log = logging.getLogger("mongosched.store")

T = TypeVar("T")

TRANSIENT_CODES = frozenset(
    {
        6,  # HostUnreachable
        7,  # HostNotFound
        89,  # NetworkTimeout
        91,  # ShutdownInProgress
        134,  # ReadConcernMajorityNotAvailableYet
        189,  # PrimarySteppedDown
        262,  # ExceededTimeLimit
        9001,  # SocketException
        10107,  # NotWritablePrimary
        11600,  # InterruptedAtShutdown
        11602,  # InterruptedDueToReplStateChange
        13435,  # NotPrimaryNoSecondaryOk
        13436,  # NotPrimaryOrSecondary
    }
)
"""Server error codes that say the server could not do it now but may in a moment (a
primary stepping down or shutting down, a network error between servers): those the
retryable writes of MongoDB's drivers retry."""

MAX_DELAY = 1.0
"""Seconds between retries at most."""

MIN_TIMEOUT = 0.001
"""The least time pymongo is given for an attempt (its zero means no limit)."""

_patience: ContextVar[Patience | None] = ContextVar("mongosched_patience", default=None)


def transient(exc: PyMongoError) -> bool:
    """Whether ``exc`` is a moment's unavailability, after which repeating the call is
    safe (every store call is: see :mod:`mongosched.store`) and may succeed: a network
    error, no primary to be found, a primary stepping down or shutting down (a write
    concern error of those kinds too), or any error the server labels a retryable
    write's (``RetryableWriteError``). The one rule the store's retries go by."""
    if isinstance(exc, ConnectionFailure) or exc.has_error_label("RetryableWriteError"):
        return True
    return isinstance(exc, OperationFailure) and exc.code in TRANSIENT_CODES


class MongoConnection:
    """The store's collections on one MongoDB database (a job collection, and its
    permits, pauses, runners and limits beside it), its write concern, and its retries."""

    transaction: MongoTransaction | None = None
    """Set on a transaction's view (:meth:`within`): the transaction its calls run in."""

    def __init__(
        self,
        *,
        uri: str | None,
        database: Any,
        collection: str,
        write_concern: str | int | None,
        connect_timeout: float,
        retries: int,
        retry_delay: float,
    ) -> None:
        self.connect_timeout = connect_timeout
        if uri is not None:
            uri_timeout = _check_uri(uri)
            if uri_timeout is not None:  # the URI's own setting wins
                self.connect_timeout = uri_timeout
        self.uri = uri
        self.collection_name = collection
        self.write_concern = write_concern
        self.retries = retries
        self.retry_delay = retry_delay
        self._given_database = database
        self._client: Any = None
        self._database: Any = database
        self._jobs: Collection[dict[str, Any]] | None = None
        self._queries: Collection[dict[str, Any]] | None = None
        self._permits: Collection[dict[str, Any]] | None = None
        self._pauses: Collection[dict[str, Any]] | None = None
        self._runners: Collection[dict[str, Any]] | None = None
        self._limits: Collection[dict[str, Any]] | None = None
        self._audit: Collection[dict[str, Any]] | None = None
        self._lock = threading.Lock()
        _connections.add(self)

    # Connection ---------------------------------------------------------------------------
    @property
    def database(self) -> Any:
        """The database (connected lazily: nothing is contacted until the first call)."""
        with self._lock:
            if self._database is None:
                import pymongo

                # Server selection bounds a call on an unreachable server. (Not the
                # connect timeout: the driver's monitor uses it for its own replies,
                # and a busy server would then look down and cancel operations.)
                self._client = pymongo.MongoClient(
                    self.uri,
                    tz_aware=True,
                    connect=False,
                    serverSelectionTimeoutMS=max(1, int(self.connect_timeout * 1000)),
                )
                self._database = self._client.get_default_database()
            return self._database

    def _collection(self, name: str) -> Collection[dict[str, Any]]:
        # Claims, fenced writes and reads by id decide what runs: always the primary,
        # whatever read preference the URI asks for (see :attr:`queries`).
        options: dict[str, Any] = {
            "codec_options": codec.CODEC_OPTIONS,
            "read_preference": ReadPreference.PRIMARY,
        }
        if self.write_concern is not None:
            options["write_concern"] = WriteConcern(w=self.write_concern)
        return self.database.get_collection(name, **options)  # type: ignore[no-any-return]

    @property
    def jobs(self) -> Collection[dict[str, Any]]:
        if self._jobs is None:
            self._jobs = self._collection(self.collection_name)
        return self._jobs

    @jobs.setter
    def jobs(self, collection: Any) -> None:  # tests wrap the collection (fault injection)
        self._jobs = collection
        self._queries = None

    @property
    def queries(self) -> Collection[dict[str, Any]]:
        """The job collection for listings and counts (``get_jobs``, ``count_jobs``,
        ``stats``, schedules, the dashboard): these honour the URI's ``readPreference``
        (for example ``secondaryPreferred``, to keep an operator's queries off the
        primary); they may then lag the primary by the replication delay."""
        if self._queries is None:
            preference = self.database.client.read_preference
            if getattr(preference, "mode", 0) == ReadPreference.PRIMARY.mode:
                self._queries = self.jobs
            else:
                self._queries = self.jobs.with_options(read_preference=preference)
        return self._queries

    @property
    def permits(self) -> Collection[dict[str, Any]]:
        if self._permits is None:
            self._permits = self._collection(f"{self.collection_name}_permits")
        return self._permits

    @permits.setter
    def permits(self, collection: Any) -> None:
        self._permits = collection

    @property
    def pauses_collection(self) -> Collection[dict[str, Any]]:
        if self._pauses is None:
            self._pauses = self._collection(f"{self.collection_name}_pauses")
        return self._pauses

    @property
    def audit_collection(self) -> Collection[dict[str, Any]]:
        """The audit trail: operators' actions."""
        if self._audit is None:
            self._audit = self._collection(f"{self.collection_name}_audit")
        return self._audit

    @property
    def runners_collection(self) -> Collection[dict[str, Any]]:
        if self._runners is None:
            # The collection keeps its first name, <collection>_workers (stored data).
            self._runners = self._collection(f"{self.collection_name}_workers")
        return self._runners

    @property
    def limits(self) -> Collection[dict[str, Any]]:
        """Flow-control limits: rate logs and keyed concurrency holders."""
        if self._limits is None:
            self._limits = self._collection(f"{self.collection_name}_limits")
        return self._limits

    @limits.setter
    def limits(self, collection: Any) -> None:
        self._limits = collection

    def close(self) -> None:
        with self._lock:
            if self._client is not None:
                self._client.close()
            self._forget()

    def after_fork(self) -> None:
        """In a forked child: the parent's client does not survive a fork."""
        self._lock = threading.Lock()
        self._forget()

    def _forget(self) -> None:
        """Drop the client and every collection made from it (each is made again, from
        a new client, when next used)."""
        self._client = None
        self._database = self._given_database
        self._jobs = self._queries = self._permits = self._pauses = None
        self._runners = self._limits = self._audit = None

    def within(self, transaction: MongoTransaction) -> MongoConnection:
        """This connection as seen from inside ``transaction``: its job, permit and
        limit collections pass the transaction's session on every call, and
        :meth:`retrying` runs each call once (see
        :mod:`~mongosched.store.mongo.transactions`)."""
        view = copy.copy(self)
        view.transaction = transaction
        view._jobs = view._queries = transaction.bind(self.jobs)
        view._permits = transaction.bind(self.permits)
        view._limits = transaction.bind(self.limits)
        return view

    # Plumbing -------------------------------------------------------------------------------
    def retrying(self, what: str, op: Callable[[int], T], by: float | None = None) -> T:
        """Run ``op(attempt)``, and again (attempt > 0) after an error while
        :meth:`_again` allows. ``op`` must be safe to repeat. Driver errors leave as
        :class:`StoreUnavailable` (transient) or :class:`StoreError`. In a transaction's
        view, ``op`` runs once (:meth:`MongoTransaction.once`).

        ``by`` (a :func:`time.monotonic` time; None: none) is a deadline no attempt
        outlasts and none starts after: the driver gives an attempt up when it comes,
        and the error leaves as :class:`StoreUnavailable`. A lease's renewal has one:
        its holder learns in time that the lease is lost."""
        if self.transaction is not None:
            return self.transaction.once(what, op)
        attempt = 0
        usual_end = time.monotonic() + self.connect_timeout
        while True:
            try:
                if by is None:
                    return op(attempt)
                # A call that must return by a deadline (a lease's renewal) gives its
                # attempt up then, even on a server gone silent (a network partition
                # drops packets, so nothing fails; pymongo has no socket timeout).
                with pymongo.timeout(max(by - time.monotonic(), MIN_TIMEOUT)):
                    return op(attempt)
            except (DuplicateKeyError, BulkWriteError):
                raise  # the callers resolve these
            except PyMongoError as exc:
                delay = min(self.retry_delay * (attempt + 1), MAX_DELAY)
                if not self._again(exc, attempt, time.monotonic() + delay, usual_end, by):
                    log.debug("%s: %s", what, exc)
                    if not transient(exc):
                        raise StoreError(
                            f"MongoDB refused a request ({what}): {_first_line(exc)}"
                        ) from exc
                    raise StoreUnavailable(self.unreachable(exc)) from exc
                attempt += 1
                log.debug("%s: %s; retrying (attempt %d)", what, _first_line(exc), attempt)
                time.sleep(delay)

    def _again(
        self, exc: PyMongoError, attempt: int, until: float, usual_end: float, by: float | None
    ) -> bool:
        """Whether a call that met ``exc`` runs again once its delay ends at ``until``.
        Never past ``by`` (:meth:`retrying`). Usually, after a :func:`transient` error,
        up to ``retries`` more times within ``connect_timeout`` (``usual_end``: a server
        that cannot be reached costs one timeout, not one per retry). Within
        :func:`patiently` (an outcome write), after any error the server gave, until its
        patience runs out: giving the write up runs a finished job again, and the write
        is fenced. Not after an error of this side's own (a driver error that is no
        server's refusal)."""
        if by is not None and until >= by:
            return False
        refused = not transient(exc)
        if not refused and attempt < self.retries and until < usual_end:
            if not isinstance(exc, ServerSelectionTimeoutError):
                return True
        patience = _patience.get()
        if patience is None or (refused and not isinstance(exc, OperationFailure)):
            return False
        return until < patience()

    def modify(
        self, what: str, query: Mapping[str, Any], update: Mapping[str, Any]
    ) -> dict[str, Any] | None:
        """The job ``query`` matches as it is after ``update`` (one retried
        ``findAndModify``), or None when none matches."""
        return self.retrying(
            what,
            lambda _: self.jobs.find_one_and_update(
                query, update, return_document=ReturnDocument.AFTER
            ),
        )

    def unreachable(self, exc: BaseException) -> str:
        """Why a call could not reach the server: where it tried, for how long, what the
        driver saw, and what to check (not the driver's own timeouts, which are not the
        ones applied)."""
        if self.uri is None:  # the client is the caller's, with its own timeouts
            tried = "cannot reach the MongoDB server of the given database"
        else:
            hosts = self.uri.partition("://")[2].split("/")[0].rpartition("@")[2]
            tried = f"cannot reach MongoDB at {hosts} within {self.connect_timeout:g} s"
        return (
            f"{tried} ({_reason(exc)}): check that MongoDB is running there, that this "
            "host can reach it, and that the URI names it"
        )

    def prepare(self) -> None:
        """Create every index (idempotent: existing ones are left as they are)."""
        for collection, indexes in (
            (self.jobs, INDEXES),
            (self.permits, PERMIT_INDEXES),
            (self.pauses_collection, PAUSE_INDEXES),
            (self.runners_collection, RUNNER_INDEXES),
            (self.limits, LIMIT_INDEXES),
            (self.audit_collection, AUDIT_INDEXES),
        ):
            for keys, options in indexes:

                def create(_: int, c: Any = collection, k: Any = keys, o: Any = options) -> str:
                    return str(c.create_index(k, **o))

                self.retrying("create index", create)

    def index_names(self) -> list[str]:
        """Names of the job collection's indexes (for checks and tests)."""
        return list(self.retrying("list indexes", lambda _: self.jobs.index_information()))

    def clock_offset(self, local_now: Callable[[], datetime]) -> timedelta | None:
        """How far the server's clock (``localTime`` of ``hello``) is ahead of
        ``local_now()``, taken at the middle of the round trip."""
        before = local_now()
        try:
            reply = self.database.command("hello")
        except (PyMongoError, NotImplementedError):
            return None
        after = local_now()
        server = reply.get("localTime")
        if not isinstance(server, datetime):
            return None
        offset: timedelta = aware(server) - (before + (after - before) / 2)
        return offset

    @property
    def place(self) -> str:
        """Where the jobs are (a password in the URI left out), for ``repr``."""
        where = redact(self.uri) if self.uri else repr(self._given_database)
        return f"{where} {self.collection_name}"

    def __repr__(self) -> str:
        return f"<MongoConnection {self.place}>"


def patiently(patience: Patience | None, call: Callable[..., T], *args: Any) -> T:
    """``call(*args)``, in which a transient error, or any refusal by the server, goes
    on being retried (with delays of up to :data:`MAX_DELAY`) until ``patience()``, not
    only the usual few times (None: only those). A holder's outcome write has this
    patience: its run is over, and giving the write up would run the job again once its
    lease expires; the write stays fenced on the lease's token, so a retry never lands
    over another holder. (A function, not a context manager: it costs a third.)"""
    if patience is None:
        return call(*args)
    token = _patience.set(patience)
    try:
        return call(*args)
    finally:
        _patience.reset(token)


_connections: weakref.WeakSet[MongoConnection] = weakref.WeakSet()


def _after_fork_in_child() -> None:
    for connection in list(_connections):
        connection.after_fork()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def _check_uri(uri: str) -> float | None:
    """Refuse a URI pymongo cannot use or that names no database; its own server
    selection timeout in seconds, if it sets one."""
    from pymongo.uri_parser import parse_uri

    try:
        parsed = parse_uri(uri)
    except (InvalidURI, DriverConfigurationError, ValueError) as exc:
        raise ConfigurationError(f"App: invalid MongoDB URI: {exc}") from None
    if not parsed.get("database"):
        raise ConfigurationError(
            "App: the URI names no database; use mongodb://host/dbname or App(database=...)"
        )
    options = {str(k).lower(): v for k, v in parsed.get("options", {}).items()}
    timeout = options.get("serverselectiontimeoutms")  # pymongo gives it in seconds
    return None if timeout is None else float(timeout)


def redact(uri: str) -> str:
    scheme, sep, rest = uri.partition("://")
    if "@" in rest.split("/", 1)[0]:
        rest = "***@" + rest.split("@", 1)[1]
    return f"{scheme}{sep}{rest}"


def _first_line(exc: BaseException) -> str:
    """The gist of a driver error, without its topology description nor the timeouts
    it quotes (the driver's defaults, not the ones applied)."""
    return re.split(r", Timeout:| \(configured timeouts|, full error: |\n", str(exc))[0]


def _reason(exc: BaseException) -> str:
    """What the driver saw when it could not reach a server, without the address
    (said apart)."""
    return re.sub(r"^\S+:\d+: ", "", _first_line(exc)) or type(exc).__name__
