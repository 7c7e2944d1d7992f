"""Jobs as seen from outside (:class:`Job`) and from inside a running task
(:class:`JobContext`, :func:`current_job`)."""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import time
from collections.abc import Iterator
from datetime import datetime
from typing import TYPE_CHECKING, Any, Generic, Protocol, cast

from mongosched._core import validate
from mongosched._core.records import (
    AttemptError,
    AttemptRecord,
    ErrorInfo,
    JobRecord,
    JobStatus,
    LastRun,
    LeaseInfo,
    LogEntry,
    MissedSlots,
    Progress,
)
from mongosched.errors import ConfigurationError, JobNotFound, WaitTimeout

if TYPE_CHECKING:
    # A default (PEP 696) for the type checker only: a bare ``Job`` is ``Job[Any]``.
    from typing_extensions import TypeVar

    from mongosched.store import Session
    from mongosched.transaction import Transaction

    R = TypeVar("R", default=Any)
else:
    from typing import TypeVar

    R = TypeVar("R")

__all__ = [
    "AttemptError",
    "AttemptRecord",
    "ErrorInfo",
    "LogEntry",
    "Job",
    "JobContext",
    "JobSource",
    "JobStatus",
    "LeaseHandle",
    "Suspended",
    "as_current",
    "current_job",
]


class JobSource(Protocol):
    """Where a :class:`Job` reads itself again (a store)."""

    def get(self, job_id: Any) -> JobRecord | None: ...


