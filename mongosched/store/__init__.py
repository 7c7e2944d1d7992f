"""The one seam between mongosched and its database: the :class:`Store` protocol.

Everything the scheduler asks of storage is a method here, in the scheduler's own
terms (claim, renew, settle, reap, cancel, permits); nothing else in the package knows
how a job is laid out or which database holds it. Two implementations pass one contract
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

from collections.abc import Callable, Iterable, Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from mongosched._core.records import (
    Admission,
    AuditEntry,
    JobQuery,
    JobRecord,
    JobStatus,
    Pause,
    PendingChanges,
    QueueBacklog,
    Renewal,
    RunnerInfo,
    ScheduleChanges,
    Settlement,
)
from mongosched._core.steps import StepRecord
from mongosched.errors import ConfigurationError, SerializationError
from mongosched.store.codec import schedule_id
from mongosched.store.due import DueHint, DueWatch
from mongosched.store.patience import Patience

if TYPE_CHECKING:
    from pymongo.client_session import ClientSession as Session
    from pymongo.database import Database as _Database

    Database = _Database[dict[str, Any]]
else:
    Session = Any
    Database = Any
"""The driver's session a MongoDB transaction runs in (pymongo's ``ClientSession``),
named here so that only the store names the driver."""

__all__ = [
    "Database",
    "DueHint",
    "DueWatch",
    "Patience",
    "Session",
    "Store",
    "StoreTransaction",
    "in_process",
    "open_store",
    "schedule_id",
]


@runtime_checkable
class StoreTransaction(Protocol):
    """A transaction of a store, which its writes may join (:meth:`Store.begin`,
    :meth:`Store.join`): what it writes exists for others only once it commits."""

    @property
    def session(self) -> Any:
        """The driver's session the transaction runs in (a pymongo ``ClientSession``),
        or None for a store without one (``memory://``)."""

    @property
    def deferred(self) -> bool:
        """Whether jobs inserted in it are stored only when it commits (``memory://``:
        its writes are held until then) rather than written in it (MongoDB)."""

    @property
    def active(self) -> bool:
        """Whether it is open: neither committed nor aborted."""

    def commit(self) -> None:
        """Make its writes durable and visible. Raises
        :class:`~mongosched.errors.TransactionConflict` when nothing was committed and
        the transaction is to run again; a commit whose result stays unknown after the
        retries the driver's rules allow raises
        :class:`~mongosched.errors.StoreUnavailable`."""

    def abort(self) -> None:
        """Discard its writes (nothing if it is no longer open)."""

    def retryable(self, error: BaseException) -> bool:
        """Whether ``error``, raised in the transaction (by the store, the driver or
        the caller's own writes), means that it was aborted and is to run again
        (MongoDB's ``TransientTransactionError``)."""

    def end(self) -> None:
        """Release what it holds (a session it started); aborts it if still open."""


@runtime_checkable
class Store(Protocol):
    """Storage of jobs, schedules and concurrency permits."""

    # Lifecycle -------------------------------------------------------------------------
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

    def database(self) -> Database | None:
        """The pymongo ``Database`` the jobs are in (its client connected lazily), for
        the application's own writes, in its transactions; None for a store that is
        not MongoDB's."""

    # Transactions --------------------------------------------------------------------------
    def begin(self) -> StoreTransaction:
        """Start a transaction of this store (on MongoDB: in a session of its own
        client, with the store's write concern)."""

    def join(self, session: Any) -> StoreTransaction:
        """The transaction the driver's ``session`` (a caller's pymongo
        ``ClientSession``) is in, for this store's writes to join; the caller commits
        or aborts it. Raises :class:`~mongosched.errors.TransactionError` for a session
        of another client, one not in a transaction, or a store without sessions."""

    def within(self, transaction: StoreTransaction) -> Store:
        """This store, each of its reads and writes made in ``transaction`` (scheduling
        and the outcome of a job: ``insert``, ``get``, ``link_dependencies``,
        ``release_dependent``, ``dependents``, ``dependents_released``, ``settle``).
        A write that conflicts raises
        :class:`~mongosched.errors.TransactionConflict`; none is repeated."""

    # Scheduling ----------------------------------------------------------------------------
    def insert(self, jobs: Sequence[JobRecord]) -> list[tuple[JobRecord, bool]]:
        """Insert new jobs (``id`` None: the store makes one) in order. For each,
        ``(stored job, True)``, or ``(the job holding its dedupe key, False)``."""

    def upsert_schedule(self, job: JobRecord, now: datetime) -> bool:
        """Make a declared repeating schedule (a job with a fixed string id) exist once.
        If it exists, carry over changes of its rule (recomputing the next slot only
        while it waits), queue, priority and attempts. True if it was created."""

    # Reads ------------------------------------------------------------------------------------
    def get(self, job_id: Any) -> JobRecord | None: ...

    def find(
        self,
        query: JobQuery,
        *,
        sort: str = "updated_at",
        descending: bool = True,
        skip: int = 0,
        limit: int = 50,
    ) -> list[JobRecord]:
        """Jobs matching ``query``, sorted by ``sort`` then id (stable pages);
        ``limit=0``: all of them."""

    def count(self, query: JobQuery) -> int: ...

    def counts(self) -> dict[tuple[str, JobStatus], int]:
        """How many jobs there are of each (task, status); a labelled job (a Django
        task's) counts under its label."""

    def open_counts(self) -> dict[tuple[str, str, JobStatus], int]:
        """How many unfinished jobs there are of each (queue, task, status) (for queue
        depth; index-backed: final jobs are not read)."""

    def oldest_due(self, now: datetime) -> JobRecord | None:
        """The pending job that has been due longest."""

    def backlog(self, now: datetime) -> dict[str, QueueBacklog]:
        """The due pending jobs of each queue that has some: how many, and when the
        one due longest became due (index-backed: the claim index, no job read)."""

    def running(self, limit: int = 1000) -> list[JobRecord]:
        """Running jobs, soonest lease expiry first."""

    def unknown_due_tasks(self, known: Iterable[str], now: datetime) -> dict[str, int]:
        """Due pending jobs of tasks not in ``known``: how many per task (up to 20)."""

    def schedules(self) -> list[JobRecord]:
        """Every repeating job, by task."""

    # Claim, heartbeat, fenced writes ----------------------------------------------------------
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
        """Atomically take the first due pending job (by priority, then due time)
        among ``tasks`` and ``queues`` (None: every queue): it becomes running under a
        fresh lease until ``now + lease_duration``, its attempts counted. With
        ``job_id``, that job if it is pending, due or not. None when there is none.

        ``ranked``: those of ``tasks`` whose jobs carry a rank (they age, or share
        fairly: :mod:`mongosched._core.ranks`). Their jobs are read in rank order and
        merged with the others by effective priority, then due time
        (:func:`~mongosched._core.ranks.claim_key`). A claim without them costs what
        it did."""

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
        """Claim up to ``limit`` due pending jobs at once, in claim order: each as
        :meth:`claim` takes one, under a lease and a token of its own. A small fixed
        number of round trips whatever ``limit``; racing claimers never take one job
        twice. Fewer (or none) when fewer are due or others took them first."""

    def renew(
        self,
        job_id: Any,
        token: str,
        now: datetime,
        until: datetime,
        deadline: float | None = None,
    ) -> Renewal:
        """Extend a held lease to ``until`` (fenced). With a ``deadline`` (a
        :func:`time.monotonic` time: when the holder gives the lease up) the call
        returns or raises by then, even when the server has gone silent, so a holder
        cut off from the database learns in time that its lease is lost."""

    def record_slot(self, job_id: Any, token: str, slot: datetime, now: datetime) -> bool:
        """Record the slot a repeating job's run is for (fenced)."""

    def write_progress(
        self, job_id: Any, token: str, value: float | None, message: str | None, now: datetime
    ) -> bool:
        """Record a running job's progress (fenced)."""

    def settle(
        self, job: JobRecord, settlement: Settlement, patience: Patience | None = None
    ) -> JobRecord | None:
        """Apply a holder's decision about the job it claimed (fenced on ``job``'s
        lease token): the job as stored after the write, or None when the token no
        longer holds the lease. Back to pending, the job holds its dedupe key again
        (unless another job took it meanwhile). Raises
        :class:`~mongosched.errors.SerializationError`, with nothing written, when the
        result cannot be stored. A transient error is retried until ``patience`` says
        (see :data:`Patience`)."""

    def settle_many(
        self, items: Sequence[tuple[JobRecord, Settlement]], patience: Patience | None = None
    ) -> list[JobRecord | SerializationError | None]:
        """:meth:`settle` for several jobs at once, in a small fixed number of round
        trips when nothing unusual happened to them, each write fenced on its own job's
        lease token. For each item, in order: the job as stored after the write, None
        when its token no longer holds the lease, or the
        :class:`~mongosched.errors.SerializationError` that kept its result from being
        stored (nothing written for that job). What happens to one job never changes
        what happens to another. ``patience`` as for :meth:`settle`."""

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
    ) -> tuple[list[JobRecord | SerializationError | None], list[JobRecord]]:
        """:meth:`settle_many` of ``items`` and then :meth:`claim_batch`, in the round
        trips of the claim alone (the settlements ride in the claim's write): what each
        returns. A runner with a backlog writes the outcomes of the jobs that just
        finished this way. The jobs settled are running (its own), so none of them is
        among those claimed. ``patience`` (for the settlements' sake) as for
        :meth:`settle`: the write that carries the claims with them is retried so."""

    def leases_expired(self, now: datetime, limit: int = 100) -> list[JobRecord]:
        """Running jobs whose lease ran out before ``now``, oldest first."""

    def reap(self, job: JobRecord, now: datetime, settlement: Settlement) -> JobRecord | None:
        """Apply ``settlement`` to ``job`` (as :meth:`leases_expired` returned it) if its lease
        is still the one that expired, re-checking the expiry in the same write (a
        heartbeat that lands first wins)."""

    def quarantine(self, now: datetime, limit: int = 100) -> list[str]:
        """Fail, alone, the due pending jobs that cannot be claimed (a document written
        by hand or by an older version); returns what was wrong with each. A store that
        cannot hold such jobs returns ``[]``."""

    # Control by users ----------------------------------------------------------------------
    def cancel_pending(self, job_id: Any, settlement: Settlement) -> JobRecord | None:
        """Apply a final ``settlement`` (cancelled, expired) to a job that has not
        started: pending or waiting; None if it is neither."""

    def request_cancel(self, job_id: Any, now: datetime) -> JobRecord | None:
        """Mark a running job for cancellation; None if it is not running."""

    def update_pending(
        self, job: JobRecord, changes: PendingChanges, now: datetime
    ) -> JobRecord | None:
        """Change ``job`` (as read) if it is still pending; None if it is not. Raises
        :class:`~mongosched.errors.SerializationError` for a payload that cannot be
        stored."""

    def retry_finished(self, job_id: Any, status: JobStatus, now: datetime) -> JobRecord | None:
        """Take a job that ended ``status`` back to pending, due ``now``, attempts
        reset, its dedupe key held again. None if its status changed meanwhile; raises
        :class:`~mongosched.errors.JobStateError` when another job holds its key."""

    def purge(
        self, statuses: Sequence[JobStatus], finished_before: datetime, task: str | None
    ) -> int:
        """Delete jobs of the final ``statuses`` that finished before the given time
        (or at it). A job still marked as having dependents stays (see
        :meth:`purge_many`)."""

    # Bulk operations (by filter, a bounded batch of ids at a time) ---------------------------
    def select_ids(self, query: JobQuery, *, after: Any = None, limit: int = 500) -> list[Any]:
        """Ids of up to ``limit`` jobs matching ``query``, in id order, after the id
        ``after`` (None: from the first): one page of a walk over every match that
        later pages continue whatever was written meanwhile (keyset, not skip)."""

    def retry_many(self, ids: Sequence[Any], statuses: Sequence[JobStatus], now: datetime) -> int:
        """:meth:`retry_finished` for each of ``ids`` that is still in one of the final
        ``statuses`` (a job run again meanwhile is left alone); a job whose dedupe key
        another job holds now stays as it is. Returns how many went back to pending."""

    def cancel_many(self, ids: Sequence[Any], settlement: Settlement) -> tuple[int, int]:
        """Cancel each of ``ids`` as it stands: one neither running nor finished is
        settled with ``settlement`` (cancelled, its key released); a running one is
        marked for cancellation (:meth:`request_cancel`); a finished one is left alone.
        Returns ``(cancelled, requested)``."""

    def purge_many(self, ids: Sequence[Any], statuses: Sequence[JobStatus]) -> int:
        """Delete each of ``ids`` that is in one of the final ``statuses`` (declared
        schedules stay: their tombstones keep them off). A job still marked as having
        dependents stays too, checked in the delete itself: the jobs waiting for it
        would wait forever (release them first, :meth:`dependents_released` clears the
        mark). Returns how many."""

    def finished_counts(self, since: datetime, bucket: float) -> dict[tuple[int, JobStatus], int]:
        """Jobs completed or failed since ``since``: how many per (bucket number,
        status), bucket ``n`` covering ``since + n * bucket`` seconds onwards."""

    # Pauses, schedule edits, live runners ---------------------------------------------------
    def add_pause(self, pause: Pause) -> bool:
        """Record a pause (its ``since`` kept if it exists). True if it is new."""

    def remove_pause(self, kind: str, name: str) -> bool:
        """Drop a pause; True if it existed."""

    def pauses(self) -> list[Pause]:
        """Every pause, by kind and name."""

    def pending_queues(self) -> list[str]:
        """The queues that hold pending jobs (from the claim index: cheap)."""

    def task_names(self) -> list[str]:
        """The tasks that have jobs stored, sorted (MongoDB: from an index led by the
        task, one key per task, no job read)."""

    def labels(self) -> list[str]:
        """The labels of stored jobs, sorted (MongoDB: from the label index)."""

    def hold_label(self, label: str, now: datetime, ids: Sequence[Any] | None = None) -> int:
        """Move the pending jobs labelled ``label`` (of ``ids``, if given) to ``paused``,
        where no claim takes them, while the label's pause (kind ``task``) is stored;
        how many (0 when it is not). A hold that races the pause's removal never
        leaves a job held: it finds the pause gone and releases what it held, or the
        resume releases it (see :meth:`release_label`)."""

    def release_label(self, label: str, now: datetime) -> int:
        """Move the paused jobs labelled ``label`` back to pending, due as they were;
        how many."""

    def hold_schedules(self, ids: Sequence[Any], now: datetime) -> int:
        """Move each of the repeating jobs ``ids`` that is pending to ``paused``, while
        its pause (kind ``schedule``) is stored, as :meth:`hold_label` does."""

    def release_unpaused(self, now: datetime) -> int:
        """Move the paused jobs that no stored pause holds (neither their label's nor
        their schedule's) back to pending, due as they were (the reaper's sweep: what
        a process that died between a hold and its check left behind); how many."""

    def release_schedule(self, job_id: Any, now: datetime) -> JobRecord | None:
        """A paused repeating job back to pending, due as it was; None if not paused."""

    def update_schedule(
        self, job: JobRecord, changes: ScheduleChanges, now: datetime
    ) -> JobRecord | None:
        """Apply ``changes`` to the repeating job ``job`` if it is pending or paused and
        unchanged since it was read (its ``updated_at``): a run of it that starts, or
        another edit, fences this one off (None)."""

    def save_runner(self, runner: RunnerInfo, expire_at: datetime) -> None:
        """Register or refresh a runner's entry, kept until ``expire_at``."""

    def remove_runner(self, runner_id: str) -> None: ...

    def runners(self, now: datetime) -> list[RunnerInfo]:
        """Registered runners whose entry has not expired at ``now``, by name."""

    # The audit trail ------------------------------------------------------------------------
    def record_audit(self, entry: AuditEntry, expire_at: datetime | None) -> None:
        """Keep ``entry`` until ``expire_at`` (None: for good). Safe to repeat: a
        repeated call after a network error keeps it once."""

    def audit_entries(self, now: datetime, limit: int = 100, job: Any = None) -> list[AuditEntry]:
        """The entries kept and not expired at ``now``, newest first (``limit=0``:
        all of them); with ``job``, only those whose ``job`` is that id."""

    # Concurrency permits ----------------------------------------------------------------------
    def ensure_permits(self, task: str, limit: int) -> None:
        """Make the ``limit`` permits of ``task`` exist (idempotent)."""

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
        """Take a free (or expired) permit of ``task`` for the lease ``token``."""

    def renew_permit(
        self, task: str, token: str, until: datetime, deadline: float | None = None
    ) -> bool:
        """Extend the permit held by ``token``; False when it is no longer held
        (``deadline`` as for :meth:`renew`)."""

    def release_permit(self, task: str, token: str) -> None: ...

    def permit_holders(self, task: str, now: datetime) -> int:
        """Permits of ``task`` held by a live lease."""

    # Flow control: expiry and dependencies ----------------------------------------------------
    def start_deadlines_due(self, now: datetime, limit: int = 100) -> list[JobRecord]:
        """Pending and waiting jobs whose expiry is at or before ``now``, soonest
        first (index-backed)."""

    def link_dependencies(
        self, job_ids: Sequence[Any], now: datetime, dependent: Any = None
    ) -> dict[Any, JobStatus]:
        """Mark the jobs ``job_ids`` as having dependents (so that when each ends, its
        dependents are released) and return the status of each that exists, read after
        the mark. With ``dependent`` (a waiting job stored before the call), record
        that its dependencies are linked: until then :meth:`unlinked` lists it."""

    def unlinked(self, created_before: datetime, limit: int = 100) -> list[JobRecord]:
        """Waiting jobs created before the given time whose dependencies were never
        linked (the scheduling call failed or its process died between the insert and
        the link): the reaper links them (index-backed)."""

    def dependents(self, job_id: Any, limit: int = 100) -> list[JobRecord]:
        """Waiting jobs that still wait for ``job_id`` (index-backed)."""

    def release_dependent(
        self, job: JobRecord, dependency: Any, settlement: Settlement
    ) -> JobRecord | None:
        """``job`` (waiting) no longer waits for ``dependency``. With a pending
        ``settlement`` the dependency is crossed off and, if none remains, the job
        becomes pending as the settlement says; with a final one the job ends so.
        The job as stored after the write, or None if it did not wait for
        ``dependency`` (any more). Safe to repeat. ``dependency`` None (pending only):
        make the job pending if it waits for nothing any more."""

    def stranded(self, limit: int = 100) -> list[JobRecord]:
        """Waiting jobs that wait for nothing any more (a release interrupted between
        its two steps): the reaper makes them pending."""

    def dependents_released(self, job_id: Any) -> None:
        """Every dependent of the final job ``job_id`` was released: clear its mark."""

    def unreleased(self, finished_before: datetime, limit: int = 100) -> list[JobRecord]:
        """Final jobs, finished before the given time, still marked as having
        dependents: a release interrupted by a crash (the reaper's repair)."""

    def orphaned(
        self, after: Any = None, limit: int = 100
    ) -> tuple[list[tuple[JobRecord, tuple[Any, ...]]], Any]:
        """One page of a walk over the waiting jobs, in id order after the id
        ``after`` (None: from the first), for those that wait for a job that no longer
        exists (deleted before it released them: by retention, or by hand): each with
        the dependencies it waits for that are missing, in its own order. Also the id
        the next page goes on after, or None when the walk is through. A page reads up
        to ``limit`` jobs, by index, and their dependencies by id: the reaper's repair
        takes a page per pass."""

    # Flow control: limits -------------------------------------------------------------------
    def take_rate(
        self, task: str, key: str | None, count: int, window: timedelta, token: str, now: datetime
    ) -> Admission:
        """Record a start of ``task`` (under ``key``) at ``now`` if fewer than ``count``
        were recorded in the ``window`` before it (one atomic step; a sliding log of
        the last ``count`` starts). Not taken: ``free_at`` is when the oldest of those
        leaves the window. Taking again with the same ``token`` takes no second start.
        The record of an idle key expires after its window."""

    def return_rate(self, task: str, key: str | None, token: str) -> None:
        """Take back the start recorded for ``token`` (its job did not start)."""

    def take_slot(
        self,
        task: str,
        key: str,
        limit: int,
        token: str,
        now: datetime,
        until: datetime,
    ) -> Admission:
        """Take one of the ``limit`` concurrency slots of ``task`` under ``key`` for
        the lease ``token`` until ``until`` (slots whose holder's lease ran out are
        free). Taking again with the same token takes no second slot."""

    def renew_slot(
        self, task: str, key: str, token: str, until: datetime, deadline: float | None = None
    ) -> bool:
        """Extend the slot ``token`` holds; False when it no longer holds one
        (``deadline`` as for :meth:`renew`)."""

    def release_slot(self, task: str, key: str, token: str) -> None: ...

    # Durable workflows ----------------------------------------------------------------------
    def steps(self, workflow_id: Any) -> list[StepRecord]:
        """The recorded positions of a workflow's history, in order (one read)."""

    def record_step(self, step: StepRecord, token: str | None) -> StepRecord:
        """Record ``step`` at its position once (``token``: the lease it ran under);
        when the position was recorded already (by another holder), that record wins
        and is returned instead. Raises :class:`~mongosched.errors.SerializationError`
        for a value that cannot be stored."""

    def fence_workflow(self, job_id: Any, token: str, now: datetime) -> bool:
        """Whether the workflow ``job_id`` still runs under the lease ``token``; in a
        transaction, a write to its job fenced on that lease (the transaction then
        commits only while the lease holds)."""

    def forget_steps(self, workflow_id: Any, from_position: int) -> int:
        """Delete a workflow's records from ``from_position`` on; how many."""

    def send_event(self, workflow_id: Any, topic: str, value: Any, now: datetime) -> Any:
        """Keep an event (``topic``, ``value``) for the workflow; returns its id."""

    def events(self, workflow_id: Any, topic: str) -> list[tuple[Any, Any]]:
        """The events sent to a workflow on ``topic``, oldest first: ``(id, value)``."""


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
