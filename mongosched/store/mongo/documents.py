"""The job document: how a :class:`~mongosched._core.records.JobRecord` is laid out in
MongoDB, its indexes, and how documents and records turn into each other. The updates
that move a job from one status to another are in :mod:`mongosched.store.mongo.updates`.

Every field name and update operator of the job collection is in ``store/``; nothing
outside it knows them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from datetime import datetime, timezone
from typing import Any

from pymongo import ASCENDING

from mongosched._core.records import (
    FINAL_STATUSES,
    UNSTARTED_STATUSES,
    AttemptError,
    AttemptRecord,
    ErrorInfo,
    JobQuery,
    JobRecord,
    JobStatus,
    LastRun,
    LeaseInfo,
    LogEntry,
    MissedSlots,
    Progress,
    ScheduleEdit,
    assembled,
)
from mongosched._core.transitions import ms
from mongosched.errors import MalformedJob

__all__ = [
    "CLAIM_SORT",
    "RANKED",
    "RANK_SORT",
    "DEDUPE_FIELDS",
    "WINDOW_FIELD",
    "FINAL",
    "KEEPS_DEPENDENTS",
    "PENDING",
    "UNSTARTED",
    "WAITING",
    "RUNNING",
    "attempt_document",
    "attempt_error_document",
    "attempt_errors",
    "attempt_history",
    "aware",
    "check_document",
    "edit_document",
    "edit_record",
    "missed_document",
    "missed_record",
    "logs_document",
    "logs_record",
    "ms",
    "query_document",
    "to_document",
    "to_record",
]

PENDING, RUNNING = JobStatus.PENDING.value, JobStatus.RUNNING.value
WAITING = JobStatus.WAITING.value
UNSTARTED = [s.value for s in UNSTARTED_STATUSES]
FINAL = [s.value for s in FINAL_STATUSES]
KEEPS_DEPENDENTS = {"has_dependents": {"$ne": True}}
"""What a purge's delete filter adds: a job still marked as having dependents stays
(the jobs waiting for it would wait forever); it is deleted once they are released."""
STATUSES = frozenset(s.value for s in JobStatus)
DEDUPE_FIELDS = {"active": "dedupe_active", "pending": "dedupe_pending"}
WINDOW_FIELD = "dedupe_window"
"""Holds a job's dedupe key for its throttle window (until ``dedupe_until``), whatever
its status: unset only by the next job of that key once the window ended."""

# Claim order: priority first (1 before 10), then oldest due first.
CLAIM_SORT = [("priority", ASCENDING), ("run_at", ASCENDING)]
# Ranked jobs' claim order (mongosched._core.ranks): by rank, then due time, on an index
# of their own (memory:// takes equal ranks so too).
RANK_SORT = [("rank", ASCENDING), ("run_at", ASCENDING)]
RANKED = {"rank": {"$exists": True}}
CLAIMED = [RUNNING, JobStatus.COMPLETED.value, JobStatus.FAILED.value]
"""The statuses of jobs that were claimed, as a fair task's clock counts them."""


def aware(value: Any) -> Any:
    """Datetimes read from MongoDB are UTC; make naive ones (a client without
    ``tz_aware``) say so."""
    if isinstance(value, datetime) and value.tzinfo is None:
        return value.replace(tzinfo=timezone.utc)
    return value


# Documents <-> records ----------------------------------------------------------------------
def error_document(error: ErrorInfo | None) -> dict[str, Any] | None:
    if error is None:
        return None
    return {
        "type": error.type,
        "module": error.module,
        "message": error.message,
        "traceback": error.traceback,
    }


def error_record(doc: Any) -> ErrorInfo | None:
    if not doc:
        return None
    return ErrorInfo(
        str(doc.get("type", "")),
        str(doc.get("message", "")),
        doc.get("traceback"),
        doc.get("module"),
    )


def attempt_error_document(attempt: AttemptError) -> dict[str, Any]:
    return {
        "attempt": attempt.attempt,
        "at": ms(attempt.at),
        "error": error_document(attempt.error),
    }


def attempt_errors(docs: Any) -> tuple[AttemptError, ...]:
    """A job's ``errors`` (a list of :func:`attempt_error_document`; absent: none)."""
    if not isinstance(docs, list):
        return ()
    out = []
    for doc in docs:
        error = error_record(doc.get("error")) if isinstance(doc, Mapping) else None
        if error is not None:
            out.append(AttemptError(int(doc.get("attempt") or 0), aware(doc.get("at")), error))
    return tuple(out)