class Job(Generic[R]):
    """A read-only view of one job, as of when it was read.

    :meth:`refresh` reads it again; :meth:`wait` blocks until it reaches a final status.
    Change a job through the app (:meth:`App.cancel`, :meth:`App.update_job`, …).

    ``Job[R]`` is a job of a task whose function returns ``R`` (what ``task.schedule()``
    returns); a bare ``Job`` is ``Job[Any]``.
    """

    __slots__ = ("_record", "_source")

    def __init__(self, record: JobRecord, source: JobSource | None = None) -> None:
        self._record = record
        self._source = source

    @property
    def record(self) -> JobRecord:
        """The stored job as read (an immutable value)."""
        return self._record

    # Identity and payload -------------------------------------------------------
    @property
    def id(self) -> Any:
        """The job's id (an ObjectId; a stable string for decorator schedules)."""
        return self._record.id

    @property
    def task(self) -> str:
        return self._record.task

    @property
    def args(self) -> list[Any]:
        return list(self._record.args)

    @property
    def kwargs(self) -> dict[str, Any]:
        return dict(self._record.kwargs)

    @property
    def queue(self) -> str:
        return self._record.queue

    @property
    def priority(self) -> float:
        return self._record.priority

    # State ---------------------------------------------------------------------
    @property
    def status(self) -> JobStatus:
        return self._record.status

    @property
    def is_finished(self) -> bool:
        """Whether the job has reached a final status."""
        return self._record.status.is_final

    @property
    def attempts(self) -> int:
        """Attempts started for the current occurrence."""
        return self._record.attempts

    @property
    def max_attempts(self) -> int:
        return self._record.max_attempts

    @property
    def result(self) -> R | None:
        """What the function returned, once a run returned (None until then; for a
        repeating job, the last run's), as stored: through BSON, so a tuple comes back
        as a list."""
        return cast("R | None", self._record.result)

    @property
    def error(self) -> ErrorInfo | None:
        return self._record.error

    @property
    def label(self) -> str | None:
        """The name it shows as and is filtered and paused by, where its task runs other
        code on its behalf (a Django task's path); None: its task's name."""
        return self._record.label

    @property
    def call(self) -> tuple[list[Any], dict[str, Any]]:
        """The arguments it shows with: its own; for a labelled job (a Django task's),
        those of the code its task runs on its behalf (the ``args`` and ``kwargs`` it
        passes on), as the dashboard and ``jobs show`` show them."""
        kwargs = self._record.kwargs
        inner_args, inner_kwargs = kwargs.get("args"), kwargs.get("kwargs")
        if self.label is not None and isinstance(inner_args, list):
            return list(inner_args), dict(inner_kwargs) if isinstance(inner_kwargs, dict) else {}
        return list(self._record.args), dict(kwargs)

    @property
    def label_priority(self) -> int | None:
        """For a labelled job whose framework has priorities of its own (a Django
        task's: -100 .. 100, higher first), that priority; None otherwise. What orders
        the job's claims is :attr:`priority`, mongosched's, mapped from it."""
        value = self._record.kwargs.get("django_priority") if self.label is not None else None
        return value if isinstance(value, int) and not isinstance(value, bool) else None

    @property
    def errors(self) -> tuple[AttemptError, ...]:
        """The errors of its attempts that failed (each with the attempt's number and
        time), oldest first: the last ten. A cancel's or an expiry's error is only
        :attr:`error`."""
        return self._record.errors

    @property
    def history(self) -> tuple[AttemptRecord, ...]:
        """Its attempts that ended, oldest first (the last twenty, across retries): each
        with its number, the runner that ran it (``runner``, ``host``, ``pid``), when it
        started and ended, and the status it left the job in (``pending``: retried)."""
        return self._record.history

    @property
    def progress(self) -> Progress | None:
        """The last progress the task reported: ``value`` (0..1), ``message``, ``at``."""
        return self._record.progress

    @property
    def logs(self) -> tuple[LogEntry, ...]:
        """The log records its current occurrence's attempts made while they ran
        (``at``, ``level``, ``logger``, ``message``, ``attempt``), written with each
        attempt's outcome: INFO and up unless the task says otherwise
        (``capture_logs``), at most 200 records and 64 KiB (a last entry says how
        many were cut). See :mod:`mongosched.observe.logs`."""
        return self._record.logs

    @property
    def cancel_requested(self) -> bool:
        return self._record.cancel_requested

    @property
    def dedupe_key(self) -> str | None:
        return self._record.dedupe_key

    @property
    def repeat(self) -> dict[str, Any] | None:
        """The repeat rule (``{"cron", "timezone"}`` or ``{"every"}``), or None."""
        return dict(self._record.repeat) if self._record.repeat else None

    @property
    def last_run(self) -> LastRun | None:
        """For repeating jobs: slot, status, finish time and error of the last run."""
        return self._record.last_run

    @property
    def missed(self) -> MissedSlots | None:
        """For repeating jobs: the slots it missed so far (how many, the latest, why),
        or None."""
        return self._record.missed

    @property
    def lease(self) -> LeaseInfo | None:
        """Owner, token and expiry of the lease while the job runs."""
        return self._record.lease

    # Times -----------------------------------------------------------------------
    @property
    def run_at(self) -> datetime:
        return self._record.run_at

    @property
    def scheduled_for(self) -> datetime | None:
        """For repeating jobs: the nominal slot of the current (or next) run."""
        return self._record.scheduled_for

    @property
    def created_at(self) -> datetime:
        return self._record.created_at

    @property
    def updated_at(self) -> datetime:
        return self._record.updated_at

    @property
    def started_at(self) -> datetime | None:
        return self._record.started_at

    @property
    def finished_at(self) -> datetime | None:
        return self._record.finished_at

    @property
    def delete_at(self) -> datetime | None:
        """When a finished job is deleted (its retention), or None.

        Stored as the job document's ``expire_at`` field, on which the TTL index is built.
        """
        return self._record.delete_at

    # Flow control ----------------------------------------------------------------
    @property
    def expires_at(self) -> datetime | None:
        """When the job expires if it has not started by then (``configure(expires=...)``)."""
        return self._record.expires_at

    @property
    def timeout(self) -> float | None:
        """Its own timeout in seconds (``configure(timeout=...)``), or None: the task's."""
        return self._record.timeout

    @property
    def depends_on(self) -> list[Any]:
        """Ids of the jobs it waits for (``configure(depends_on=...)``)."""
        return list(self._record.depends_on)

    @property
    def waiting_for(self) -> list[Any]:
        """While ``waiting``: those of :attr:`depends_on` that have not completed yet."""
        return list(self._record.waiting_for)

    @property
    def rate_key(self) -> str | None:
        """The key its task's rate limit counts it under (``rate_key=``), or None."""
        return self._record.rate_key

    @property
    def concurrency_key(self) -> str | None:
        """The key its task's concurrency limit counts it under, or None."""
        return self._record.concurrency_key

    # As data, and read again ------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        """The job as plain data (nested values as dicts, the status as its name)."""
        data = dataclasses.asdict(self._record)
        data["status"] = self._record.status.value
        if self._record.last_run is not None:
            data["last_run"]["status"] = self._record.last_run.status.value
        data["args"] = list(self._record.args)
        for attempt in data["history"]:
            attempt["status"] = attempt["status"].value
        return data

    def refresh(self) -> Job[R]:
        """Read the job again; returns ``self``. Raises :class:`JobNotFound` if it is gone."""
        if self._source is None:
            raise JobNotFound(f"job {self.id} ({self.task}) is not bound to an app to read from")
        record = self._source.get(self.id)
        if record is None:
            raise JobNotFound(f"job {self.id} no longer exists")
        self._record = record
        return self

    def wait(self, timeout: float | None = None, *, interval: float = 0.05) -> Job[R]:
        """Block until the job reaches a final status; returns ``self``.

        Polls with a growing interval (from ``interval`` up to one second). Raises
        :class:`~mongosched.errors.WaitTimeout` after ``timeout`` seconds.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        delay = interval
        while not self.refresh().is_finished:
            if deadline is not None:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise WaitTimeout(
                        f"job {self.id} ({self.task}) still {self.status.value} after {timeout} s"
                    )
                delay = min(delay, remaining)
            time.sleep(delay)
            delay = min(delay * 1.5, 1.0)
        return self

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Job) and other.id == self.id

    def __hash__(self) -> int:
        return hash(self.id)

    def __repr__(self) -> str:
        return f"<Job {self.id} {self.task} {self._record.status.value}>"


class LeaseHandle(Protocol):
    """What a :class:`JobContext` needs from the runner's claim on the job."""

    def renew(self) -> bool: ...

    def write_progress(self, value: float | None, message: str | None) -> bool: ...

    @property
    def record(self) -> JobRecord: ...

    def finish(self) -> None: ...

    def hold(self, seconds: float) -> bool: ...

    def renew_again(self) -> None: ...


