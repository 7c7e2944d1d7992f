"""The job filters users give (:meth:`App.get_jobs`, :meth:`App.count_jobs` and the bulk
operations), checked and turned into a :class:`~mongosched.records.JobQuery`."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import Any

from . import validate
from .errors import ConfigurationError
from .records import JobQuery, JobStatus

__all__ = ["StatusFilter", "job_query", "statuses"]

StatusFilter = str | JobStatus | Iterable[str | JobStatus] | None
"""A status, several, or None (any)."""


def statuses(status: Any) -> list[JobStatus]:
    """The statuses a user named (a name or a :class:`JobStatus`, or several)."""
    items = [status] if isinstance(status, (str, JobStatus)) else list(status)
    out = []
    for item in items:
        try:
            out.append(JobStatus(item))
        except ValueError:
            raise ConfigurationError(
                f"unknown status {item!r}; known: {', '.join(s.value for s in JobStatus)}"
            ) from None
    return out


def _name(value: Any, what: str) -> str | None:
    if value is not None and (not isinstance(value, str) or not value):
        raise ConfigurationError(f"{what} must be a {what} name, not {value!r}")
    return value


def _time(value: Any, what: str, task: Any) -> datetime | None:
    if value is None:
        return None
    return validate.aware_datetime(value, task=task if isinstance(task, str) else "*", what=what)


def job_query(
    *,
    task: str | None = None,
    queue: str | None = None,
    status: StatusFilter = None,
    error_type: str | None = None,
    created_after: datetime | None = None,
    created_before: datetime | None = None,
    finished_after: datetime | None = None,
    finished_before: datetime | None = None,
) -> JobQuery:
    """A query from the filters users give: every one given must match. Raises
    :class:`~mongosched.errors.ConfigurationError` naming a filter of the wrong type."""
    if error_type is not None and (not isinstance(error_type, str) or not error_type):
        raise ConfigurationError(
            f"error_type must be an exception type name (as stored), not {error_type!r}"
        )
    return JobQuery(
        task=_name(task, "task"),
        statuses=None if status is None else tuple(dict.fromkeys(statuses(status))),
        queue=_name(queue, "queue"),
        error_type=error_type,
        created_after=_time(created_after, "created_after", task),
        created_before=_time(created_before, "created_before", task),
        finished_after=_time(finished_after, "finished_after", task),
        finished_before=_time(finished_before, "finished_before", task),
    )
