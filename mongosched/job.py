"""Jobs as seen from outside (:class:`Job`) and from inside a running task
(:class:`JobContext`, :func:`current_job`)."""

from __future__ import annotations

import contextvars
import enum
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any, Protocol

from .errors import JobNotFound, WaitTimeout

if TYPE_CHECKING:
    from .app import App

__all__ = ["ErrorInfo", "Job", "JobContext", "JobStatus", "current_job"]


class JobStatus(str, enum.Enum):
    """Where a job is in its life.

    ``pending`` → ``running`` → one of ``completed``, ``failed``, ``cancelled``
    (the *final* statuses). A retry or the next slot of a repeating job takes it from
    ``running`` back to ``pending``.
    """

    PENDING = "pending"
    RUNNING = "running"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"

    @property
    def is_final(self) -> bool:
        return self in FINAL_STATUSES

    def __str__(self) -> str:
        return self.value


FINAL_STATUSES = frozenset({JobStatus.COMPLETED, JobStatus.FAILED, JobStatus.CANCELLED})


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
        bare type for errors that are no exception class (``LeaseExpired``)."""
        return f"{self.module}.{self.type}" if self.module else self.type

    @classmethod
    def from_document(cls, doc: Mapping[str, Any] | None) -> ErrorInfo | None:
        if not doc:
            return None
        return cls(
            str(doc.get("type", "")),
            str(doc.get("message", "")),
            doc.get("traceback"),
            doc.get("module"),
        )

    def __str__(self) -> str:
        return f"{self.type}: {self.message}"


def _aware(value: Any) -> Any:
    """Datetimes read from MongoDB are UTC; make naive ones (from a client without
    ``tz_aware``) say so."""
    if isinstance(value, datetime) and value.tzinfo is None:
        return value.replace(tzinfo=timezone.utc)
    return value


class Job:
    """A read-only view of one job document, as of when it was read.

    :meth:`refresh` reads it again; :meth:`wait` blocks until it reaches a final status.
    Change a job through the app (:meth:`App.cancel`, :meth:`App.update_job`, …).
    """

    __slots__ = ("_app", "_doc")

    def __init__(self, app: App | None, doc: Mapping[str, Any]) -> None:
        self._app = app
        self._doc = dict(doc)

    # Identity and payload -------------------------------------------------------
    @property
    def id(self) -> Any:
        """The job's ``_id`` (an ObjectId; a stable string for decorator schedules)."""
        return self._doc["_id"]

    @property
    def task(self) -> str:
        return str(self._doc["task"])

    @property
    def args(self) -> list[Any]:
        return list(self._doc.get("args") or [])

    @property
    def kwargs(self) -> dict[str, Any]:
        return dict(self._doc.get("kwargs") or {})

    @property
    def queue(self) -> str:
        return str(self._doc.get("queue", "default"))

    @property
    def priority(self) -> int:
        return int(self._doc.get("priority", 5))

    # State ---------------------------------------------------------------------
    @property
    def status(self) -> JobStatus:
        return JobStatus(self._doc["status"])

    @property
    def is_finished(self) -> bool:
        """Whether the job has reached a final status."""
        return self.status.is_final

    @property
    def attempts(self) -> int:
        """Attempts started for the current occurrence."""
        return int(self._doc.get("attempts", 0))

    @property
    def max_attempts(self) -> int:
        return int(self._doc.get("max_attempts", 1))

    @property
    def result(self) -> Any:
        return self._doc.get("result")

    @property
    def error(self) -> ErrorInfo | None:
        return ErrorInfo.from_document(self._doc.get("error"))

    @property
    def progress(self) -> dict[str, Any] | None:
        """``{"value": float | None, "message": str | None, "at": datetime}``."""
        progress = self._doc.get("progress")
        return dict(progress) if progress else None

    @property
    def cancel_requested(self) -> bool:
        return bool(self._doc.get("cancel_requested"))

    @property
    def dedupe_key(self) -> str | None:
        return self._doc.get("dedupe_key")

    @property
    def repeat(self) -> dict[str, Any] | None:
        """The repeat rule (``{"cron", "timezone"}`` or ``{"every"}``), or None."""
        repeat = self._doc.get("repeat")
        return dict(repeat) if repeat else None

    @property
    def last_run(self) -> dict[str, Any] | None:
        """For repeating jobs: slot, status, finish time and error of the last run."""
        last = self._doc.get("last_run")
        return dict(last) if last else None

    @property
    def lease(self) -> dict[str, Any] | None:
        lease = self._doc.get("lease")
        return {k: _aware(v) for k, v in lease.items()} if lease else None

    # Times -----------------------------------------------------------------------
    def _time(self, name: str) -> datetime | None:
        value = self._doc.get(name)
        return _aware(value) if value is not None else None

    @property
    def run_at(self) -> datetime | None:
        return self._time("run_at")

    @property
    def scheduled_for(self) -> datetime | None:
        """For repeating jobs: the nominal slot of the current (or next) run."""
        return self._time("scheduled_for")

    @property
    def created_at(self) -> datetime | None:
        return self._time("created_at")

    @property
    def updated_at(self) -> datetime | None:
        return self._time("updated_at")

    @property
    def started_at(self) -> datetime | None:
        return self._time("started_at")

    @property
    def finished_at(self) -> datetime | None:
        return self._time("finished_at")

    @property
    def expire_at(self) -> datetime | None:
        return self._time("expire_at")

    # Raw document and refresh ---------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        """A copy of the document as read."""
        return dict(self._doc)

    def refresh(self) -> Job:
        """Read the job again; returns ``self``. Raises :class:`JobNotFound` if it is gone."""
        app = self._require_app()
        doc = app._reader.get(self.id)
        if doc is None:
            raise JobNotFound(f"job {self.id} no longer exists")
        self._doc = dict(doc)
        return self

    def wait(self, timeout: float | None = None, *, interval: float = 0.05) -> Job:
        """Block until the job reaches a final status; returns ``self``.

        Polls with a growing interval (from ``interval`` up to one second). Raises
        :class:`~mongosched.errors.WaitTimeout` after ``timeout`` seconds.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        pause = interval
        while not self.refresh().is_finished:
            if deadline is not None:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise WaitTimeout(
                        f"job {self.id} ({self.task}) still {self.status.value} after {timeout} s"
                    )
                pause = min(pause, remaining)
            time.sleep(pause)
            pause = min(pause * 1.5, 1.0)
        return self

    def _require_app(self) -> App:
        if self._app is None:
            raise RuntimeError("this Job is not bound to an App")
        return self._app

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Job) and other.id == self.id

    def __hash__(self) -> int:
        return hash(self.id)

    def __repr__(self) -> str:
        return f"<Job {self.id} {self.task} {self._doc.get('status')}>"


class _LeaseHandle(Protocol):
    """What a :class:`JobContext` needs from the runner that holds the job's lease."""

    def renew(self) -> bool: ...

    def write_progress(self, value: float | None, message: str | None) -> bool: ...


