"""The job filters users give (:meth:`App.get_jobs`, :meth:`App.count_jobs` and the bulk
operations), checked and turned into a :class:`~mongosched._core.records.JobQuery`."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any, TypedDict

from mongosched._core import validate
from mongosched._core.records import JobQuery, JobStatus
from mongosched.errors import ConfigurationError

__all__ = ["FILTERS", "JobFilters", "StatusFilter", "job_query", "statuses"]

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


def _name(value: Any, operation: str, what: str) -> str | None:
    if value is None:
        return None
    return validate.text(value, what=f"{operation}: {what}", expected=f"a {what} name")


def _time(value: Any, what: str, task: Any) -> datetime | None:
    if value is None:
        return None
    return validate.aware_datetime(value, task=task if isinstance(task, str) else "*", what=what)


class JobFilters(TypedDict, total=False):
    """The filters of :meth:`App.get_jobs`, :meth:`App.count_jobs` and the bulk
    operations (:meth:`App.retry_jobs`, :meth:`App.cancel_jobs`, :meth:`App.purge_jobs`),
    given as keyword arguments: every one given (and not None) must match.

    ``error_type`` is the type name of the job's last error as stored (``job.error.type``,
    e.g. ``"ValueError"``); ``label`` the job's label (a Django task's path, see
    :class:`~mongosched.task.ScheduleOptions`); the time ranges (``due_*``: of
    ``run_at``) are half-open (``*_after`` inclusive,
    ``*_before`` exclusive) and match only jobs that have that time (an unfinished job
    matches no ``finished_*`` range)."""

    task: str | None
    queue: str | None
    label: str | None
    status: StatusFilter
    error_type: str | None
    created_after: datetime | None
    created_before: datetime | None
    finished_after: datetime | None
    finished_before: datetime | None
    due_after: datetime | None
    due_before: datetime | None


FILTERS = tuple(JobFilters.__annotations__)
"""The names of the filters, in order."""


def job_query(what: str, filters: Mapping[str, Any]) -> JobQuery:
    """A query from the filters a user gave to ``what``: every one given must match.
    Raises :class:`~mongosched.errors.ConfigurationError` naming an unknown filter or
    one of the wrong type."""
    unknown = [name for name in filters if name not in FILTERS]
    if unknown:
        raise ConfigurationError(
            f"{what}: unknown filter {unknown[0]!r}; known: {', '.join(FILTERS)}"
        )
    task = filters.get("task")
    error_type = filters.get("error_type")
    if error_type is not None:
        validate.text(
            error_type,
            what=f"{what}: error_type",
            expected="an exception type name (as stored)",
        )
    status = filters.get("status")
    return JobQuery(
        task=_name(task, what, "task"),
        statuses=None if status is None else tuple(dict.fromkeys(statuses(status))),
        queue=_name(filters.get("queue"), what, "queue"),
        label=_name(filters.get("label"), what, "label"),
        error_type=error_type,
        created_after=_time(filters.get("created_after"), "created_after", task),
        created_before=_time(filters.get("created_before"), "created_before", task),
        finished_after=_time(filters.get("finished_after"), "finished_after", task),
        finished_before=_time(filters.get("finished_before"), "finished_before", task),
        due_after=_time(filters.get("due_after"), "due_after", task),
        due_before=_time(filters.get("due_before"), "due_before", task),
    )