class Suspended(BaseException):
    """A durable workflow's run stopped after writing its job back to wait (a sleep, a
    wait for an event, a gather: see :mod:`mongosched.workflow`): its runner writes no
    outcome. A :class:`BaseException`, so a task's ``except Exception`` lets it pass."""


class JobContext:
    """The running job, as its task sees it through :func:`current_job`.

    Made by the runner (or by eager mode); not constructed by users.
    """

    def __init__(self, record: JobRecord, lease: LeaseHandle | None = None) -> None:
        self.id: Any = record.id
        self.task: str = record.task
        self.attempt: int = record.attempts
        self.max_attempts: int = record.max_attempts
        self.args: list[Any] = list(record.args)
        self.kwargs: dict[str, Any] = dict(record.kwargs)
        self.queue: str = record.queue
        self.scheduled_for: datetime | None = record.scheduled_for
        self._lease = lease
        self._reason: str | None = None  # set once: cancelled (nobody waits on it)
        self.transaction: Transaction | None = None
        """The transaction a transactional task's run writes in, with its outcome (see
        :doc:`/transactions`); None for other tasks."""

    @property
    def session(self) -> Session | None:
        """The pymongo session of :attr:`transaction`, for the task's own writes
        (``orders.update_one(..., session=current_job().session)``): they commit if
        and only if the job completes. None for a task that is not transactional, and
        on ``memory://`` (pymongo takes None as "no session")."""
        return None if self.transaction is None else self.transaction.session

    def is_cancelled(self) -> bool:
        """True once the job should stop: cancelled by a user, timed out, its runner
        shutting down, or its lease lost (another runner may now run it)."""
        return self._reason is not None

    @property
    def cancel_reason(self) -> str | None:
        """Why :meth:`is_cancelled` is true: ``"cancelled"``, ``"timeout"``,
        ``"shutdown"`` or ``"lease_lost"``."""
        return self._reason

    def heartbeat(self) -> bool:
        """Renew the lease now (the runner also does it in the background).
        Returns False when the lease is lost."""
        if self._lease is None:
            return not self.is_cancelled()
        return self._lease.renew()

    def set_progress(self, value: float | None = None, message: str | None = None) -> bool:
        """Record progress (a fraction 0..1 and/or a message) on the job, visible as
        :attr:`Job.progress`. Returns False when the lease is lost (nothing written)."""
        if value is not None and not (
            isinstance(value, (int, float)) and not isinstance(value, bool) and 0 <= value <= 1
        ):
            raise ConfigurationError(
                f"task {self.task!r}: progress value must be within 0..1, not {value!r}"
            )
        if message is not None:
            validate.text(
                message, what=f"task {self.task!r}: progress message", empty=True, maximum=65536
            )
        if self._lease is None:
            return True
        return self._lease.write_progress(None if value is None else float(value), message)

    @property
    def lease_record(self) -> JobRecord | None:
        """The job as its runner claimed it, lease included (None without a runner's
        lease: eager mode)."""
        return None if self._lease is None else self._lease.record

    def finish_lease(self) -> None:
        """Stop renewing the lease: its holder is about to release it."""
        if self._lease is not None:
            self._lease.finish()

    def hold_lease(self, seconds: float) -> bool:
        """Renew the lease for ``seconds`` and stop the heartbeat's renewals until
        :meth:`renew_lease_again`: a transaction is to write the job's document. False once
        the lease is lost (True without a runner's lease)."""
        return True if self._lease is None else self._lease.hold(seconds)

    def renew_lease_again(self) -> None:
        """The heartbeat renews the lease again (after :meth:`hold_lease`)."""
        if self._lease is not None:
            self._lease.renew_again()

    def cancel(self, reason: str) -> None:
        """Mark the job as to stop, for ``reason`` (the runner's; the first reason
        stays)."""
        if self._reason is None:
            self._reason = reason

    def __repr__(self) -> str:
        return f"<JobContext {self.id} {self.task} attempt {self.attempt}>"


_current: contextvars.ContextVar[JobContext | None] = contextvars.ContextVar(
    "mongosched_current_job", default=None
)


def current_job() -> JobContext | None:
    """The job the calling thread is running, or ``None`` outside a job."""
    return _current.get()


@contextlib.contextmanager
def as_current(ctx: JobContext) -> Iterator[JobContext]:
    """Make ``ctx`` what :func:`current_job` returns in this thread, for the block."""
    token = _current.set(ctx)
    try:
        yield ctx
    finally:
        _current.reset(token)
