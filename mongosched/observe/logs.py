"""Job fields on log records: every record the package logs about a job carries
``job_id``, ``task`` and ``attempt`` as attributes (``extra`` fields), for structured
log handlers (``%(job_id)s`` in a format, a JSON formatter's extra fields).

Records logged in the thread running a job (the runner's own, and with
:class:`JobFields` on a handler, the task's too) get them from the job bound to that
thread (:func:`bound`); the runner's records about a job from other threads (reaper,
heartbeats, claims) pass them as ``extra`` (:func:`fields`).
"""

from __future__ import annotations

import contextvars
import logging
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from mongosched._core.records import JobRecord

if TYPE_CHECKING:
    from mongosched._core.outcome import Decision
    from mongosched.runner.claim import Claim

__all__ = ["FIELDS", "JobFields", "bind", "bound", "fields", "log_decision", "unbind"]

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


def _level(decision: Decision) -> int:
    """Completions, cancels and shutdown's give-backs at INFO; a failed attempt that
    retries at WARNING (one line); a job that failed for good at ERROR."""
    if decision.event == "job:retry":
        return logging.INFO if decision.error is None else logging.WARNING
    if decision.event in ("job:success", "job:cancel"):
        return logging.INFO
    return logging.ERROR


def log_decision(claim: Claim, decision: Decision, seconds: float) -> None:
    """Log what became of a run, with the job's fields: one line each, but a job that
    failed for good logs its traceback (once, at ERROR). Nothing is built when the
    level is off."""
    level = _level(decision)
    if not _runner_log.isEnabledFor(level):  # the usual case at volume: no fields to build
        return
    job, task, record = claim.job_id, claim.task.name, claim.record
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
            exc_info=None if error is None else (type(error), error, error.__traceback__),
            extra=extra,
        )
