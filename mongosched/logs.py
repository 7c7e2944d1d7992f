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
from typing import Any

from .records import JobRecord

__all__ = ["FIELDS", "JobFields", "bind", "bound", "fields", "unbind"]

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

        handler.addFilter(mongosched.logs.JobFields())
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