def attempt_document(attempt: AttemptRecord) -> dict[str, Any]:
    return {
        "attempt": attempt.attempt,
        "runner": attempt.runner,
        "host": attempt.host,
        "pid": attempt.pid,
        "started_at": ms(attempt.started_at),
        "ended_at": ms(attempt.ended_at),
        "status": attempt.status.value,
    }


def attempt_history(docs: Any) -> tuple[AttemptRecord, ...]:
    """A job's ``history`` (a list of :func:`attempt_document`; absent: none). An entry
    that is not one is skipped: the history only informs."""
    if not isinstance(docs, list):
        return ()
    out = []
    for doc in docs:
        if not isinstance(doc, Mapping) or doc.get("status") not in STATUSES:
            continue
        pid = doc.get("pid")
        out.append(
            AttemptRecord(
                attempt=int(doc.get("attempt") or 0),
                runner=str(doc.get("runner") or ""),
                host=None if doc.get("host") is None else str(doc["host"]),
                pid=pid if isinstance(pid, int) else None,
                started_at=aware(doc.get("started_at")),
                ended_at=aware(doc.get("ended_at")),
                status=JobStatus(doc["status"]),
            )
        )
    return tuple(out)


def last_run_document(last: LastRun) -> dict[str, Any]:
    return {
        "slot": last.slot,
        "status": last.status.value,
        "finished_at": last.finished_at,
        "error": error_document(last.error),
        "failures": last.failures,
    }


def missed_document(missed: MissedSlots) -> dict[str, Any]:
    return {
        "count": missed.count,
        "last_slot": ms(missed.last_slot),
        "reason": missed.reason,
        "at": ms(missed.at),
    }


def missed_record(doc: Any) -> MissedSlots | None:
    if not isinstance(doc, Mapping):
        return None
    return MissedSlots(
        count=int(doc.get("count", 0)),
        last_slot=aware(doc.get("last_slot")),
        reason=str(doc.get("reason", "")),
        at=aware(doc.get("at")),
    )


def logs_document(entries: Sequence[LogEntry]) -> list[dict[str, Any]]:
    return [
        {
            "at": ms(e.at),
            "level": e.level,
            "logger": e.logger,
            "message": e.message,
            "attempt": e.attempt,
        }
        for e in entries
    ]


def logs_record(docs: Any) -> tuple[LogEntry, ...]:
    if not isinstance(docs, list):
        return ()
    return tuple(
        LogEntry(
            at=aware(d.get("at")),
            level=str(d.get("level", "")),
            logger=str(d.get("logger", "")),
            message=str(d.get("message", "")),
            attempt=int(d.get("attempt") or 0),
        )
        for d in docs
        if isinstance(d, Mapping)
    )


SCHEMA: dict[str, tuple[type, ...]] = {
    "task": (str,),
    "status": (str,),
    "run_at": (datetime,),
    "queue": (str,),
    "priority": (int, float),
    "attempts": (int,),
    "max_attempts": (int,),
    "args": (list,),
    "kwargs": (dict,),
}
"""The fields every job document has, and their types (checked on every read)."""
LEASE_SCHEMA: dict[str, tuple[type, ...]] = {"token": (str,), "until": (datetime,)}


def check_document(doc: Mapping[str, Any]) -> None:
    """Raise :class:`MalformedJob` naming the first field a job document lacks or holds
    with the wrong type, so that no code past the store meets a malformed job. Every
    claimed job pays it: the fields of a document as BSON decodes it have exactly the
    types listed (:data:`_DECODED`), which one look-up each confirms; any other (a
    subclass, a missing field, a wrong type) is checked in full."""
    get = doc.get
    for name, decoded in _DECODED:
        if type(get(name)) not in decoded:
            _check_fields(doc)
            break
    job = doc.get("_id")
    if doc["status"] not in STATUSES:
        raise MalformedJob(f"job {job}: field 'status' is {doc['status']!r}, not a status")
    lease = doc.get("lease")
    if doc["status"] == RUNNING and not isinstance(lease, dict):
        raise MalformedJob(f"job {job}: field 'lease' is {_describe(lease)} on a running job")
    if isinstance(lease, dict):
        for name, types in LEASE_SCHEMA.items():
            if not isinstance(lease.get(name), types):
                raise MalformedJob(
                    f"job {job}: field 'lease.{name}' is {_describe(lease.get(name))}"
                )


def _check_fields(doc: Mapping[str, Any]) -> None:
    job = doc.get("_id")
    for name, types in SCHEMA.items():
        value = doc.get(name)
        if not isinstance(value, types) or isinstance(value, bool):
            raise MalformedJob(f"job {job}: field {name!r} is {_describe(value)}")


_DECODED = [(name, frozenset(types)) for name, types in SCHEMA.items()]
""":data:`SCHEMA` as exact types (a bool is not an int here either)."""


