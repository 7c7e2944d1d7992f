"""How the in-memory store keeps one job (:class:`StoredJob`), and its values as BSON
keeps them."""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from datetime import datetime
from typing import Any, TypeVar

from bson import ObjectId

from mongosched._core.records import (
    JobQuery,
    JobRecord,
    JobStatus,
    LastRun,
    LeaseInfo,
    MissedSlots,
    Progress,
    Settlement,
    evolved,
)
from mongosched._core.transitions import may_expire, ms, opt_ms
from mongosched.store import codec

__all__ = [
    "Entry",
    "PAUSED",
    "PENDING",
    "RUNNING",
    "WAITING",
    "StoredJob",
    "decode_value",
    "encode_result",
    "matches",
    "ms",
    "ms_in",
    "opt_ms",
    "purgeable",
    "sort_key",
]

PENDING, RUNNING, PAUSED = JobStatus.PENDING, JobStatus.RUNNING, JobStatus.PAUSED
WAITING = JobStatus.WAITING

Entry = tuple[datetime, int, int, Any]
"""An index entry: (run_at or lease expiry, job seq, job version, job id)."""

Timed = TypeVar("Timed", LeaseInfo, Progress, LastRun, MissedSlots)


def ms_in(value: Timed | None) -> Timed | None:
    """A lease, progress, last run or missed slots with datetimes in milliseconds."""
    if value is None:
        return None
    times: dict[str, Any] = {
        f.name: ms(v) for f in fields(value) if isinstance(v := getattr(value, f.name), datetime)
    }
    return replace(value, **times)


def decode_value(data: bytes | None) -> Any:
    """What :func:`codec.encode_value` encoded (None stays None)."""
    return None if data is None else codec.decode(data)["v"]


def encode_result(task: str, settlement: Settlement) -> bytes | None:
    if settlement.result is None:
        return None
    return codec.encode_value(task, "return value", settlement.result)


def sort_key(value: Any) -> tuple[Any, ...]:
    """A sort key ordering values as MongoDB does: null first, numbers before strings
    before ObjectIds (ids may mix the last two), like values by their own order."""
    if value is None:
        return (0,)
    if isinstance(value, str):
        return (2, value)
    if isinstance(value, ObjectId):
        return (3, value.binary)
    return (1, value)


@dataclass(slots=True, eq=False)
class StoredJob:
    """One stored job, private to the store: the job as a :class:`JobRecord`
    (``record``, which every write replaces with what a transition of
    :mod:`mongosched._core.transitions` makes of it), and where the job stands in the
    store's maps and indexes.

    What a caller could change through a value it was given is kept as BSON: the
    record's ``result`` holds its result's BSON (or None), ``payload`` its args and
    kwargs, ``repeat`` its repeat rule (the record's own ``args``, ``kwargs`` and
    ``repeat`` are not read, but whether it repeats). :meth:`snapshot` decodes them
    afresh for every record handed out."""

    record: JobRecord
    payload: bytes  # {"args": [...], "kwargs": {...}}
    repeat: bytes | None  # {"v": rule}
    seq: int  # insertion order
    version: int = -1  # the index entries that count carry this
    listed: JobStatus | None = None  # the status map it is filed under
    unlinked: bool = False  # waiting, its dependencies not yet linked

    @property
    def id(self) -> Any:
        return self.record.id

    @property
    def key(self) -> tuple[str, tuple[str, str]] | None:
        """``(scope, (task, dedupe key))`` if the job has a dedupe key."""
        r = self.record
        if r.dedupe_key is None:
            return None
        scope = "pending" if r.dedupe_scope == "pending" else "active"
        return scope, (r.task, r.dedupe_key)

    def snapshot(self) -> JobRecord:
        """The job as a record of the caller's own."""
        r = self.record
        payload = codec.decode(self.payload)
        return evolved(
            r,
            args=tuple(payload["args"]),
            kwargs=payload["kwargs"],
            repeat=decode_value(self.repeat),
            result=decode_value(r.result),
            trace=None if r.trace is None else dict(r.trace),
        )


def purgeable(job: StoredJob) -> bool:
    """Whether a purge may delete ``job`` (one of the statuses it purges): not a
    declared schedule (a cancelled one is the tombstone that keeps it off), nor a job
    still marked as having dependents (they would wait for it forever)."""
    return may_expire(job.id) and not job.record.has_dependents


def matches(stored: StoredJob, query: JobQuery) -> bool:
    """Whether ``job`` matches every field of ``query`` (ranges: ``after`` inclusive,
    ``before`` exclusive; a job without the time matches no range on it)."""
    q, job = query, stored.record
    if q.statuses is not None and job.status not in q.statuses:
        return False
    if q.task is not None and job.task != q.task:
        return False
    if q.queue is not None and job.queue != q.queue:
        return False
    if q.label is not None and job.label != q.label:
        return False
    if q.error_type is not None and (job.error is None or job.error.type != q.error_type):
        return False
    for value, low, high in (
        (job.created_at, q.created_after, q.created_before),
        (job.finished_at, q.finished_after, q.finished_before),
        (job.run_at, q.due_after, q.due_before),
    ):
        if low is None and high is None:
            continue
        if value is None or (low is not None and value < ms(low)):
            return False
        if high is not None and value >= ms(high):
            return False
    return True
