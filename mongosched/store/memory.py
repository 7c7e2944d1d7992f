"""The in-memory store (``memory://[name]``): every job held in this process.

It keeps what MongoDB would keep: datetimes in whole milliseconds (UTC); payloads,
results and repeat rules as BSON bytes, decoded afresh for every record it returns, so
no caller can change a stored job through what it was given. Every method runs under
one lock per store: each is one atomic step, as on the server.

Claims read ordered indexes, never scan. Pending jobs sit in one heap per bucket
``task -> queue -> priority``, ordered by ``(run_at, seq)`` (``seq`` is insertion
order: equal due times are served first in, first out); running jobs in one heap by
lease expiry. Entries are deleted lazily: each carries the version its job had when it
was pushed, every change that moves a job pushes a fresh entry under a new version, and
an entry counts only while its job keeps that version and that index's status. Stale
heads are popped when looked at, and an index grown to twice its live size (plus a
margin) is rebuilt, so garbage costs amortised O(1) per write. A claim looks at one head
per non-empty bucket of the tasks and queues asked for: O(buckets + log n).
"""

from __future__ import annotations

import heapq
import itertools
import logging
import os
import threading
import uuid
import weakref
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, fields, replace
from datetime import datetime, timedelta, timezone
from typing import Any, TypeVar

from bson import ObjectId

from ..errors import ConfigurationError, JobStateError
from ..records import (
    FINAL_STATUSES,
    SORTABLE,
    ErrorInfo,
    JobQuery,
    JobRecord,
    JobStatus,
    LastRun,
    LeaseInfo,
    PendingChanges,
    Progress,
    Renewal,
    Settlement,
)
from . import codec

__all__ = ["MemoryStore"]

log = logging.getLogger("mongosched.store")

PENDING, RUNNING = JobStatus.PENDING, JobStatus.RUNNING
SCOPE_STATUSES = {"active": (PENDING, RUNNING), "pending": (PENDING,)}
"""While its job is in one of these statuses, a dedupe key is held in that scope."""

Entry = tuple[datetime, int, int, Any]
"""An index entry: (run_at or lease expiry, job seq, job version, job id)."""

PLAIN_FIELDS = tuple(
    f.name for f in fields(JobRecord) if f.name not in ("args", "kwargs", "repeat", "result")
)
Timed = TypeVar("Timed", LeaseInfo, Progress, LastRun)