def _describe(value: Any) -> str:
    return "missing" if value is None else f"{type(value).__name__} {value!r:.40}"


def to_record(doc: Mapping[str, Any], *, check: bool = False) -> JobRecord:
    """A job document as a :class:`JobRecord`. With ``check`` (a job about to be run
    or reaped), :class:`MalformedJob` if it is not a well-formed one.

    Every job read pays this (the dispatcher, for every job it claims): it starts from
    the record of a document that has none of the optional fields (:data:`_ABSENT`)
    and reads only the fields the document has (:data:`_READERS`), which for most jobs
    are a dozen of the forty; :func:`assembled` skips the frozen ``__init__``."""
    if check:
        check_document(doc)
    record = object.__new__(JobRecord)  # filled as assembled() does, without its check:
    values = record.__dict__  # _ABSENT names every field (checked once, below)
    values.update(_ABSENT)
    readers = _READERS
    for key, value in doc.items():
        reader = readers.get(key)
        if reader is not None:
            name, read = reader
            values[name] = value if read is None else read(value)
    values["id"] = doc["_id"]
    values["task"] = doc["task"]
    status = doc["status"]
    values["status"] = _STATUSES.get(status) or JobStatus(status)
    values["run_at"] = aware(doc["run_at"])
    values["kwargs"] = dict(doc.get("kwargs") or {})  # a dict of its own, always
    if values["dedupe_key"] is None:
        values["dedupe_scope"] = None
    return record


def _lease_record(lease: Any) -> LeaseInfo | None:
    if not lease:
        return None
    get = lease.get
    return assembled(
        LeaseInfo,
        {
            "owner": get("owner"),
            "token": get("token"),
            "until": aware(get("until")),
            "heartbeat_at": aware(get("heartbeat_at")),
            "host": get("host"),
            "pid": get("pid"),
        },
    )


def _progress_record(progress: Any) -> Progress | None:
    if not progress:
        return None
    return Progress(progress.get("value"), progress.get("message"), aware(progress.get("at")))


def _last_run_record(last: Any) -> LastRun | None:
    if not last:
        return None
    return LastRun(
        slot=aware(last.get("slot")),
        status=JobStatus(last.get("status")),
        finished_at=aware(last.get("finished_at")),
        error=error_record(last.get("error")),
        failures=int(last.get("failures") or 0),
    )


def _items(value: Any) -> tuple[Any, ...]:
    return tuple(value or ())


_STATUSES = {status.value: status for status in JobStatus}

_FIELDS: list[tuple[str, str, Callable[[Any], Any] | None, Any]] = [
    # (document field, record field, how a present value is read (None: as it is),
    # the record's value when the document lacks the field)
    ("args", "args", _items, ()),
    ("queue", "queue", None, "default"),
    ("priority", "priority", None, 5),
    ("attempts", "attempts", None, 0),
    ("max_attempts", "max_attempts", None, 1),
    ("created_at", "created_at", aware, None),
    ("updated_at", "updated_at", aware, None),
    ("lease", "lease", _lease_record, None),
    ("repeat", "repeat", lambda value: value or None, None),
    ("scheduled_for", "scheduled_for", aware, None),
    ("dedupe_key", "dedupe_key", None, None),
    ("dedupe_scope", "dedupe_scope", None, None),  # (None when it has no dedupe key)
    ("dedupe_until", "dedupe_until", aware, None),
    ("dedupe_replace", "dedupe_replace", bool, False),
    ("result", "result", None, None),
    ("error", "error", error_record, None),
    ("progress", "progress", _progress_record, None),
    ("cancel_requested", "cancel_requested", bool, False),
    ("started_at", "started_at", aware, None),
    ("finished_at", "finished_at", aware, None),
    ("expire_at", "delete_at", aware, None),
    ("last_run", "last_run", _last_run_record, None),
    ("edit", "edit", lambda value: edit_record(value), None),
    ("missed", "missed", missed_record, None),
    ("trace", "trace", lambda value: _trace(value), None),
    ("expires_at", "expires_at", aware, None),
    ("timeout", "timeout", None, None),
    ("depends_on", "depends_on", _items, ()),
    ("waiting_for", "waiting_for", _items, ()),
    ("on_dependency_failure", "on_dependency_failure", lambda value: value or "cancel", "cancel"),
    ("has_dependents", "has_dependents", bool, False),
    ("rate_key", "rate_key", None, None),
    ("concurrency_key", "concurrency_key", None, None),
    ("label", "label", None, None),
    ("errors", "errors", attempt_errors, ()),
    ("aging", "aging", None, None),
    ("fair_key", "fair_key", None, None),
    ("fair_weight", "fair_weight", None, 1.0),
    ("rank", "rank", None, None),
    ("logs", "logs", logs_record, ()),
    ("history", "history", attempt_history, ()),
    ("fair_at", "fair_at", None, None),
]
_READERS = {key: (name, read) for key, name, read, _ in _FIELDS}
"""How each optional field of a job document is read into its record."""
_ABSENT: dict[str, Any] = {
    "id": None,
    "task": None,
    "status": None,
    "run_at": None,
    "kwargs": None,
    **{name: absent for _, name, _, absent in _FIELDS},
}
"""A record's values when its document has none of the optional fields: one for each
of the record's fields (:func:`to_record` relies on it)."""
assembled(JobRecord, _ABSENT)  # a TypeError at import if a field is missing or unknown