class JobContext:
    """The running job, as its task sees it through :func:`current_job`.

    Made by the runner (or by eager mode); not constructed by users.
    """

    def __init__(
        self,
        doc: Mapping[str, Any],
        lease: _LeaseHandle | None = None,
        app: App | None = None,
    ) -> None:
        self.id: Any = doc["_id"]
        self.task: str = doc["task"]
        self.attempt: int = int(doc.get("attempts", 1))
        self.max_attempts: int = int(doc.get("max_attempts", 1))
        self.args: list[Any] = list(doc.get("args") or [])
        self.kwargs: dict[str, Any] = dict(doc.get("kwargs") or {})
        self.queue: str = doc.get("queue", "default")
        self.scheduled_for: datetime | None = _aware(doc.get("scheduled_for"))
        self._lease = lease
        self._app = app
        self._cancelled = threading.Event()
        self._reason: str | None = None

    def is_cancelled(self) -> bool:
        """True once the job should stop: cancelled by a user, timed out, its runner
        shutting down, or its lease lost (another worker may now run it)."""
        return self._cancelled.is_set()

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
            raise ValueError(
                f"task {self.task!r}: progress value must be within 0..1, not {value!r}"
            )
        if message is not None and not isinstance(message, str):
            raise ValueError(f"task {self.task!r}: progress message must be a str")
        if self._lease is None:
            return True
        return self._lease.write_progress(None if value is None else float(value), message)

    def _cancel(self, reason: str) -> None:
        if not self._cancelled.is_set():
            self._reason = reason
            self._cancelled.set()

    def __repr__(self) -> str:
        return f"<JobContext {self.id} {self.task} attempt {self.attempt}>"


_current: contextvars.ContextVar[JobContext | None] = contextvars.ContextVar(
    "mongosched_current_job", default=None
)


def current_job() -> JobContext | None:
    """The job the calling thread is running, or ``None`` outside a job."""
    return _current.get()
