"""Logs and jobs, both ways.

**Job fields on log records**: every record the package logs about a job carries
``job_id``, ``task`` and ``attempt`` as attributes (``extra`` fields), for structured
log handlers (``%(job_id)s`` in a format, a JSON formatter's extra fields).
Records logged in the thread running a job (the runner's own, and with
:class:`JobFields` on a handler, the task's too) get them from the job bound to that
thread (:func:`bound`); the runner's records about a job from other threads (reaper,
heartbeats, claims) pass them as ``extra`` (:func:`fields`).

**Log records kept with the job** (:class:`Capture`): the records that the
:mod:`logging` module makes in the thread running a job, at the task's capture level
(``@app.task(capture_logs=...)``, INFO by default) or above, are kept with the job and
written with its outcome, in the same write (:attr:`Job.logs <mongosched.Job.logs>`).
A record exists only if its logger's level lets it through, as for any handler. They
are taken where records are made (:func:`logging.setLogRecordFactory`, the factory in
place kept and called first), so no handler is added anywhere and a task that logs
nothing costs the setting of a context variable. The package's own records are left
out. A job keeps at most :data:`MAX_RECORDS` records and :data:`MAX_BYTES` of text
(in UTF-8) for its current occurrence (its attempts: a repeating job's next slot, or an
operator's retry, starts afresh); past that, a last entry says how many were cut.
"""

from __future__ import annotations

import contextvars
import logging
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING, Any

from mongosched._core.records import JobRecord, LogEntry
from mongosched.errors import ConfigurationError, StoreError

if TYPE_CHECKING:
    from mongosched._core.outcome import Decision

__all__ = [
    "FIELDS",
    "MAX_BYTES",
    "MAX_RECORDS",
    "Capture",
    "Contained",
    "JobFields",
    "bind",
    "bound",
    "capture_level",
    "capturing",
    "fields",
    "log_decision",
    "unbind",
    "uncapture",
]

_runner_log = logging.getLogger("mongosched.runner")

FIELDS = ("job_id", "task", "attempt")

_current: contextvars.ContextVar[JobRecord | None] = contextvars.ContextVar(
    "mongosched_job_fields", default=None
)
"""The job bound to this thread: its fields are made only when a record is logged."""


def fields(record: JobRecord) -> dict[str, Any]:
    """The job's fields for a log record's ``extra``."""
    return {"job_id": str(record.id), "task": record.task, "attempt": record.attempts}


def bind(record: JobRecord) -> contextvars.Token[JobRecord | None]:
    """From now on, records logged in this thread carry ``record``'s fields (until
    :func:`unbind` with the token returned)."""
    return _current.set(record)


def unbind(token: contextvars.Token[JobRecord | None]) -> None:
    _current.reset(token)


@contextmanager
def bound(record: JobRecord) -> Iterator[None]:
    """Within the block, records logged in this thread carry ``record``'s fields."""
    token = bind(record)
    try:
        yield
    finally:
        unbind(token)


class Contained:
    """A block whose errors are logged, never raised: one it expects (``expected``, a
    database error by default) as a warning ending with its message, anything else
    with its traceback. ``args`` fill both messages (the expected one's last ``%s`` is
    the error); ``record``: the job whose fields the lines carry.

    ::

        with Contained(log, "runner %s: failed: %s", "runner %s: failed", name):
            ...
    """

    __slots__ = ("log", "warning", "message", "args", "record", "expected")

    def __init__(
        self,
        log: logging.Logger,
        warning: str,
        message: str,
        *args: Any,
        record: JobRecord | None = None,
        expected: type[Exception] = StoreError,
    ) -> None:
        self.log = log
        self.warning = warning
        self.message = message
        self.args = args
        self.record = record
        self.expected = expected

    def __enter__(self) -> None:
        return None

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: Any
    ) -> bool:
        if exc is None or not isinstance(exc, Exception):
            return False
        extra = None if self.record is None else fields(self.record)
        if isinstance(exc, self.expected):
            self.log.warning(self.warning, *self.args, exc, extra=extra)
        else:
            self.log.error(self.message, *self.args, exc_info=exc, extra=extra)
        return True