def _trace(value: Any) -> dict[str, str] | None:
    if not isinstance(value, Mapping):
        return None
    return {str(k): str(v) for k, v in value.items()} or None


def edit_record(doc: Any) -> ScheduleEdit | None:
    if not isinstance(doc, Mapping):
        return None
    return ScheduleEdit(at=aware(doc.get("at")), declared=str(doc.get("declared", "")))


def edit_document(edit: ScheduleEdit) -> dict[str, Any]:
    return {"at": ms(edit.at), "declared": edit.declared}


def to_document(job: JobRecord) -> dict[str, Any]:
    """A new job's document (its id made already)."""
    doc: dict[str, Any] = {
        "_id": job.id,
        "task": job.task,
        "args": list(job.args),
        "kwargs": dict(job.kwargs),
        "queue": job.queue,
        "priority": job.priority,
        "status": job.status.value,
        "run_at": ms(job.run_at),
        "attempts": job.attempts,
        "max_attempts": job.max_attempts,
        "lease": None,
        "created_at": ms(job.created_at),
        "updated_at": ms(job.updated_at),
    }
    if job.trace:
        doc["trace"] = dict(job.trace)
    if job.repeat is not None:
        doc["repeat"] = dict(job.repeat)
    if job.repeat is not None or job.scheduled_for is not None:  # a run of a slot has one
        doc["scheduled_for"] = None if job.scheduled_for is None else ms(job.scheduled_for)
    if job.dedupe_key is not None:
        scope = job.dedupe_scope or "active"
        doc.update(dedupe_key=job.dedupe_key, dedupe_scope=scope)
        doc[DEDUPE_FIELDS[scope]] = job.dedupe_key
        if job.dedupe_until is not None:
            doc.update({WINDOW_FIELD: job.dedupe_key, "dedupe_until": ms(job.dedupe_until)})
        if job.dedupe_replace:
            doc["dedupe_replace"] = True
    # Flow control: only what is set (most jobs carry none of it).
    if job.expires_at is not None:
        doc["expires_at"] = ms(job.expires_at)
    if job.timeout is not None:
        doc["timeout"] = job.timeout
    if job.depends_on:
        doc["depends_on"] = list(job.depends_on)
        doc["on_dependency_failure"] = job.on_dependency_failure
    if job.waiting_for and job.status is JobStatus.WAITING:
        doc["waiting_for"] = list(job.waiting_for)
        doc["unlinked"] = True  # until the scheduling call linked its dependencies
    if job.rate_key is not None:
        doc["rate_key"] = job.rate_key
    if job.concurrency_key is not None:
        doc["concurrency_key"] = job.concurrency_key
    if job.label is not None:
        doc["label"] = job.label
    # Ranked jobs (their rank is set by the insert: see MongoJobs._rank).
    if job.aging is not None:
        doc["aging"] = job.aging
    if job.fair_key is not None:
        doc.update(fair_key=job.fair_key, fair_weight=job.fair_weight)
    if job.rank is not None:
        doc["rank"] = job.rank
    if job.fair_at is not None:
        doc["fair_at"] = job.fair_at
    return doc


def query_document(query: JobQuery) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if query.task is not None:
        out["task"] = query.task
    if query.statuses is not None:
        values = [s.value for s in query.statuses]
        out["status"] = values[0] if len(values) == 1 else {"$in": values}
    if query.queue is not None:
        out["queue"] = query.queue
    if query.label is not None:
        out["label"] = query.label
    if query.error_type is not None:
        out["error.type"] = query.error_type
    for name, low, high in (
        ("created_at", query.created_after, query.created_before),
        ("finished_at", query.finished_after, query.finished_before),
        ("run_at", query.due_after, query.due_before),
    ):
        bounds: dict[str, Any] = {}
        if low is not None:
            bounds["$gte"] = ms(low)
        if high is not None:
            bounds["$lt"] = ms(high)
        if bounds:
            out[name] = bounds
    return out
