"""The parts the store seam is made of: a protocol for each.

:class:`~mongosched.store.Store` is all of them together, plus its lifecycle. Both
stores are built from one part per protocol here (``store/mongo/jobs.py`` is the MongoDB
store's :class:`Jobs`, ``store/memory/jobs.py`` the in-process one's, and so on), so a
piece of the scheduler that needs storage can ask for the parts it uses, and its tests
can hand it a small fake of those alone.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from mongosched._core import transitions
from mongosched._core.records import (
    JobQuery,
    JobRecord,
    JobStatus,
    PendingChanges,
    Renewal,
    Settlement,
)
from mongosched._core.steps import StepRecord
from mongosched.errors import SerializationError
from mongosched.store.control import Admin, Dependents, Limits, Permits
from mongosched.store.patience import Patience

if TYPE_CHECKING:
    from pymongo.database import Database as _Database

    Database = _Database[dict[str, Any]]
else:
    Database = Any

__all__ = [
    "Admin",
    "Claims",
    "Dependents",
    "Jobs",
    "Landed",
    "Leases",
    "Limits",
    "Permits",
    "ReadAhead",
    "Staged",
    "StagedDependents",
    "StagedJobs",
    "StagedLeases",
    "StagedWorkflows",
    "StoreTransaction",
    "Transactions",
    "Workflows",
    "stored_record",
]


@runtime_checkable
class StoreTransaction(Protocol):
    """A transaction of a store, which its writes may join (:meth:`Transactions.begin`,
    :meth:`Transactions.join`): what it writes exists for others only once it commits."""

    @property
    def session(self) -> Any:
        """The driver's session the transaction runs in (a pymongo ``ClientSession``),
        or None for a store without one (``memory://``)."""

    @property
    def stores_at_commit(self) -> bool:
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


class Jobs(Protocol):
    """Scheduling, reading and users' changes to one job."""

    def insert(self, jobs: Sequence[JobRecord]) -> list[tuple[JobRecord, bool]]:
        """Insert new jobs (``id`` None: the store makes one) in order. For each,
        ``(stored job, True)``, or ``(the job holding its dedupe key, False)``."""

    def upsert_schedule(self, job: JobRecord, now: datetime) -> bool:
        """Make a declared repeating schedule (a job with a fixed string id) exist once.
        If it exists, carry over changes of its rule (recomputing the next slot only
        while it waits), queue, priority and attempts. True if it was created."""

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

    def oldest_due(self, now: datetime) -> JobRecord | None:
        """The pending job that has been due longest."""

    def running(self, limit: int = 1000) -> list[JobRecord]:
        """Running jobs, soonest lease expiry first."""

    def unknown_due_tasks(self, known: Iterable[str], now: datetime) -> dict[str, int]:
        """Due pending jobs of tasks not in ``known``: how many per task (up to 20)."""

    def schedules(self) -> list[JobRecord]:
        """Every repeating job, by task."""

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


class Leases(Protocol):
    """A holder's fenced writes, and the reaper's."""

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


class Claims(Protocol):
    """Claims, one job or many, and settlements many at once."""

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
        ahead: ReadAhead | None = None,
        records: bool = True,
    ) -> tuple[list[JobRecord | Landed | SerializationError | None], list[JobRecord]]:
        """:meth:`settle_many` of ``items`` and then :meth:`claim_batch`, in the round
        trips of the claim alone (the settlements ride in the claim's write): what each
        returns. A runner with a backlog writes the outcomes of the jobs that just
        finished this way. The jobs settled are running (its own), so none of them is
        among those claimed. ``patience`` (for the settlements' sake) as for
        :meth:`settle`: the write that carries the claims with them is retried so.

        ``ahead``: where the caller keeps candidates read beyond this claim's, for its
        next claims (see :class:`ReadAhead`); a store whose reads cost no round trip
        ignores it. ``records`` False: a settlement that landed as it was written may
        be given back as :class:`Landed` rather than as the job stored (a store that
        has that record at hand gives it)."""


class Landed:
    """A settlement that landed as it was written, given back by
    :meth:`Claims.settle_and_claim` (with ``records`` False) in place of the job as
    stored: that record is made only when asked (:meth:`record`), by the rule both
    stores follow (:func:`~mongosched._core.transitions.settled`). A runner needs it
    only for a listener, a dependent or a repeating job; what it needs of every job
    is here without it."""

    __slots__ = ("job", "settlement", "result", "_record")

    def __init__(self, job: JobRecord, settlement: Settlement, result: Any) -> None:
        self.job = job
        """The job as its holder claimed it."""
        self.settlement = settlement
        self.result = result
        """The settlement's result as the store gives it back."""
        self._record: JobRecord | None = None

    @property
    def status(self) -> JobStatus:
        return self.settlement.status

    @property
    def repeat(self) -> Mapping[str, Any] | None:
        return self.job.repeat

    @property
    def has_dependents(self) -> bool:
        return self.job.has_dependents

    def record(self) -> JobRecord:
        """The job as stored."""
        if self._record is None:
            self._record = transitions.settled(self.job, self.settlement, self.result)
        return self._record


def stored_record(stored: JobRecord | Landed) -> JobRecord:
    """The job as stored, from what a settlement's write gave back."""
    return stored if isinstance(stored, JobRecord) else stored.record()