class JobFields(logging.Filter):
    """Adds the fields of the job bound to the current thread to each record that has
    not got them. The package's loggers have one; add one to a handler to give the
    records of your tasks' own loggers the same fields::

        handler.addFilter(mongosched.observe.logs.JobFields())
    """

    def filter(self, record: logging.LogRecord) -> bool:
        current = _current.get()
        if current is not None:
            for name, value in fields(current).items():
                if not hasattr(record, name):
                    setattr(record, name, value)
        return True


_filter = JobFields()
for _name in ("mongosched", "mongosched.runner", "mongosched.store"):
    logging.getLogger(_name).addFilter(_filter)


# Log records kept with the job ---------------------------------------------------------------
MAX_RECORDS = 200
"""Log records a job keeps (for its current occurrence)."""
MAX_BYTES = 64 * 1024
"""Bytes of text (messages and logger names, in UTF-8, as stored) a job keeps
(likewise): with :data:`MAX_RECORDS`, what bounds the logs within the room a job's
document keeps for its outcome (``store.codec.OUTCOME_ROOM``)."""
_OVERHEAD = 32
"""What an entry counts for beyond its text (its time, level and attempt)."""


def capture_level(value: object, task: str) -> int | None:
    """The level from which a task keeps its jobs' log records, from its
    ``capture_logs`` option: True (INFO), False (none: None) or a level (a number, as
    ``logging.DEBUG``)."""
    if value is True:
        return logging.INFO
    if value is False:
        return None
    if isinstance(value, int) and value >= 0:
        return value
    raise ConfigurationError(
        f"task {task!r}: capture_logs must be True, False or a logging level "
        f"(as logging.DEBUG), not {value!r}"
    )


def _size(entry: LogEntry) -> int:
    return _bytes(entry.message) + _bytes(entry.logger) + _OVERHEAD


def _bytes(text: str) -> int:
    """The length of ``text`` in UTF-8."""
    return len(text) if text.isascii() else len(text.encode("utf-8"))


def _text(value: str) -> str:
    """``value`` as BSON can store it (a lone surrogate made a replacement mark)."""
    try:
        value.encode("utf-8")
        return value
    except UnicodeEncodeError:
        return value.encode("utf-8", "replace").decode("utf-8")


class Capture:
    """The log records of one attempt of a job, on top of what its earlier attempts
    of the same occurrence kept (see the module). Made for every run: it does nothing
    until the first record."""

    __slots__ = ("record", "level", "new", "kept", "size", "cut")

    def __init__(self, record: JobRecord, level: int) -> None:
        self.record = record
        self.level = level
        self.new: list[LogEntry] | None = None
        self.kept: tuple[LogEntry, ...] = ()
        self.size = 0
        self.cut = 0

    def _start(self) -> list[LogEntry]:
        """At the first record: what the occurrence's earlier attempts kept (a first
        attempt starts afresh)."""
        record = self.record
        if record.attempts > 1 and record.logs:
            self.kept = record.logs
            self.size = sum(_size(e) for e in record.logs)
        self.new = []
        return self.new

    def add(self, record: logging.LogRecord) -> None:
        new = self.new if self.new is not None else self._start()
        if len(self.kept) + len(new) >= MAX_RECORDS:
            self.cut += 1
            return
        name = _text(record.name)
        room = MAX_BYTES - self.size - _bytes(name) - _OVERHEAD
        if room <= 0:
            self.cut += 1
            return
        message = record.getMessage()
        if record.exc_info and record.exc_info[0] is not None:
            message += "\n" + _formatter.formatException(record.exc_info)
        elif record.exc_text:
            message += "\n" + record.exc_text
        if record.stack_info:
            message += "\n" + record.stack_info
        message = _text(message[: room + 1])  # no more characters than bytes kept
        if _bytes(message) > room:  # the last that fits, cut short
            kept = message.encode("utf-8")[: max(0, room - 6)]
            message = kept.decode("utf-8", "ignore") + " [cut]"
        entry = LogEntry(
            at=datetime.fromtimestamp(int(record.created * 1000) / 1000, timezone.utc),
            level=record.levelname,
            logger=name,
            message=message,
            attempt=self.record.attempts,
        )
        self.size += _size(entry)
        new.append(entry)

    def result(self) -> tuple[LogEntry, ...] | None:
        """The job's entries to write with the outcome, or None when they stay as
        stored (nothing logged, and nothing of an earlier occurrence to clear)."""
        if self.new is None:
            return () if self.record.attempts <= 1 and self.record.logs else None
        entries = [*self.kept, *self.new]
        if self.cut:
            entries.append(
                LogEntry(
                    at=entries[-1].at if entries else datetime.now(timezone.utc),
                    level="WARNING",
                    logger="mongosched",
                    message=f"{self.cut} more log record(s) cut: a job keeps at most "
                    f"{MAX_RECORDS} records and {MAX_BYTES // 1024} KiB of text",
                    attempt=self.record.attempts,
                )
            )
        return tuple(entries)