def _ms(value: datetime) -> datetime:
    """A datetime as BSON keeps it: UTC (a naive one taken as UTC), whole milliseconds."""
    value = value.replace(tzinfo=timezone.utc) if value.tzinfo is None else value
    if value.tzinfo is not timezone.utc:
        value = value.astimezone(timezone.utc)
    return value.replace(microsecond=value.microsecond // 1000 * 1000)


def _opt_ms(value: datetime | None) -> datetime | None:
    return None if value is None else _ms(value)


def _ms_in(value: Timed | None) -> Timed | None:
    """A lease, progress or last run with its datetimes in milliseconds."""
    if value is None:
        return None
    times: dict[str, Any] = {
        f.name: _ms(v) for f in fields(value) if isinstance(v := getattr(value, f.name), datetime)
    }
    return replace(value, **times)


def _decode(data: bytes | None) -> Any:
    """What :func:`codec.encode_value` encoded (None stays None)."""
    return None if data is None else codec.decode(data)["v"]


def _encode_result(task: str, settlement: Settlement) -> bytes | None:
    if settlement.result is None:
        return None
    return codec.encode_value(task, "return value", settlement.result)


def _order(value: Any) -> tuple[Any, ...]:
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
class _Job:
    """One stored job, mutable and private to the store. The fields of a
    :class:`JobRecord`, but for ``args``, ``kwargs``, ``repeat`` and ``result``, kept as
    BSON; and where the job stands in the store's maps and indexes."""

    id: Any
    task: str
    run_at: datetime
    created_at: datetime
    updated_at: datetime
    queue: str
    priority: int
    status: JobStatus
    attempts: int
    max_attempts: int
    lease: LeaseInfo | None
    scheduled_for: datetime | None
    dedupe_key: str | None
    dedupe_scope: str | None
    error: ErrorInfo | None
    progress: Progress | None
    cancel_requested: bool
    started_at: datetime | None
    finished_at: datetime | None
    expire_at: datetime | None
    last_run: LastRun | None
    payload: bytes  # {"args": [...], "kwargs": {...}}
    repeat: bytes | None  # {"v": rule}
    result: bytes | None  # {"v": value}
    seq: int  # insertion order
    version: int = -1  # the index entries that count carry this
    listed: JobStatus | None = None  # the status map it is filed under

    @property
    def key(self) -> tuple[str, tuple[str, str]] | None:
        """``(scope, (task, dedupe key))`` if the job has a dedupe key."""
        if self.dedupe_key is None:
            return None
        scope = "pending" if self.dedupe_scope == "pending" else "active"
        return scope, (self.task, self.dedupe_key)

    def record(self) -> JobRecord:
        payload = codec.decode(self.payload)
        return JobRecord(
            **{name: getattr(self, name) for name in PLAIN_FIELDS},
            args=tuple(payload["args"]),
            kwargs=payload["kwargs"],
            repeat=_decode(self.repeat),
            result=_decode(self.result),
        )


@dataclass(slots=True)
class _Permit:
    """One of the numbered concurrency permits of a task."""

    token: str | None = None
    job: Any = None
    owner: str | None = None
    until: datetime | None = None


_stores: weakref.WeakSet[MemoryStore] = weakref.WeakSet()
_named: dict[str, MemoryStore] = {}
_registry_lock = threading.Lock()


def _after_fork_in_child() -> None:
    """Give every store a fresh lock: a thread of the parent may have held one."""
    global _registry_lock
    _registry_lock = threading.Lock()
    for store in list(_stores):
        store._lock = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


class MemoryStore:
    """An in-process :class:`~mongosched.store.Store` (whose docstrings say what each
    method does). ``MemoryStore()`` is private to its creator; :meth:`named` shares one
    store per name within the process."""

    def __init__(self) -> None:
        self.name: str | None = None
        self._lock = threading.Lock()
        self._counter = itertools.count()  # seqs and versions
        self._jobs: dict[Any, _Job] = {}
        self._by_status: dict[JobStatus, dict[Any, _Job]] = {s: {} for s in JobStatus}
        self._keys: dict[str, dict[tuple[str, str], Any]] = {"active": {}, "pending": {}}
        self._claim_index: dict[str, dict[str, dict[int, list[Entry]]]] = {}
        self._claim_entries = 0
        self._lease_index: list[Entry] = []
        self._permits: dict[str, list[_Permit]] = {}
        self.examined = 0
        """Index entries looked at since the last claim began (for tests)."""
        _stores.add(self)

    def __repr__(self) -> str:
        return f"<MemoryStore {self.name or 'private'}: {len(self._jobs)} jobs>"

    @classmethod
    def named(cls, uri: str) -> MemoryStore:
        """The store ``memory://name`` names in this process (made on first use), or a
        new private one for ``memory://``."""
        scheme, sep, rest = uri.partition("://")
        if scheme.lower() != "memory" or not sep:
            raise ConfigurationError(f"not a memory:// URI: {uri!r}")
        name = rest.split("?", 1)[0].split("/", 1)[0]
        if not name:
            return cls()
        with _registry_lock:
            if name not in _named:
                _named[name] = cls()
                _named[name].name = name
            return _named[name]

    @classmethod
    def forget(cls, name: str | None = None) -> None:
        """Drop the store ``name`` (every named store if None) from the registry: who
        holds it keeps it, and the next :meth:`named` makes a new, empty one."""
        with _registry_lock:
            if name is None:
                _named.clear()
            else:
                _named.pop(name, None)

    # Lifecycle ----------------------------------------------------------------------------
    def prepare(self) -> None:
        """Nothing to do: the indexes always exist."""

    def close(self) -> None:
        """Nothing to release."""

    def clock_offset(self, local_now: Callable[[], datetime]) -> timedelta | None:
        return None

    def parse_id(self, value: Any) -> Any:
        return codec.parse_id(value)

    # Scheduling ----------------------------------------------------------------------------
    def insert(self, jobs: Sequence[JobRecord]) -> list[tuple[JobRecord, bool]]:
        """See :meth:`Store.insert`. Every payload is checked first: a batch with one
        that cannot be stored writes nothing."""
        encoded = [self._encode(job) for job in jobs]
        with self._lock:
            added = [self._add(job, data) for job, data in zip(jobs, encoded, strict=True)]
            return [(job.record(), created) for job, created in added]

    def upsert_schedule(self, job: JobRecord, now: datetime) -> bool:
        encoded = self._encode(job)
        rule = _decode(encoded[1])
        with self._lock:
            current = self._find(job.id)
            if current is None:
                return self._add(job, encoded)[1]
            old = (_decode(current.repeat), current.queue, current.priority, current.max_attempts)
            if old == (rule, job.queue, job.priority, job.max_attempts):
                return False
            if current.status is PENDING and old[0] != rule:
                current.run_at, current.scheduled_for = _ms(job.run_at), _opt_ms(job.scheduled_for)
            current.repeat, current.queue = encoded[1], job.queue
            current.priority, current.max_attempts = job.priority, job.max_attempts
            current.updated_at = _ms(now)
            self._refresh(current)
            return False

    # Reads -----------------------------------------------------------------------------------
    def get(self, job_id: Any) -> JobRecord | None:
        with self._lock:
            job = self._find(job_id)
            return None if job is None else job.record()

    def find(
        self,
        query: JobQuery,
        *,
        sort: str = "updated_at",
        descending: bool = True,
        skip: int = 0,
        limit: int = 50,
    ) -> list[JobRecord]:
        if sort not in SORTABLE:
            raise ConfigurationError(f"cannot sort jobs by {sort!r}: use one of {SORTABLE}")
        with self._lock:
            jobs = sorted(
                self._select(query),
                key=lambda j: (_order(getattr(j, sort)), _order(j.id)),
                reverse=descending,
            )
            return [j.record() for j in jobs[skip : skip + limit if limit else None]]

    def count(self, query: JobQuery) -> int:
        with self._lock:
            return len(self._select(query))

    def counts(self) -> dict[tuple[str, JobStatus], int]:
        with self._lock:
            return dict(Counter((j.task, j.status) for j in self._jobs.values()))

    def oldest_due(self, now: datetime) -> JobRecord | None:
        now = _ms(now)
        with self._lock:
            heads = [
                self._claim_head(heap)
                for by_queue in self._claim_index.values()
                for by_priority in by_queue.values()
                for heap in by_priority.values()
            ]
            due = [entry for entry in heads if entry is not None and entry[0] <= now]
            return self._jobs[min(due)[3]].record() if due else None

    def running(self, limit: int = 1000) -> list[JobRecord]:
        with self._lock:
            jobs = sorted(
                self._by_status[RUNNING].values(),
                key=lambda j: (_order(j.lease and j.lease.until), j.seq),
            )
            return [j.record() for j in jobs[: limit or None]]

    def unknown_due_tasks(self, known: Iterable[str], now: datetime) -> dict[str, int]:
        known, now = set(known), _ms(now)
        with self._lock:
            due = Counter(
                j.task
                for j in self._by_status[PENDING].values()
                if j.run_at <= now and j.task not in known
            )
        return dict(sorted(due.items(), key=lambda item: (-item[1], item[0]))[:20])

    def schedules(self) -> list[JobRecord]:
        with self._lock:
            jobs = [j for j in self._jobs.values() if j.repeat is not None]
            return [j.record() for j in sorted(jobs, key=lambda j: (j.task, _order(j.id)))]

    # Claim, heartbeat, fenced writes -------------------------------------------------------
    def claim(
        self,
        *,
        owner: str,
        tasks: Sequence[str],
        queues: Sequence[str] | None,
        now: datetime,
        lease_duration: float,
        job_id: Any = None,
    ) -> JobRecord | None:
        if not tasks:
            return None
        now = _ms(now)
        with self._lock:
            self.examined = 0
            if job_id is not None:
                job = self._find(job_id, PENDING)
                if job is None or job.task not in tasks:
                    return None
            else:
                heap = self._first_due(tasks, queues, now)
                if heap is None:
                    return None
                job = self._jobs[heapq.heappop(heap)[3]]  # the head is the job to take
                self._claim_entries -= 1
            until = _ms(now + timedelta(seconds=lease_duration))
            job.lease = LeaseInfo(owner, token=uuid.uuid4().hex, until=until, heartbeat_at=now)
            job.status, job.started_at, job.updated_at = RUNNING, now, now
            job.attempts += 1
            self._refresh(job)  # releases a pending-scope key, indexes the lease
            return job.record()

    def renew(self, job_id: Any, token: str, now: datetime, until: datetime) -> Renewal:
        with self._lock:
            job = self._holding(job_id, token)
            if job is None or job.lease is None:
                return Renewal(held=False)
            job.lease = replace(job.lease, until=_ms(until), heartbeat_at=_ms(now))
            self._refresh(job)
            return Renewal(held=True, cancel_requested=job.cancel_requested)

    def record_slot(self, job_id: Any, token: str, slot: datetime, now: datetime) -> bool:
        with self._lock:
            job = self._holding(job_id, token)
            if job is not None:
                job.scheduled_for, job.updated_at = _ms(slot), _ms(now)
            return job is not None

    def write_progress(
        self, job_id: Any, token: str, value: float | None, message: str | None, now: datetime
    ) -> bool:
        with self._lock:
            job = self._holding(job_id, token)
            if job is not None:
                job.progress = Progress(value=value, message=message, at=_ms(now))
            return job is not None

    def settle(self, job: JobRecord, settlement: Settlement) -> JobRecord | None:
        return self._settle_if(job, settlement, expired_before=None)

    def expired(self, now: datetime, limit: int = 100) -> list[JobRecord]:
        now = _ms(now)
        with self._lock:
            heap, found = self._lease_index, list[Entry]()
            while heap and (len(found) < limit or not limit) and heap[0][0] < now:
                entry = heapq.heappop(heap)
                if self._valid(entry, RUNNING):
                    found.append(entry)
            for entry in found:  # they stay running until reaped
                heapq.heappush(heap, entry)
            return [self._jobs[entry[3]].record() for entry in found]

    def reap(self, job: JobRecord, now: datetime, settlement: Settlement) -> JobRecord | None:
        return self._settle_if(job, settlement, expired_before=_ms(now))

    # Control by users -----------------------------------------------------------------------
    def cancel_pending(self, job_id: Any, settlement: Settlement) -> JobRecord | None:
        with self._lock:
            job = self._find(job_id, PENDING)
            if job is None:
                return None
            self._apply(job, settlement, _encode_result(job.task, settlement))
            return job.record()

    def request_cancel(self, job_id: Any, now: datetime) -> JobRecord | None:
        with self._lock:
            job = self._find(job_id, RUNNING)
            if job is None:
                return None
            job.cancel_requested, job.updated_at = True, _ms(now)
            return job.record()

    def update_pending(
        self, job: JobRecord, changes: PendingChanges, now: datetime
    ) -> JobRecord | None:
        """See :meth:`Store.update_pending`. Args or kwargs left unchanged are taken
        from the job as stored, not as read."""
        with self._lock:
            stored = self._find(job.id, PENDING)
            if stored is None:
                return None
            if changes.args is not None or changes.kwargs is not None:
                current = codec.decode(stored.payload)
                args = current["args"] if changes.args is None else changes.args
                kwargs = current["kwargs"] if changes.kwargs is None else changes.kwargs
                stored.payload = codec.encode_payload(job.task, args, kwargs)  # raises first
            if changes.priority is not None:
                stored.priority = changes.priority
            if changes.queue is not None:
                stored.queue = changes.queue
            if changes.run_at is not None:
                stored.run_at = _ms(changes.run_at)
            stored.updated_at = _ms(now)
            self._refresh(stored)
            return stored.record()

    def retry_finished(self, job_id: Any, status: JobStatus, now: datetime) -> JobRecord | None:
        now = _ms(now)
        with self._lock:
            job = self._find(job_id, JobStatus(status))
            if job is None:
                return None
            if self._holder(job) is not None:
                raise JobStateError(
                    f"job {job.id} ({job.task}): dedupe key {job.dedupe_key!r} is held by "
                    "another job now"
                )
            job.status, job.attempts, job.run_at, job.updated_at = PENDING, 0, now, now
            if job.repeat is not None:
                job.scheduled_for = now
            job.finished_at = job.expire_at = job.result = None
            job.cancel_requested = False
            self._refresh(job, hold=True)
            return job.record()

    def purge(
        self, statuses: Sequence[JobStatus], finished_before: datetime, task: str | None
    ) -> int:
        cutoff = _ms(finished_before)
        with self._lock:
            doomed = [
                job
                for status in {JobStatus(s) for s in statuses}
                for job in self._by_status[status].values()
                if job.finished_at is not None
                and job.finished_at <= cutoff
                and (task is None or job.task == task)
            ]
            for job in doomed:  # index entries of theirs, if any, no longer count
                del self._jobs[job.id], self._by_status[job.status][job.id]
                self._release_key(job)
            return len(doomed)

    # Concurrency permits -------------------------------------------------------------------
    def ensure_permits(self, task: str, limit: int) -> None:
        with self._lock:
            permits = self._permits.setdefault(task, [])
            permits.extend(_Permit() for _ in range(limit - len(permits)))

    def take_permit(
        self,
        task: str,
        limit: int,
        token: str,
        job_id: Any,
        owner: str,
        now: datetime,
        until: datetime,
    ) -> bool:
        now = _ms(now)
        with self._lock:
            permits = self._permits.get(task, [])
            if any(p.token == token for p in permits):
                return True
            for p in permits[:limit]:
                if p.token is None or (p.until is not None and p.until < now):
                    p.token, p.job, p.owner, p.until = token, job_id, owner, _ms(until)
                    return True
            return False

    def renew_permit(self, task: str, token: str, until: datetime) -> bool:
        with self._lock:
            for p in self._permits.get(task, []):
                if p.token == token:
                    p.until = _ms(until)
                    return True
            return False

    def release_permit(self, task: str, token: str) -> None:
        with self._lock:
            for p in self._permits.get(task, []):
                if p.token == token:
                    p.token = p.job = p.owner = p.until = None

    def permit_holders(self, task: str, now: datetime) -> int:
        now = _ms(now)
        with self._lock:
            permits = self._permits.get(task, [])
            return sum(
                p.token is not None and p.until is not None and p.until >= now for p in permits
            )

    # Internals: all but _encode run under the lock ----------------------------------------
    def _encode(self, job: JobRecord) -> tuple[bytes, bytes | None, bytes | None]:
        """A new job's payload, repeat rule and result as BSON; raises before anything
        is written (SerializationError naming what cannot be stored)."""
        repeat = job.repeat
        return (
            codec.encode_payload(job.task, job.args, job.kwargs),
            None if repeat is None else codec.encode_value(job.task, "repeat", dict(repeat)),
            None if job.result is None else codec.encode_value(job.task, "result", job.result),
        )

    def _add(
        self, record: JobRecord, encoded: tuple[bytes, bytes | None, bytes | None]
    ) -> tuple[_Job, bool]:
        """Store a new job: ``(it, True)``; ``(the job, True)`` if its id exists already;
        ``(the holder, False)`` if another job holds its dedupe key."""
        job_id = codec.new_id() if record.id is None else record.id
        existing = self._find(job_id)
        if existing is not None:
            return existing, True
        r, scope = record, None if record.dedupe_key is None else (record.dedupe_scope or "active")
        job = _Job(
            id=job_id,
            task=r.task,
            run_at=_ms(r.run_at),
            created_at=_ms(r.created_at),
            updated_at=_ms(r.updated_at),
            queue=r.queue,
            priority=r.priority,
            status=JobStatus(r.status),
            attempts=r.attempts,
            max_attempts=r.max_attempts,
            lease=_ms_in(r.lease),
            scheduled_for=_opt_ms(r.scheduled_for),
            dedupe_key=r.dedupe_key,
            dedupe_scope=scope,
            error=r.error,
            progress=_ms_in(r.progress),
            cancel_requested=r.cancel_requested,
            started_at=_opt_ms(r.started_at),
            finished_at=_opt_ms(r.finished_at),
            expire_at=_opt_ms(r.expire_at),
            last_run=_ms_in(r.last_run),
            payload=encoded[0],
            repeat=encoded[1],
            result=encoded[2],
            seq=next(self._counter),
        )
        holder = self._holder(job)
        if holder is not None and job.key and job.status in SCOPE_STATUSES[job.key[0]]:
            return holder, False
        self._jobs[job_id] = job
        self._refresh(job, hold=True)
        return job, True

    def _find(self, job_id: Any, status: JobStatus | None = None) -> _Job | None:
        """The job of that id (if it has ``status``, when given)."""
        try:
            job = self._jobs.get(job_id)
        except TypeError:  # unhashable: no job has such an id
            return None
        return job if job is None or status is None or job.status is status else None

    def _select(self, query: JobQuery) -> list[_Job]:
        if query.statuses is None:
            jobs: Iterable[_Job] = self._jobs.values()
        else:
            statuses = {JobStatus(s) for s in query.statuses}
            jobs = itertools.chain.from_iterable(self._by_status[s].values() for s in statuses)
        return [
            j
            for j in jobs
            if (query.task is None or j.task == query.task)
            and (query.queue is None or j.queue == query.queue)
        ]

    def _holding(self, job_id: Any, token: str) -> _Job | None:
        """The job if ``token`` holds its lease (the fence), else None."""
        job = self._find(job_id, RUNNING)
        return job if job is not None and job.lease and job.lease.token == token else None

    def _settle_if(
        self, claimed: JobRecord, settlement: Settlement, expired_before: datetime | None
    ) -> JobRecord | None:
        """Apply ``settlement`` if the lease ``claimed`` came with still holds the job
        (and, for the reaper, ran out before ``expired_before``)."""
        result = _encode_result(claimed.task, settlement)  # raises before any write
        with self._lock:
            lease = claimed.lease
            job = None if lease is None else self._holding(claimed.id, lease.token)
            if job is None or job.lease is None:
                return None
            if expired_before is not None and job.lease.until >= expired_before:
                return None  # a renewal landed first
            self._apply(job, settlement, result)
            return job.record()

    def _apply(self, job: _Job, settlement: Settlement, result: bytes | None) -> None:
        """Leave the job as ``settlement`` says (see :class:`Settlement`)."""
        s, now = settlement, _ms(settlement.now)
        job.status, job.updated_at, job.lease = JobStatus(s.status), now, None
        job.attempts = job.attempts if s.attempts is None else s.attempts
        job.result, job.error = result, s.error
        if s.run_at is not None:
            job.run_at = _ms(s.run_at)
        if s.scheduled_for is not None:
            job.scheduled_for = _ms(s.scheduled_for)
        if s.last_run is not None:
            job.last_run = _ms_in(s.last_run)
        if job.status in FINAL_STATUSES:
            job.finished_at, job.expire_at = now, _opt_ms(s.expire_at)
        self._refresh(job, hold=job.status is PENDING)

    # Dedupe keys ------------------------------------------------------------------------------
    def _holder(self, job: _Job) -> _Job | None:
        """Another job holding ``job``'s dedupe key in its scope, if any."""
        if job.key is None:
            return None
        scope, key = job.key
        held = self._keys[scope].get(key)
        return None if held is None or held == job.id else self._jobs.get(held)

    def _sync_key(self, job: _Job, hold: bool) -> None:
        """Release the job's key if it left the key's scope; with ``hold``, take it if
        the job is in scope and no other job holds it."""
        if job.key is None:
            return
        scope, key = job.key
        if job.status not in SCOPE_STATUSES[scope]:
            self._release_key(job)
        elif hold:
            self._keys[scope].setdefault(key, job.id)

    def _release_key(self, job: _Job) -> None:
        if job.key is not None:
            scope, key = job.key
            if key in self._keys[scope] and self._keys[scope][key] == job.id:
                del self._keys[scope][key]

    # Indexes ------------------------------------------------------------------------------------
    def _refresh(self, job: _Job, hold: bool = False) -> None:
        """After a change: file the job under its status, sync its dedupe key, and push
        a fresh index entry under a new version (older entries stop counting)."""
        if job.listed is not job.status:
            if job.listed is not None:
                del self._by_status[job.listed][job.id]
            self._by_status[job.status][job.id] = job
            job.listed = job.status
        self._sync_key(job, hold)
        job.version = next(self._counter)
        if job.status is PENDING:
            self._push_claim(job)
            pending = self._by_status[PENDING].values()
            if self._claim_entries > 2 * len(pending) + 1024:  # mostly stale: rebuild
                log.debug("%r: rebuilding the claim index", self)
                self._claim_index, self._claim_entries = {}, 0
                for other in pending:
                    self._push_claim(other)
        elif job.status is RUNNING and job.lease is not None:
            heapq.heappush(self._lease_index, (job.lease.until, job.seq, job.version, job.id))
            running = self._by_status[RUNNING].values()
            if len(self._lease_index) > 2 * len(running) + 1024:  # a sorted list is a heap
                self._lease_index = sorted(
                    (j.lease.until, j.seq, j.version, j.id) for j in running if j.lease
                )

    def _push_claim(self, job: _Job) -> None:
        by_priority = self._claim_index.setdefault(job.task, {}).setdefault(job.queue, {})
        heapq.heappush(
            by_priority.setdefault(job.priority, []), (job.run_at, job.seq, job.version, job.id)
        )
        self._claim_entries += 1

    def _valid(self, entry: Entry, status: JobStatus) -> bool:
        """Whether an index entry still stands for its job (same version and status)."""
        self.examined += 1
        job = self._jobs.get(entry[3])
        return job is not None and job.version == entry[2] and job.status is status

    def _claim_head(self, heap: list[Entry]) -> Entry | None:
        """The first valid entry of a claim heap, popping stale ones; None if empty."""
        while heap:
            if self._valid(heap[0], PENDING):
                return heap[0]
            heapq.heappop(heap)
            self._claim_entries -= 1
        return None

    def _first_due(
        self, tasks: Sequence[str], queues: Sequence[str] | None, now: datetime
    ) -> list[Entry] | None:
        """The claim heap whose head is the first due job (by priority, due time, then
        first in) of ``tasks`` in ``queues``; drops the buckets it finds empty."""
        best: tuple[int, datetime, int] | None = None
        found: list[Entry] | None = None
        for task in tasks:
            by_queue = self._claim_index.get(task)
            if by_queue is None:
                continue
            for queue in list(by_queue) if queues is None else queues:
                by_priority = by_queue.get(queue)
                if by_priority is None:
                    continue
                for priority, heap in list(by_priority.items()):
                    entry = self._claim_head(heap)
                    if entry is None:
                        del by_priority[priority]
                    elif entry[0] <= now and (best is None or (priority, *entry[:2]) < best):
                        best, found = (priority, entry[0], entry[1]), heap
                if not by_priority:
                    del by_queue[queue]
            if not by_queue:
                del self._claim_index[task]
        return found
