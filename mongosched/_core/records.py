"""What a stored job is, in the package's own terms: plain, immutable values.

Every store returns :class:`JobRecord` values and takes :class:`Settlement` values; only
the store knows how they are laid out in the database. Nothing here does I/O.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from datetime import datetime
from typing import Any, TypeVar

from mongosched._core.fleet import PAUSE_KINDS, AuditEntry, Pause, QueueBacklog, RunnerInfo

__all__ = [
    "DEDUPE_SCOPE_STATUSES",
    "ERRORS_KEPT",
    "FINAL_STATUSES",
    "IDLE_SCHEDULE_STATUSES",
    "OPEN_STATUSES",
    "RETRYABLE_STATUSES",
    "SCHEDULE_ID_PREFIX",
    "ATTEMPTS_KEPT",
    "AttemptError",
    "AttemptRecord",
    "ended_attempt",
    "UNSTARTED_STATUSES",
    "REPLACEABLE_STATUSES",
    "is_schedule_id",
    "schedule_id",
    "ErrorInfo",
    "Admission",
    "AuditEntry",
    "JobQuery",
    "JobRecord",
    "JobStatus",
    "LastRun",
    "LeaseInfo",
    "MissedSlots",
    "LogEntry",
    "Pause",
    "PAUSE_KINDS",
    "PendingChanges",
    "Progress",
    "QueueBacklog",
    "Renewal",
    "ScheduleChanges",
    "assembled",
    "evolved",
    "kept_attempts",
    "kept_errors",
    "ScheduleEdit",
    "Settlement",
    "SORTABLE",
    "RunnerInfo",
]

_R = TypeVar("_R")


def evolved(record: _R, **changes: Any) -> _R:
    """``record`` (one of this module's frozen values) with ``changes``: what
    :func:`dataclasses.replace` returns, for a tenth of its cost (it inspects the
    fields and calls ``__init__`` on every call), which the runner pays several times
    per job. None of these values has ``__post_init__``, init-only fields or slots, so
    copying the attributes is all ``__init__`` would do. An unknown field is a
    TypeError, as with ``replace``."""
    state = record.__dict__
    new = object.__new__(type(record))
    values = new.__dict__
    values.update(state)
    values.update(changes)
    if len(values) != len(state):  # a name that is not a field was added
        unknown = ", ".join(sorted(changes.keys() - state.keys()))
        raise TypeError(f"{type(record).__name__} has no field(s) {unknown}")
    return new


_FIELD_NAMES: dict[type, frozenset[str]] = {}


def assembled(cls: type[_R], values: Mapping[str, Any]) -> _R:
    """``cls(**values)`` for one of this module's frozen values, ``values`` naming every
    field (defaults included): built as :func:`evolved` builds, for a tenth of the cost
    of ``__init__``, which sets each field through ``object.__setattr__`` (a
    :class:`JobRecord` has 37). The stores pay it for every job they read, the runner
    twice per job. A missing or unknown field is a TypeError, as with ``__init__``."""
    names = _FIELD_NAMES.get(cls)
    if names is None:
        names = _FIELD_NAMES[cls] = frozenset(f.name for f in fields(cls))  # type: ignore[arg-type]
    if values.keys() != names:
        missing = ", ".join(sorted(names - values.keys()))
        unknown = ", ".join(sorted(values.keys() - names))
        raise TypeError(f"{cls.__name__}: missing field(s) [{missing}], unknown [{unknown}]")
    new = object.__new__(cls)
    new.__dict__.update(values)
    return new


class JobStatus(str, enum.Enum):
    """Where a job is in its life.

    ``pending`` → ``running`` → one of ``completed``, ``failed``, ``cancelled``
    (the *final* statuses). A retry or the next slot of a repeating job takes it from
    ``running`` back to ``pending``. A repeating schedule paused by an operator
    (:meth:`App.pause`) waits ``paused`` (not final, never claimed) until it is resumed.
    A job with dependencies starts ``waiting`` (never claimed) and becomes ``pending``
    once they completed; a job not started before its expiry ends ``expired`` (final),
    never run.
    """

    PENDING = "pending"
    RUNNING = "running"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"
    PAUSED = "paused"
    WAITING = "waiting"
    EXPIRED = "expired"

    @property
    def is_final(self) -> bool:
        return self in FINAL_STATUSES

    def __str__(self) -> str:
        return self.value


FINAL_STATUSES = frozenset(
    {JobStatus.COMPLETED, JobStatus.FAILED, JobStatus.CANCELLED, JobStatus.EXPIRED}
)
RETRYABLE_STATUSES = (JobStatus.FAILED, JobStatus.CANCELLED, JobStatus.EXPIRED)
"""Statuses of a job that can be run again (``retry_job``, ``retry_jobs``, the
dashboard's and the CLI's retry): ended without completing."""
UNSTARTED_STATUSES = (JobStatus.PENDING, JobStatus.WAITING, JobStatus.PAUSED)
"""Statuses of a job that has not started its current occurrence: a cancel or an
expiry settles it without a run (a held job too: a pause stops it running, not
ending)."""
REPLACEABLE_STATUSES = (JobStatus.PENDING, JobStatus.PAUSED)
"""Statuses of a job that a debounce (``dedupe="replace"``) replaces: waiting to be
claimed, whether or not a pause holds it (the statuses of the ``pending`` scope)."""
OPEN_STATUSES = (JobStatus.PENDING, JobStatus.WAITING, JobStatus.PAUSED)
"""Statuses of a job neither running nor finished: a cancel by filter ends it at once
(a running one is asked to stop)."""
IDLE_SCHEDULE_STATUSES = (JobStatus.PENDING, JobStatus.PAUSED)
"""Statuses of a repeating job waiting for its next slot: an edit of its schedule
applies, and a new rule moves the slot."""
DEDUPE_SCOPE_STATUSES = {
    "active": (JobStatus.PENDING, JobStatus.RUNNING, JobStatus.PAUSED),
    "pending": (JobStatus.PENDING, JobStatus.PAUSED),
}
"""While its job is in one of these statuses, a dedupe key is held in that scope (a
paused schedule keeps its key)."""

SCHEDULE_ID_PREFIX = "schedule:"


def is_schedule_id(value: Any) -> bool:
    """Whether ``value`` is the id of a declared schedule. Such a job is never deleted
    by retention or purge: cancelled, it is the record that keeps the schedule off
    (a tombstone) until it is resumed."""
    return isinstance(value, str) and value.startswith(SCHEDULE_ID_PREFIX)


def is_listed_schedule(job: JobRecord) -> bool:
    """Whether a repeating ``job`` is one a schedule list shows: a live one (not
    finished), or a declared schedule however it stands (cancelled, it is the
    schedule switched off). A bounded repeating job that finished (a backfill's lane,
    done) is not a schedule any more."""
    return job.repeat is not None and (is_schedule_id(job.id) or not job.status.is_final)


def schedule_id(task: str) -> str:
    """The stable id of a task's decorator-declared repeating schedule."""
    return f"{SCHEDULE_ID_PREFIX}{task}"


SORTABLE = ("updated_at", "created_at", "run_at", "finished_at", "priority")
"""Fields :meth:`App.get_jobs` can sort by."""


@dataclass(frozen=True)
class ErrorInfo:
    """The last error a job raised: exception type (its qualified name, and the module
    that defines it), message and formatted traceback."""

    type: str
    message: str
    traceback: str | None = None
    module: str | None = None

    @property
    def path(self) -> str:
        """Import path of the exception class (``myapp.errors.PaymentDeclined``); the
        bare type where the module is not known."""
        return f"{self.module}.{self.type}" if self.module else self.type

    def __str__(self) -> str:
        return f"{self.type}: {self.message}"


ERRORS_KEPT = 10
"""How many of its attempts' errors a job keeps (:attr:`JobRecord.errors`): the last."""


@dataclass(frozen=True)
class AttemptError:
    """The error one attempt of a job ended with: which attempt (of its occurrence),
    when, and the error."""

    attempt: int
    at: datetime
    error: ErrorInfo


def kept_errors(
    errors: tuple[AttemptError, ...], new: AttemptError | None
) -> tuple[AttemptError, ...]:
    """A job's ``errors`` after a write adds ``new`` (None: unchanged): the last
    :data:`ERRORS_KEPT`."""
    return errors if new is None else (*errors, new)[-ERRORS_KEPT:]


@dataclass(frozen=True)
class LeaseInfo:
    """Who holds a running job (its runner's id, and the host and process id of that
    runner where the store kept them), under which token, and until when."""

    owner: str
    token: str
    until: datetime
    heartbeat_at: datetime
    host: str | None = None
    pid: int | None = None


ATTEMPTS_KEPT = 20
"""How many of its ended attempts a job keeps (:attr:`JobRecord.history`): the last."""


@dataclass(frozen=True)
class AttemptRecord:
    """One attempt of a job that ended: which attempt (of its occurrence), the runner
    that held it (id, host, process id; None where not kept), when it started and
    ended, and the status the job was left in (``pending``: to be retried)."""

    attempt: int
    runner: str
    host: str | None
    pid: int | None
    started_at: datetime
    ended_at: datetime
    status: JobStatus


def ended_attempt(job: JobRecord, settlement: Settlement) -> AttemptRecord | None:
    """The attempt that ``settlement`` ends, as the running ``job`` holds it (None:
    the job holds no lease, or the claim is given back uncounted)."""
    lease = job.lease
    if lease is None or job.started_at is None:
        return None
    if settlement.attempts is not None and settlement.attempts < job.attempts:
        return None  # given back uncounted: it never ran
    return assembled(  # (once or twice per job settled)
        AttemptRecord,
        {
            "attempt": job.attempts,
            "runner": lease.owner,
            "host": lease.host,
            "pid": lease.pid,
            "started_at": job.started_at,
            "ended_at": settlement.now,
            "status": settlement.status,
        },
    )


def kept_attempts(
    history: tuple[AttemptRecord, ...], new: AttemptRecord | None
) -> tuple[AttemptRecord, ...]:
    """A job's ``history`` after a write adds ``new`` (None: unchanged): the last
    :data:`ATTEMPTS_KEPT`."""
    return history if new is None else (*history, new)[-ATTEMPTS_KEPT:]


@dataclass(frozen=True)
class Progress:
    """What a running task last reported: a fraction 0..1 and/or a message."""

    value: float | None
    message: str | None
    at: datetime


@dataclass(frozen=True)
class LogEntry:
    """A log record emitted while a job ran (see :mod:`mongosched.observe.logs`): when,
    its level's name, the logger's name, the message as formatted (with the traceback of
    an exception logged with it) and the attempt that logged it."""

    at: datetime
    level: str
    logger: str
    message: str
    attempt: int


@dataclass(frozen=True)
class LastRun:
    """How the last run of a repeating job ended: for which slot, with which status."""

    slot: datetime
    status: JobStatus
    finished_at: datetime
    error: ErrorInfo | None = None
    failures: int = 0
    """Runs that failed in a row, this one included (0: it did not fail)."""


@dataclass(frozen=True)
class MissedSlots:
    """The slots of a repeating job that never ran: how many in all, the latest of
    them, why it was missed (``"misfire"``: nothing ran it in time; ``"overlap"``: it
    came due while a run still ran) and when that was decided."""

    count: int
    last_slot: datetime
    reason: str
    at: datetime


@dataclass(frozen=True)
class ScheduleEdit:
    """An operator's edit of a declared schedule (:meth:`App.update_schedule`): when,
    and what the code declared before it (a fingerprint, see
    :func:`mongosched.schedules.declaration`), so that a deploy can tell an edit it
    must keep from a declaration that changed since."""

    at: datetime
    declared: str


@dataclass(frozen=True)
class JobRecord:
    """One job as stored. ``id`` is ``None`` only for a job not yet inserted."""

    task: str
    run_at: datetime
    created_at: datetime
    updated_at: datetime
    id: Any = None
    args: tuple[Any, ...] = ()
    kwargs: Mapping[str, Any] = field(default_factory=dict)
    queue: str = "default"
    priority: float = 5
    status: JobStatus = JobStatus.PENDING
    attempts: int = 0
    max_attempts: int = 1
    lease: LeaseInfo | None = None
    repeat: Mapping[str, Any] | None = None
    """The repeat rule as :mod:`mongosched.schedule` describes it, or None."""
    scheduled_for: datetime | None = None
    """For repeating jobs: the nominal slot of the current (or next) run."""
    dedupe_key: str | None = None
    dedupe_scope: str | None = None
    dedupe_until: datetime | None = None
    """The end of its dedupe key's throttle window (``dedupe_window``): until then no
    other job of its task takes the key, even after this one finished (None: none)."""
    dedupe_replace: bool = False
    """Whether scheduling again with its dedupe key while it is pending replaces its
    arguments and due time (``dedupe="replace"``: debounce)."""
    result: Any = None
    error: ErrorInfo | None = None
    progress: Progress | None = None
    cancel_requested: bool = False
    started_at: datetime | None = None
    finished_at: datetime | None = None
    delete_at: datetime | None = None
    last_run: LastRun | None = None
    edit: ScheduleEdit | None = None
    """For a declared schedule an operator edited: the edit (see :class:`ScheduleEdit`)."""
    missed: MissedSlots | None = None
    """For a repeating job: the slots it missed so far (None: none)."""
    trace: Mapping[str, str] | None = None
    """The trace context where it was scheduled (W3C ``traceparent``/``tracestate``),
    with OpenTelemetry installed (:mod:`mongosched.observe.tracing`)."""
    expires_at: datetime | None = None
    """When the job expires if it has not started by then (None: never)."""
    timeout: float | None = None
    """Seconds a run of this job may take (None: the task's timeout)."""
    depends_on: tuple[Any, ...] = ()
    """Ids of the jobs this one waits for (all must complete first)."""
    waiting_for: tuple[Any, ...] = ()
    """Of ``depends_on``, those not yet final (while ``waiting``)."""
    on_dependency_failure: str = "cancel"
    """What a dependency that ends other than completed does to this job: ``"cancel"``
    (it ends cancelled, saying which one) or ``"run"`` (it runs anyway)."""
    has_dependents: bool = False
    """Whether other jobs wait for this one and were not yet released."""
    rate_key: str | None = None
    """The key its task's rate limit is counted under (None: the task's own)."""
    concurrency_key: str | None = None
    """The key its task's concurrency limit is counted under (None: the task's own)."""
    label: str | None = None
    """The name it shows as and is listed, filtered and paused by, where its task runs
    other code on its behalf (a Django tasks-framework job: the Django task's path);
    None: its task's name."""
    errors: tuple[AttemptError, ...] = ()
    """The errors of its attempts that failed, oldest first: the last
    :data:`ERRORS_KEPT` (``error`` is the last one's, or a later cancel's or expiry's)."""
    aging: float | None = None
    """Seconds of waiting that raise its priority by one level (None: it does not age)."""
    fair_key: str | None = None
    """The key its task shares claims fairly among (None: the task does not)."""
    fair_weight: float = 1.0
    """Its key's weight in that share (a key of weight 3 gets three claims to one's one)."""
    rank: float | None = None
    """A ranked job's place in claim order (see :func:`effective_priority`), set by the
    store when the job is inserted (None: an ordinary job, by priority and due time)."""
    fair_at: float | None = None
    """A fair job's fair start (milliseconds; see :mod:`mongosched._core.ranks`), set
    with its rank (None: its task does not share fairly)."""
    history: tuple[AttemptRecord, ...] = ()
    """Its attempts that ended, oldest first, with who ran each (the last
    :data:`ATTEMPTS_KEPT`; across retries by operators)."""
    logs: tuple[LogEntry, ...] = ()
    """What the current occurrence's attempts logged (a capped number; see
    :mod:`mongosched.observe.logs`)."""


@dataclass(frozen=True)
class Settlement:
    """How one write leaves a running job: what the runner, the reaper or a cancel
    decided (see :mod:`mongosched._core.outcome`), for the store to apply as it stands.

    A ``pending`` settlement releases the lease and makes the job due at ``run_at``;
    a final one records ``finished_at`` (``now``) and ``delete_at``. The store takes
    care of what follows from the status alone (the lease, dedupe keys in scope).
    """

    status: JobStatus
    now: datetime
    attempts: int | None = None
    """Attempts of the current occurrence (None: unchanged)."""
    run_at: datetime | None = None
    scheduled_for: datetime | None = None
    result: Any = None
    error: ErrorInfo | None = None
    last_run: LastRun | None = None
    missed: MissedSlots | None = None
    """A repeating job's missed slots, counted anew (None: unchanged)."""
    delete_at: datetime | None = None
    attempt_error: AttemptError | None = None
    """The error of the attempt this write ends, if it failed: added to the job's
    ``errors`` (the oldest beyond :data:`ERRORS_KEPT` dropped)."""
    on_cancel: Settlement | None = None
    """What to write instead if a user asked to cancel the job while it ran (checked in
    the same atomic write): the job ends cancelled, a repeating one for good."""
    logs: tuple[LogEntry, ...] | None = None
    """The job's log entries after this attempt (None: unchanged)."""


@dataclass(frozen=True)
class Renewal:
    """What a heartbeat found: whether the lease is still held, and whether a user
    asked for the job to be cancelled."""

    held: bool
    cancel_requested: bool = False


@dataclass(frozen=True)
class Admission:
    """What taking a flow-control limit found: ``taken``, or not, and then when it may
    free (``free_at``; None when the store cannot tell, as for concurrency)."""

    taken: bool
    free_at: datetime | None = None


@dataclass(frozen=True)
class JobQuery:
    """A filter over jobs: every field given must match (``None``: any). Time ranges
    are half-open: ``*_after`` inclusive, ``*_before`` exclusive."""

    task: str | None = None
    statuses: tuple[JobStatus, ...] | None = None
    queue: str | None = None
    label: str | None = None
    """The job's label (:attr:`JobRecord.label`)."""
    error_type: str | None = None
    """The type name of the job's last error, as stored (``ErrorInfo.type``)."""
    created_after: datetime | None = None
    created_before: datetime | None = None
    finished_after: datetime | None = None
    finished_before: datetime | None = None
    due_after: datetime | None = None
    due_before: datetime | None = None
    """A range of due times (``run_at``)."""


@dataclass(frozen=True)
class PendingChanges:
    """Changes to a pending job (``None``: unchanged)."""

    priority: float | None = None
    queue: str | None = None
    run_at: datetime | None = None
    args: tuple[Any, ...] | None = None
    kwargs: Mapping[str, Any] | None = None


@dataclass(frozen=True)
class ScheduleChanges:
    """A schedule edit as the store applies it (``None``: unchanged)."""

    repeat: Mapping[str, Any] | None = None
    run_at: datetime | None = None
    """The next slot (and ``scheduled_for``), recomputed for a new rule."""
    priority: float | None = None
    queue: str | None = None
    edit: ScheduleEdit | None = None
