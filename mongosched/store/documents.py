"""The job document: how a :class:`~mongosched.records.JobRecord` is laid out in
MongoDB, its indexes, and the updates that move it from one status to another.

Every field name and update operator of the job collection is here or in
:mod:`mongosched.store.mongo`; nothing outside ``store/`` knows them.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta, timezone
from typing import Any

import bson
from bson.raw_bson import RawBSONDocument
from pymongo import ASCENDING

from ..errors import MalformedJob
from ..records import (
    ErrorInfo,
    JobQuery,
    JobRecord,
    JobStatus,
    LastRun,
    LeaseInfo,
    PendingChanges,
    Progress,
    ScheduleChanges,
    ScheduleEdit,
    Settlement,
    evolved,
)
from .codec import CODEC_OPTIONS, is_schedule_id, new_token

__all__ = [
    "CLAIM_SORT",
    "DEDUPE_FIELDS",
    "INDEXES",
    "FINAL",
    "LIMIT_INDEXES",
    "PENDING",
    "PAUSE_INDEXES",
    "PERMIT_INDEXES",
    "WORKER_INDEXES",
    "UNSTARTED",
    "WAITING",
    "RUNNING",
    "aware",
    "check_document",
    "claim_fence",
    "claim_query",
    "claim_update",
    "claimed_document",
    "malformed_update",
    "dedupe_hold",
    "edit_document",
    "edit_fields",
    "edit_record",
    "ms",
    "query_document",
    "revised",
    "set_also",
    "settle_update",
    "settled_record",
    "unchanged_since_claim",
    "with_encoded",
    "to_document",
    "to_record",
]

PENDING, RUNNING = JobStatus.PENDING.value, JobStatus.RUNNING.value
WAITING = JobStatus.WAITING.value
UNSTARTED = [PENDING, WAITING]
FINAL = [s.value for s in JobStatus if s.is_final]
STATUSES = frozenset(s.value for s in JobStatus)
DEDUPE_FIELDS = {"active": "dedupe_active", "pending": "dedupe_pending"}

# Claim order: priority first (1 before 10), then oldest due first.
CLAIM_SORT = [("priority", ASCENDING), ("run_at", ASCENDING)]

Index = tuple[list[tuple[str, int]], dict[str, Any]]
# Index names never change meaning: a changed index gets a new name (the server refuses
# new keys under an existing name). Dropped ones, for an upgrade note: claim,
# claim_any_queue (0.1: without the task).
INDEXES: list[Index] = [
    # Claim, Equality-Sort-Range: status (E), queue and task ($in: a few point ranges,
    # merged in sort order), priority+run_at (S), run_at (R). The task is in the index,
    # so a runner serving some tasks never examines other tasks' due jobs.
    (
        [("status", 1), ("queue", 1), ("task", 1), ("priority", 1), ("run_at", 1)],
        {"name": "claim_by_task"},
    ),
    # Claim by a runner that serves every queue (no queue to lead with).
    (
        [("status", 1), ("task", 1), ("priority", 1), ("run_at", 1)],
        {"name": "claim_by_task_any_queue"},
    ),
    # The job due longest (stats(), the dashboard's lateness), and due jobs of any task.
    ([("status", 1), ("run_at", 1)], {"name": "due"}),
    # Purge: finished jobs by status and age.
    ([("status", 1), ("finished_at", 1)], {"name": "finished"}),
    # Reaper: running jobs whose lease ran out.
    ([("status", 1), ("lease.until", 1)], {"name": "reap"}),
    # Queries: by task, by task and status, by status; each newest first.
    ([("task", 1), ("updated_at", -1)], {"name": "task_updated"}),
    ([("task", 1), ("status", 1), ("updated_at", -1)], {"name": "task_status"}),
    ([("status", 1), ("updated_at", -1)], {"name": "status_updated"}),
    # Dedupe: a key is held only while its job is in the key's scope (fields unset after).
    *(
        (
            [("task", 1), (name, 1)],
            {"name": name, "unique": True, "partialFilterExpression": {name: {"$exists": True}}},
        )
        for name in DEDUPE_FIELDS.values()
    ),
    # Bulk operations (retry/cancel/purge by filter) walk the matches in _id order, a
    # batch at a time (keyset: _id > the last one). Equality-Sort-Range: the status
    # ($in: point ranges merged in _id order) and task (E), _id (S), then finished_at
    # (R: "finished before/after" is checked on the index keys, before any fetch). A
    # filter on queue, error type or creation time is checked on the fetched document:
    # each batch reads at most what it scans, and a walk scans each candidate once.
    ([("status", 1), ("_id", 1), ("finished_at", 1)], {"name": "bulk_by_status"}),
    (
        [("task", 1), ("status", 1), ("_id", 1), ("finished_at", 1)],
        {"name": "bulk_by_task"},
    ),
    # Repeating jobs, for schedules().
    (
        [("task", 1)],
        {"name": "repeating", "partialFilterExpression": {"repeat": {"$exists": True}}},
    ),
    # Retention: finished jobs carry expire_at; the server deletes them after it.
    ([("expire_at", 1)], {"name": "expire_at", "expireAfterSeconds": 0}),
    # Flow control. The reaper's sweep of jobs past their expiry (pending, waiting).
    (
        [("status", 1), ("expires_at", 1)],
        {"name": "expiring", "partialFilterExpression": {"expires_at": {"$exists": True}}},
    ),
    # Waiting jobs by the dependencies they still wait for (released when one ends).
    (
        [("waiting_for", 1)],
        {"name": "waiting_for", "partialFilterExpression": {"waiting_for": {"$exists": True}}},
    ),
    # Waiting jobs whose scheduling call did not link their dependencies (the repair).
    (
        [("unlinked", 1), ("created_at", 1)],
        {"name": "unlinked", "partialFilterExpression": {"unlinked": {"$exists": True}}},
    ),
    # Finished jobs whose dependents were not yet released (the reaper's repair).
    (
        [("has_dependents", 1), ("finished_at", 1)],
        {"name": "dependents", "partialFilterExpression": {"has_dependents": {"$exists": True}}},
    ),
]

PAUSE_INDEXES: list[Index] = []  # a handful of documents, by _id
WORKER_INDEXES: list[Index] = [
    # A runner that stopped refreshing its entry is deleted by the server after this.
    ([("expire_at", 1)], {"name": "expire_at", "expireAfterSeconds": 0}),
]

PERMIT_INDEXES: list[Index] = [
    ([("task", 1), ("index", 1)], {"name": "task_index"}),
    ([("task", 1), ("token", 1)], {"name": "task_token"}),
]

LIMIT_INDEXES: list[Index] = [
    # A limit document (a rate log, a key's holders) is deleted once idle.
    ([("expire_at", 1)], {"name": "idle", "expireAfterSeconds": 0}),
]


def ms(value: datetime) -> datetime:
    """BSON datetimes are UTC milliseconds: round here so what we compare (and return)
    is what is stored."""
    if value.tzinfo is not None:
        value = value.astimezone(timezone.utc)
    return value.replace(microsecond=value.microsecond // 1000 * 1000)


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


def last_run_document(last: LastRun) -> dict[str, Any]:
    return {
        "slot": last.slot,
        "status": last.status.value,
        "finished_at": last.finished_at,
        "error": error_document(last.error),
    }


SCHEMA: dict[str, tuple[type, ...]] = {
    "task": (str,),
    "status": (str,),
    "run_at": (datetime,),
    "queue": (str,),
    "priority": (int,),
    "attempts": (int,),
    "max_attempts": (int,),
    "args": (list,),
    "kwargs": (dict,),
}
"""The fields every job document has, and their types (checked on every read)."""
LEASE_SCHEMA: dict[str, tuple[type, ...]] = {"token": (str,), "until": (datetime,)}


def check_document(doc: Mapping[str, Any]) -> None:
    """Raise :class:`MalformedJob` naming the first field a job document lacks or holds
    with the wrong type, so that no code past the store meets a malformed job."""
    job = doc.get("_id")
    for name, types in SCHEMA.items():
        value = doc.get(name)
        if not isinstance(value, types) or isinstance(value, bool):
            raise MalformedJob(f"job {job}: field {name!r} is {_describe(value)}")
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


def _describe(value: Any) -> str:
    return "missing" if value is None else f"{type(value).__name__} {value!r:.40}"


def to_record(doc: Mapping[str, Any], *, check: bool = False) -> JobRecord:
    """A job document as a :class:`JobRecord`. With ``check`` (a job about to be run
    or reaped), :class:`MalformedJob` if it is not a well-formed one."""
    if check:
        check_document(doc)
    lease = doc.get("lease")
    progress = doc.get("progress")
    last = doc.get("last_run")
    scope = doc.get("dedupe_scope")
    return JobRecord(
        id=doc["_id"],
        task=doc["task"],
        args=tuple(doc.get("args") or ()),
        kwargs=dict(doc.get("kwargs") or {}),
        queue=doc.get("queue", "default"),
        priority=doc.get("priority", 5),
        status=JobStatus(doc["status"]),
        run_at=aware(doc["run_at"]),
        attempts=doc.get("attempts", 0),
        max_attempts=doc.get("max_attempts", 1),
        created_at=aware(doc.get("created_at")),
        updated_at=aware(doc.get("updated_at")),
        lease=None
        if not lease
        else LeaseInfo(
            owner=lease.get("owner"),
            token=lease.get("token"),
            until=aware(lease.get("until")),
            heartbeat_at=aware(lease.get("heartbeat_at")),
        ),
        repeat=doc.get("repeat") or None,
        scheduled_for=aware(doc.get("scheduled_for")),
        dedupe_key=doc.get("dedupe_key"),
        dedupe_scope=scope if doc.get("dedupe_key") is not None else None,
        result=doc.get("result"),
        error=error_record(doc.get("error")),
        progress=None
        if not progress
        else Progress(progress.get("value"), progress.get("message"), aware(progress.get("at"))),
        cancel_requested=bool(doc.get("cancel_requested")),
        started_at=aware(doc.get("started_at")),
        finished_at=aware(doc.get("finished_at")),
        expire_at=aware(doc.get("expire_at")),
        last_run=None
        if not last
        else LastRun(
            slot=aware(last.get("slot")),
            status=JobStatus(last.get("status")),
            finished_at=aware(last.get("finished_at")),
            error=error_record(last.get("error")),
        ),
        edit=edit_record(doc.get("edit")),
        trace=_trace(doc.get("trace")),
        expires_at=aware(doc.get("expires_at")),
        timeout=doc.get("timeout"),
        depends_on=tuple(doc.get("depends_on") or ()),
        waiting_for=tuple(doc.get("waiting_for") or ()),
        on_dependency_failure=doc.get("on_dependency_failure") or "cancel",
        has_dependents=bool(doc.get("has_dependents")),
        rate_key=doc.get("rate_key"),
        concurrency_key=doc.get("concurrency_key"),
    )


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
        doc["scheduled_for"] = None if job.scheduled_for is None else ms(job.scheduled_for)
    if job.dedupe_key is not None:
        scope = job.dedupe_scope or "active"
        doc.update(dedupe_key=job.dedupe_key, dedupe_scope=scope)
        doc[DEDUPE_FIELDS[scope]] = job.dedupe_key
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
    return doc


def claim_query(
    tasks: Sequence[str], queues: Sequence[str] | None, now: datetime, job_id: Any = None
) -> dict[str, Any]:
    """The filter of a claim: pending jobs of ``tasks`` due by ``now`` in ``queues``
    (None: any), or the pending job ``job_id`` (due or not, any queue)."""
    query: dict[str, Any] = {"status": PENDING}
    if job_id is not None:
        query["_id"] = job_id
    else:
        query["run_at"] = {"$lte": now}
        if queues is not None:
            query["queue"] = {"$in": list(queues)}
    query["task"] = {"$in": list(tasks)}
    # A job whose attempts are not a number cannot be counted ($inc would fail the
    # whole claim): quarantine() fails it instead.
    query["attempts"] = {"$type": "number"}
    return query


def claim_update(owner: str, token: str, now: datetime, lease_duration: float) -> dict[str, Any]:
    """The update of a claim: running under a lease ``token`` until ``now +
    lease_duration``, the attempt counted, a pending-scope dedupe key released."""
    now = ms(now)
    lease = {
        "owner": owner,
        "token": token,
        "until": ms(now + timedelta(seconds=lease_duration)),
        "heartbeat_at": now,
    }
    return {
        "$set": {"status": RUNNING, "lease": lease, "started_at": now, "updated_at": now},
        "$inc": {"attempts": 1},
        "$unset": {DEDUPE_FIELDS["pending"]: ""},
    }


def edit_fields(changes: PendingChanges | ScheduleChanges, now: datetime) -> dict[str, Any]:
    """The ``$set`` fields an edit of an unstarted job (a pending job's, a schedule's)
    begins with: ``updated_at``, and the priority, queue and due time it changes."""
    fields: dict[str, Any] = {"updated_at": ms(now)}
    if changes.priority is not None:
        fields["priority"] = changes.priority
    if changes.queue is not None:
        fields["queue"] = changes.queue
    if changes.run_at is not None:
        fields["run_at"] = ms(changes.run_at)
    return fields


def revised(fields: dict[str, Any]) -> dict[str, Any]:
    """``$set`` fields with a fresh ``rev``: what every write that changes an unstarted
    job's fields, or makes a job pending, sets, so that a batched claim's fence
    (:func:`claim_fence`) sees any change since it read the job."""
    fields["rev"] = new_token()
    return fields


def claim_fence(doc: Mapping[str, Any]) -> dict[str, Any]:
    """What a batched claim adds to the claim filter for a job it read: still that
    document, unchanged since (``rev``, see :func:`revised`; ``updated_at`` too), so
    that the claimed job is :func:`claimed_document` of what was read."""
    return {"_id": doc["_id"], "updated_at": doc.get("updated_at"), "rev": doc.get("rev")}


def claimed_document(doc: Mapping[str, Any], update: Mapping[str, Any]) -> dict[str, Any]:
    """``doc`` as a :func:`claim_update` landing under :func:`claim_fence` leaves it,
    computed instead of read back."""
    claimed = dict(doc)
    claimed.update(update["$set"])
    for name, step in update["$inc"].items():
        claimed[name] = claimed.get(name, 0) + step
    for name in update["$unset"]:
        claimed.pop(name, None)
    return claimed


def dedupe_hold(job: JobRecord) -> dict[str, Any]:
    """The dedupe field a pending job holds, as ``$set`` fields."""
    if job.dedupe_key is None:
        return {}
    return {DEDUPE_FIELDS[job.dedupe_scope or "active"]: job.dedupe_key}


def malformed_update(reason: str, now: datetime) -> dict[str, Any]:
    """The update that fails a job that cannot be processed, alone."""
    error = ErrorInfo(type="MalformedJob", message=reason, module="mongosched.errors")
    return {
        "$set": {
            "status": JobStatus.FAILED.value,
            "lease": None,
            "error": error_document(error),
            "finished_at": now,
            "updated_at": now,
        },
        "$unset": {name: "" for name in DEDUPE_FIELDS.values()},
    }


def settle_update(
    job_id: Any,
    settlement: Settlement,
    restore: Mapping[str, Any],
    result: bytes | None = None,
) -> dict[str, Any]:
    """The update that applies ``settlement`` to job ``job_id`` (``restore``: dedupe
    fields to hold again when the job goes back to pending). A declared schedule gets
    no ``expire_at``: it stays, cancelled, as the tombstone that keeps it off.
    ``result``: the settlement's result as :func:`codec.encode_value` encoded it (for
    the size check), written as it is, not encoded again."""
    s = settlement
    fields: dict[str, Any] = {
        "status": s.status.value,
        "lease": None,
        "updated_at": s.now,
        "error": error_document(s.error),
    }
    if result is None:
        fields["result"] = s.result
    if s.attempts is not None:
        fields["attempts"] = s.attempts
    if s.run_at is not None:
        fields["run_at"] = ms(s.run_at)
    if s.scheduled_for is not None:
        fields["scheduled_for"] = s.scheduled_for
    if s.last_run is not None:
        fields["last_run"] = last_run_document(s.last_run)
    update: dict[str, Any] = {"$set": fields}
    if s.status is JobStatus.PENDING:
        revised(fields)
    if s.status.is_final:
        fields["finished_at"] = s.now
        if s.expire_at is not None and not is_schedule_id(job_id):
            fields["expire_at"] = ms(s.expire_at)
        update["$unset"] = {name: "" for name in DEDUPE_FIELDS.values()}
    else:
        fields.update(restore)
        update["$unset"] = {}
    update["$unset"].update(waiting_for="", unlinked="")  # a waiting job released or ended
    if result is not None:
        update["$set"] = with_encoded(fields, "result", result)
    return update


RAW_OPTIONS = CODEC_OPTIONS.with_options(document_class=RawBSONDocument)


def with_encoded(fields: Mapping[str, Any], name: str, encoded: bytes) -> RawBSONDocument:
    """``fields`` and ``name``, as one BSON document; ``name`` holds the value that
    ``encoded`` (the BSON of ``{"v": value}``) holds, copied, not encoded again."""
    head = bson.encode(fields, codec_options=CODEC_OPTIONS)
    # encoded: size (4 bytes), the value's type (1), "v\0" (2), the value, "\0" (1).
    element = encoded[4:5] + name.encode() + b"\x00" + encoded[7:-1]
    body = head[4:-1] + element
    return RawBSONDocument(struct.pack("<i", len(body) + 5) + body + b"\x00", RAW_OPTIONS)


def set_also(update: Mapping[str, Any], fields: Mapping[str, Any]) -> dict[str, Any]:
    """``update`` whose ``$set`` sets ``fields`` too (a raw ``$set`` stays raw)."""
    current = update.get("$set", {})
    if isinstance(current, RawBSONDocument):
        extra = bson.encode(fields, codec_options=CODEC_OPTIONS)
        body = bytes(current.raw)[4:-1] + extra[4:-1]
        merged: Any = RawBSONDocument(
            struct.pack("<i", len(body) + 5) + body + b"\x00", RAW_OPTIONS
        )
    else:
        merged = {**current, **fields}
    return {**update, "$set": merged}


def unchanged_since_claim(job: JobRecord) -> dict[str, Any]:
    """Conditions that hold while a running job is as its holder claimed it, but for
    its lease's renewals: nothing wrote to it (every such write sets ``updated_at``,
    but for progress, checked whole on its own). ``updated_at`` is in milliseconds: a
    write within the millisecond of the claim leaves it as claimed, so the fields such
    writes set are checked too (a cancel requested, dependents linked). A settlement
    landing under them leaves exactly :func:`settled_record`."""
    fence: dict[str, Any] = {"updated_at": job.updated_at, "cancel_requested": {"$ne": True}}
    p = job.progress  # maybe a previous attempt's, of this one's millisecond: whole
    if p is None:
        fence["progress"] = None
    else:
        fence.update({"progress.at": p.at, "progress.value": p.value})
        fence["progress.message"] = p.message
    if not job.has_dependents:
        fence["has_dependents"] = {"$ne": True}
    return fence


def settled_record(job: JobRecord, settlement: Settlement, result: Any) -> JobRecord:
    """The job as stored after :func:`settle_update` landed under
    :func:`unchanged_since_claim` (``result``: the settlement's result as BSON gives it
    back), computed instead of read back: what :func:`to_record` would make of it."""
    s = settlement
    now = ms(s.now)
    final = s.status.is_final
    last = s.last_run
    keep = final and s.expire_at is not None and not is_schedule_id(job.id)
    return evolved(
        job,
        status=s.status,
        lease=None,
        updated_at=now,
        result=result,
        error=error_record(error_document(s.error)),
        cancel_requested=False,
        waiting_for=(),
        attempts=job.attempts if s.attempts is None else s.attempts,
        run_at=job.run_at if s.run_at is None else ms(s.run_at),
        scheduled_for=job.scheduled_for if s.scheduled_for is None else ms(s.scheduled_for),
        last_run=job.last_run
        if last is None
        else LastRun(
            slot=ms(last.slot),
            status=last.status,
            finished_at=ms(last.finished_at),
            error=error_record(error_document(last.error)),
        ),
        finished_at=now if final else job.finished_at,
        expire_at=ms(s.expire_at) if keep and s.expire_at is not None else job.expire_at,
    )


def query_document(query: JobQuery) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if query.task is not None:
        out["task"] = query.task
    if query.statuses is not None:
        values = [s.value for s in query.statuses]
        out["status"] = values[0] if len(values) == 1 else {"$in": values}
    if query.queue is not None:
        out["queue"] = query.queue
    if query.error_type is not None:
        out["error.type"] = query.error_type
    for name, low, high in (
        ("created_at", query.created_after, query.created_before),
        ("finished_at", query.finished_after, query.finished_before),
    ):
        bounds: dict[str, Any] = {}
        if low is not None:
            bounds["$gte"] = ms(low)
        if high is not None:
            bounds["$lt"] = ms(high)
        if bounds:
            out[name] = bounds
    return out