class ReadAhead:
    """What one claimer (a runner's dispatcher) keeps of the candidates its batched
    claims read beyond their own, so that under a backlog its next claims can skip
    their read: a claim then costs one round trip (its write), not two.

    The store fills and spends it (the caller only holds it, and says when to forget
    it). Spending kept candidates can never claim a job it should not: each claim's
    write re-checks the whole claim filter at the claim's own time, and that the job is
    still the document read. What it can do is miss a job that came due, or ahead in
    line, after the read; so kept candidates are spent only

    * within :attr:`FOR` of their read (on the store's clock);
    * until the caller is told of a new due job (:meth:`wake`: a job scheduled here,
      or seen by the runner's wake-up watch);
    * while nobody else claims from them: a claim from kept candidates that misses one
      (another runner was first, or the job changed) stops reading ahead for
      :attr:`PAUSE`, since runners sharing a backlog would read the same jobs ahead.

    A claim reads ahead only when it comes within :attr:`FOR` of the previous one (the
    jobs are short): claims further apart would find what they kept lapsed, and would
    only have decoded it for nothing.
    """

    FOR = timedelta(seconds=0.1)
    """How long candidates read ahead are spent: a job that comes due meanwhile waits at
    most this much longer for a claim than it would without reading ahead."""
    PAUSE = timedelta(seconds=1)
    """How long a claim that found its kept candidates taken stops reading ahead."""
    BATCHES = 4
    """A read takes the candidates of this many batches: its own and three to keep."""

    __slots__ = ("docs", "key", "last", "until", "paused_until", "woken")

    def __init__(self) -> None:
        self.docs: list[Any] = []
        """The candidates kept, in claim order (as the store read them)."""
        self.key: Any = None
        """What they were read for (the claim's tasks and queues)."""
        self.last: datetime | None = None
        """When the previous claim was made (None: none since the backlog began)."""
        self.until: datetime | None = None
        """When they stop being spent."""
        self.paused_until: datetime | None = None
        """Until when claims do not read ahead (None: they do)."""
        self.woken = False
        """Whether a new due job was announced since the last read (any thread sets it;
        the store clears it before it reads)."""

    def wake(self) -> None:
        """A job came due that the kept candidates may miss: the next claim reads."""
        self.woken = True

    def drop(self) -> None:
        """Forget the kept candidates (the claimer's backlog is over)."""
        self.docs, self.last = [], None


class Workflows(Protocol):
    """Durable workflows: their steps and events."""

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


class Transactions(Protocol):
    """Transactions a store's writes and the application's may share."""

    def database(self) -> Database | None:
        """The pymongo ``Database`` the jobs are in (its client connected lazily), for
        the application's own writes, in its transactions; None for a store that is
        not MongoDB's."""

    def begin(self) -> StoreTransaction:
        """Start a transaction of this store (on MongoDB: in a session of its own
        client, with the store's write concern)."""

    def join(self, session: Any) -> StoreTransaction:
        """The transaction the driver's ``session`` (a caller's pymongo
        ``ClientSession``) is in, for this store's writes to join; the caller commits
        or aborts it. Raises :class:`~mongosched.errors.TransactionError` for a session
        of another client, one not in a transaction, or a store without sessions."""


class StagedJobs(Protocol):
    """The jobs a transaction schedules, and what it reads of them."""

    def get(self, job_id: Any) -> JobRecord | None: ...

    def insert(self, jobs: Sequence[JobRecord]) -> list[tuple[JobRecord, bool]]: ...


class StagedLeases(Protocol):
    """The outcome of a run, written in a transaction."""

    def settle(self, job: JobRecord, settlement: Settlement) -> JobRecord | None: ...


class StagedDependents(Protocol):
    """Linking and releasing dependencies in a transaction."""

    def link_dependencies(
        self, job_ids: Sequence[Any], now: datetime, dependent: Any = None
    ) -> dict[Any, JobStatus]: ...

    def of(self, job_id: Any, limit: int = 100) -> list[JobRecord]: ...

    def release_dependent(
        self, job: JobRecord, dependency: Any, settlement: Settlement
    ) -> JobRecord | None: ...

    def dependents_released(self, job_id: Any) -> None: ...


class StagedWorkflows(Protocol):
    """A workflow's fence and step record, in a transaction."""

    def fence_workflow(self, job_id: Any, token: str, now: datetime) -> bool: ...

    def record_step(self, step: StepRecord, token: str | None) -> StepRecord: ...


class Staged(Protocol):
    """What a store offers inside a transaction (:meth:`Store.within`), part by part as
    a store does: scheduling a job, linking and releasing its dependencies, and the
    outcome of a run. On MongoDB these are the store's own parts, each write made in
    the transaction. ``memory://`` holds new jobs and outcomes until the commit, and
    links and releases dependencies then, outside the transaction: its parts raise
    :class:`~mongosched.errors.StoreError` for the rest. A :class:`Store` is a
    ``Staged`` too (its writes outside any transaction)."""

    def parse_id(self, value: Any) -> Any: ...

    @property
    def jobs(self) -> StagedJobs: ...

    @property
    def leases(self) -> StagedLeases: ...

    @property
    def dependents(self) -> StagedDependents: ...

    @property
    def workflows(self) -> StagedWorkflows: ...