_formatter = logging.Formatter()
_capture: contextvars.ContextVar[Capture | None] = contextvars.ContextVar(
    "mongosched_capture", default=None
)
_previous: Callable[..., logging.LogRecord] | None = None
_install_lock = threading.Lock()


def _own(name: str) -> bool:
    return name == "mongosched" or name.startswith("mongosched.")


def _make_record(*args: Any, **kwargs: Any) -> logging.LogRecord:
    """The record factory: the one in place before makes the record; a job's capture
    in this thread, if any, keeps it. Keeping it never fails the call that logs."""
    assert _previous is not None
    record = _previous(*args, **kwargs)
    capture = _capture.get()
    if capture is not None and record.levelno >= capture.level and not _own(record.name):
        try:
            capture.add(record)
        except Exception:  # a message whose arguments do not format: as a handler would
            capture.cut += 1
    return record


def _install() -> None:
    """Put :func:`_make_record` in place, once per process."""
    global _previous
    with _install_lock:
        if _previous is None:
            _previous = logging.getLogRecordFactory()
            logging.setLogRecordFactory(_make_record)


def capturing(capture: Capture) -> contextvars.Token[Capture | None]:
    """From now on, records made in this thread go to ``capture`` (until
    :func:`uncapture` with the token returned)."""
    if _previous is None:
        _install()
    return _capture.set(capture)


def uncapture(token: contextvars.Token[Capture | None]) -> None:
    _capture.reset(token)


def _level(decision: Decision) -> int:
    """Completions, cancels and shutdown's give-backs at INFO; a failed attempt that
    retries at WARNING (one line); a job that failed for good at ERROR."""
    if decision.event == "job:retry":
        return logging.INFO if decision.error is None else logging.WARNING
    if decision.event in ("job:success", "job:cancel"):
        return logging.INFO
    return logging.ERROR


def log_decision(record: JobRecord, task: str, decision: Decision, seconds: float) -> None:
    """Log what became of a run of ``record`` (as claimed) of ``task``, with the job's
    fields: one line each, but a job that failed for good logs its traceback (once, at
    ERROR; where its error was raised). Nothing is built when the level is off."""
    level = _level(decision)
    if not _runner_log.isEnabledFor(level):  # the usual case at volume: no fields to build
        return
    job = record.id
    error = decision.error
    extra = fields(record)
    if decision.event == "job:success":
        _runner_log.info("job %s (%s) completed in %.3f s", job, task, seconds, extra=extra)
    elif decision.event == "job:cancel":
        _runner_log.info("job %s (%s) cancelled while running", job, task, extra=extra)
    elif decision.event == "job:retry" and error is None:
        _runner_log.info(
            "job %s (%s) interrupted by shutdown; back to pending", job, task, extra=extra
        )
    elif decision.event == "job:retry":
        delay = decision.delay or timedelta(0)
        _runner_log.warning(
            "job %s (%s) attempt %d/%d failed (%s: %s); retrying in %.1f s",
            job,
            task,
            record.attempts,
            record.max_attempts,
            type(error).__name__,
            error,
            delay.total_seconds(),
            extra=extra,
        )
    else:
        _runner_log.error(
            "job %s (%s) failed on attempt %d/%d: %s: %s",
            job,
            task,
            record.attempts,
            record.max_attempts,
            type(error).__name__,
            error,
            # A traceback only where the error was raised: one the runner made (a
            # timeout, a lost lease) would print as a lone line without its header.
            exc_info=None
            if error is None or error.__traceback__ is None
            else (type(error), error, error.__traceback__),
            extra=extra,
        )
