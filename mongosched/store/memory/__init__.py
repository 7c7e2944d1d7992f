"""The in-memory store (``memory://[name]``): every job held in this process.

It keeps what MongoDB would keep: datetimes in whole milliseconds (UTC); payloads,
results and repeat rules as BSON bytes, decoded afresh for every record it returns, so
no caller can change a stored job through what it was given. Every method runs under
one lock per store: each is one atomic step, as on the server.

Claims and the reaper read ordered indexes (:mod:`.memory_index`), never scan: a claim
costs O(buckets + log n) whatever the backlog. Every change that moves a job gives it a
new version and pushes a fresh index entry; older entries stop counting.
"""

from __future__ import annotations

import itertools
import logging
import os
import threading
import weakref
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any

from mongosched._core.records import (
    FINAL_STATUSES,
    SORTABLE,
    JobQuery,
    JobRecord,
    JobStatus,
    LeaseInfo,
    PendingChanges,
    Progress,
    Renewal,
    Settlement,
    kept_errors,
)
from mongosched.errors import ConfigurationError, JobStateError
from mongosched.store import codec
from mongosched.store.memory.batches import MemoryBatches
from mongosched.store.memory.flow import FlowIndex, MemoryFlow
from mongosched.store.memory.index import JobIndexes
from mongosched.store.memory.jobs import (
    PAUSED,
    PENDING,
    RUNNING,
    SCOPE_STATUSES,
    WAITING,
    MemoryPermits,
    Permits,
    StoredJob,
    decode_value,
    encode_result,
    matches,
    ms,
    ms_in,
    opt_ms,
    purgeable,
    sort_key,
)
from mongosched.store.memory.limits import Limits
from mongosched.store.memory.operations import MemoryOperations
from mongosched.store.memory.transactions import MemoryTransactions
from mongosched.store.memory.watch import DueWatchers, MemoryDueWatch
from mongosched.store.patience import Patience

__all__ = ["MemoryStore"]

log = logging.getLogger("mongosched.store")

_stores: weakref.WeakSet[MemoryStore] = weakref.WeakSet()
_named: dict[str, MemoryStore] = {}
_registry_lock = threading.Lock()


def _after_fork_in_child() -> None:
    """Give every store a fresh lock: a thread of the parent may have held one."""
    global _registry_lock
    _registry_lock = threading.Lock()
    for store in list(_stores):
        store._lock = threading.Lock()
        store._watchers.after_fork()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


class MemoryStore(MemoryTransactions, MemoryFlow, MemoryBatches, MemoryOperations, MemoryPermits):
    """An in-process :class:`~mongosched.store.Store` (whose docstrings say what each
    method does). ``MemoryStore()`` is private to its creator; :meth:`named` shares one
    store per name within the process."""

    def __init__(self) -> None:
        super().__init__()
        self.name: str | None = None
        self._lock = threading.Lock()
        self._counter = itertools.count()  # seqs and versions
        self._jobs: dict[Any, StoredJob] = {}
        self._by_status: dict[JobStatus, dict[Any, StoredJob]] = {s: {} for s in JobStatus}
        self._keys: dict[str, dict[tuple[str, str], Any]] = {"active": {}, "pending": {}}
        self._indexes = JobIndexes(self._jobs)
        self._permits = Permits()
        self._watchers = DueWatchers()
        self._flow = FlowIndex(self._jobs)
        self._limits = Limits()
        _stores.add(self)

    @property
    def examined(self) -> int:
        """Index entries the last claim looked at (for tests: claims never scan)."""
        return self._indexes.examined

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

    def watch_due(self, queues: Sequence[str] | None) -> MemoryDueWatch:
        return self._watchers.watch(queues)

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
        rule = decode_value(encoded[1])
        with self._lock:
            current = self._find(job.id)
            if current is None:
                return self._add(job, encoded)[1]
            old = (
                decode_value(current.repeat),
                current.queue,
                current.priority,
                current.max_attempts,
            )
            if old == (rule, job.queue, job.priority, job.max_attempts):
                return False
            if current.status in (PENDING, PAUSED) and old[0] != rule:
                current.run_at, current.scheduled_for = ms(job.run_at), opt_ms(job.scheduled_for)
            current.repeat, current.queue = encoded[1], job.queue
            current.priority, current.max_attempts = job.priority, job.max_attempts
            current.updated_at, current.edit = ms(now), None
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
                key=lambda j: (sort_key(getattr(j, sort)), sort_key(j.id)),
                reverse=descending,
            )
            return [j.record() for j in jobs[skip : skip + limit if limit else None]]

    def count(self, query: JobQuery) -> int:
        with self._lock:
            return len(self._select(query))

    def counts(self) -> dict[tuple[str, JobStatus], int]:
        with self._lock:
            return dict(Counter((j.label or j.task, j.status) for j in self._jobs.values()))

    def oldest_due(self, now: datetime) -> JobRecord | None:
        now = ms(now)
        with self._lock:
            job = self._indexes.oldest_due(now)
            return None if job is None else job.record()

    def running(self, limit: int = 1000) -> list[JobRecord]:
        with self._lock:
            jobs = sorted(
                self._by_status[RUNNING].values(),
                key=lambda j: (sort_key(j.lease and j.lease.until), j.seq),
            )
            return [j.record() for j in jobs[: limit or None]]

    def unknown_due_tasks(self, known: Iterable[str], now: datetime) -> dict[str, int]:
        known, now = set(known), ms(now)
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
            return [j.record() for j in sorted(jobs, key=lambda j: (j.task, sort_key(j.id)))]

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
        now = ms(now)
        until = ms(now + timedelta(seconds=lease_duration))
        with self._lock:
            if job_id is not None:
                job = self._find(job_id, PENDING)
                if job is None or job.task not in tasks:
                    return None
            else:
                job = self._indexes.take_first_due(tasks, queues, now)
                if job is None:
                    return None
            return self._start(job, owner, now, until)

    def renew(
        self,
        job_id: Any,
        token: str,
        now: datetime,
        until: datetime,
        patience: Patience | None = None,
    ) -> Renewal:
        with self._lock:
            job = self._holding(job_id, token)
            if job is None or job.lease is None:
                return Renewal(held=False)
            job.lease = replace(job.lease, until=ms(until), heartbeat_at=ms(now))
            self._refresh(job)
            return Renewal(held=True, cancel_requested=job.cancel_requested)

    def record_slot(self, job_id: Any, token: str, slot: datetime, now: datetime) -> bool:
        with self._lock:
            job = self._holding(job_id, token)
            if job is not None:
                job.scheduled_for, job.updated_at = ms(slot), ms(now)
            return job is not None

    def write_progress(
        self, job_id: Any, token: str, value: float | None, message: str | None, now: datetime
    ) -> bool:
        with self._lock:
            job = self._holding(job_id, token)
            if job is not None:
                job.progress = Progress(value=value, message=message, at=ms(now))
            return job is not None

    def settle(
        self, job: JobRecord, settlement: Settlement, patience: Patience | None = None
    ) -> JobRecord | None:
        return self._settle_if(job, settlement, expired_before=None)

    def leases_expired(self, now: datetime, limit: int = 100) -> list[JobRecord]:
        now = ms(now)
        with self._lock:
            return [job.record() for job in self._indexes.leases_expired(now, limit)]

    def reap(self, job: JobRecord, now: datetime, settlement: Settlement) -> JobRecord | None:
        return self._settle_if(job, settlement, expired_before=ms(now))

    def quarantine(self, now: datetime, limit: int = 100) -> list[str]:
        """Nothing to do: every job here was made from a well-formed record."""
        return []

    # Control by users -----------------------------------------------------------------------
    def cancel_pending(self, job_id: Any, settlement: Settlement) -> JobRecord | None:
        with self._lock:
            job = self._find(job_id)
            if job is None or job.status not in (PENDING, WAITING):
                return None
            self._apply(job, settlement, encode_result(job.task, settlement))
            return job.record()

    def request_cancel(self, job_id: Any, now: datetime) -> JobRecord | None:
        with self._lock:
            job = self._find(job_id, RUNNING)
            if job is None:
                return None
            job.cancel_requested, job.updated_at = True, ms(now)
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
                stored.run_at = ms(changes.run_at)
            stored.updated_at = ms(now)
            self._refresh(stored)
            return stored.record()

    def retry_finished(self, job_id: Any, status: JobStatus, now: datetime) -> JobRecord | None:
        with self._lock:
            job = self._find(job_id, JobStatus(status))
            if job is None:
                return None
            self._retry(job, ms(now))
            return job.record()

    def _retry(self, job: StoredJob, now: datetime) -> None:
        """A finished job back to pending (see :meth:`retry_finished`)."""
        if self._holder(job) is not None:
            raise JobStateError(
                f"job {job.id} ({job.task}): dedupe key {job.dedupe_key!r} is held by "
                "another job now"
            )
        job.status, job.attempts, job.run_at, job.updated_at = PENDING, 0, now, now
        if job.repeat is not None:
            job.scheduled_for = now
        job.finished_at = job.delete_at = job.result = job.expires_at = None
        job.cancel_requested = False
        self._refresh(job, hold=True)

    def purge(
        self, statuses: Sequence[JobStatus], finished_before: datetime, task: str | None
    ) -> int:
        cutoff = ms(finished_before)
        with self._lock:
            doomed = [
                job
                for status in {JobStatus(s) for s in statuses}
                for job in self._by_status[status].values()
                if job.finished_at is not None
                and job.finished_at <= cutoff
                and (task is None or job.task == task)
                and purgeable(job)
            ]
            for job in doomed:
                self._delete(job)
            return len(doomed)

    def _delete(self, job: StoredJob) -> None:
        """Delete ``job`` (a purge's): index entries of its, if any, no longer count."""
        del self._jobs[job.id], self._by_status[job.status][job.id]
        self._release_key(job)
        self._flow.forget(job)

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
    ) -> tuple[StoredJob, bool]:
        """Store a new job: ``(it, True)``; ``(the job, True)`` if its id exists already;
        ``(the holder, False)`` if another job holds its dedupe key."""
        job_id = codec.new_id() if record.id is None else record.id
        existing = self._find(job_id)
        if existing is not None:
            return existing, True
        return self._put(self._stored(record, encoded, job_id))

    def _stored(
        self, record: JobRecord, encoded: tuple[bytes, bytes | None, bytes | None], job_id: Any
    ) -> StoredJob:
        """A new job as this store holds it (not added yet)."""
        r, scope = record, None if record.dedupe_key is None else (record.dedupe_scope or "active")
        return StoredJob(
            id=job_id,
            task=r.task,
            run_at=ms(r.run_at),
            created_at=ms(r.created_at),
            updated_at=ms(r.updated_at),
            queue=r.queue,
            priority=r.priority,
            status=JobStatus(r.status),
            attempts=r.attempts,
            max_attempts=r.max_attempts,
            lease=ms_in(r.lease),
            scheduled_for=opt_ms(r.scheduled_for),
            dedupe_key=r.dedupe_key,
            dedupe_scope=scope,
            error=r.error,
            progress=ms_in(r.progress),
            cancel_requested=r.cancel_requested,
            started_at=opt_ms(r.started_at),
            finished_at=opt_ms(r.finished_at),
            delete_at=opt_ms(r.delete_at),
            last_run=ms_in(r.last_run),
            edit=r.edit,
            trace=tuple((str(k), str(v)) for k, v in r.trace.items()) if r.trace else None,
            payload=encoded[0],
            repeat=encoded[1],
            result=encoded[2],
            seq=next(self._counter),
            expires_at=opt_ms(r.expires_at),
            timeout=r.timeout,
            depends_on=tuple(r.depends_on),
            waiting_for=tuple(r.waiting_for) if r.status is WAITING else (),
            unlinked=r.status is WAITING and bool(r.waiting_for),
            on_dependency_failure=r.on_dependency_failure,
            has_dependents=r.has_dependents,
            rate_key=r.rate_key,
            concurrency_key=r.concurrency_key,
            label=r.label,
        )

    def _put(self, job: StoredJob) -> tuple[StoredJob, bool]:
        """Add a new job: ``(it, True)``, or ``(the holder, False)`` if another job
        holds its dedupe key."""
        holder = self._holder(job)
        if holder is not None and job.key and job.status in SCOPE_STATUSES[job.key[0]]:
            return holder, False
        self._jobs[job.id] = job
        self._refresh(job, hold=True)
        return job, True

    def _find(self, job_id: Any, status: JobStatus | None = None) -> StoredJob | None:
        """The job of that id (if it has ``status``, when given)."""
        try:
            job = self._jobs.get(job_id)
        except TypeError:  # unhashable: no job has such an id
            return None
        return job if job is None or status is None or job.status is status else None

    def _select(self, query: JobQuery) -> list[StoredJob]:
        if query.statuses is None:
            jobs: Iterable[StoredJob] = self._jobs.values()
        else:
            statuses = {JobStatus(s) for s in query.statuses}
            jobs = itertools.chain.from_iterable(self._by_status[s].values() for s in statuses)
        return [j for j in jobs if matches(j, query)]

    def _start(self, job: StoredJob, owner: str, now: datetime, until: datetime) -> JobRecord:
        """Claim ``job``: running under a fresh lease, its attempt counted."""
        job.lease = LeaseInfo(owner, token=codec.new_token(), until=until, heartbeat_at=now)
        job.status, job.started_at, job.updated_at = RUNNING, now, now
        job.attempts += 1
        self._refresh(job)  # releases a pending-scope key, indexes the lease
        return job.record()

    def _holding(self, job_id: Any, token: str) -> StoredJob | None:
        """The job if ``token`` holds its lease (the fence), else None."""
        job = self._find(job_id, RUNNING)
        return job if job is not None and job.lease and job.lease.token == token else None

    def _settle_if(
        self, claimed: JobRecord, settlement: Settlement, expired_before: datetime | None
    ) -> JobRecord | None:
        """Apply ``settlement`` if the lease ``claimed`` came with still holds the job
        (and, for the reaper, ran out before ``expired_before``)."""
        result = encode_result(claimed.task, settlement)  # raises before any write
        with self._lock:
            return self._settle_locked(claimed, settlement, result, expired_before)

    def _settle_locked(
        self,
        claimed: JobRecord,
        settlement: Settlement,
        result: bytes | None,
        expired_before: datetime | None = None,
    ) -> JobRecord | None:
        """:meth:`_settle_if` under the lock, the result encoded."""
        lease = claimed.lease
        job = None if lease is None else self._holding(claimed.id, lease.token)
        if job is None or job.lease is None:
            return None
        if expired_before is not None and job.lease.until >= expired_before:
            return None  # a renewal landed first
        if job.cancel_requested and settlement.on_cancel is not None:
            settlement = settlement.on_cancel  # a user asked meanwhile: it ends here
        self._apply(job, settlement, result)
        return job.record()

    def _apply(self, job: StoredJob, settlement: Settlement, result: bytes | None) -> None:
        """Leave the job as ``settlement`` says (see :class:`Settlement`)."""
        s, now = settlement, ms(settlement.now)
        job.status, job.updated_at, job.lease = JobStatus(s.status), now, None
        job.attempts = job.attempts if s.attempts is None else s.attempts
        job.result, job.error = result, s.error
        if s.attempt_error is not None:
            attempt = replace(s.attempt_error, at=ms(s.attempt_error.at))
            job.errors = kept_errors(job.errors, attempt)
        if s.run_at is not None:
            job.run_at = ms(s.run_at)
        if s.scheduled_for is not None:
            job.scheduled_for = ms(s.scheduled_for)
        if s.last_run is not None:
            job.last_run = ms_in(s.last_run)
        if job.status is not WAITING:
            job.waiting_for, job.unlinked = (), False
        if job.status in FINAL_STATUSES:
            # A declared schedule never expires: cancelled, it is its own tombstone.
            keep = codec.is_schedule_id(job.id)
            job.finished_at, job.delete_at = now, None if keep else opt_ms(s.delete_at)
        self._refresh(job, hold=job.status is PENDING)

    # Dedupe keys ------------------------------------------------------------------------------
    def _holder(self, job: StoredJob) -> StoredJob | None:
        """Another job holding ``job``'s dedupe key in its scope, if any."""
        if job.key is None:
            return None
        scope, key = job.key
        held = self._keys[scope].get(key)
        return None if held is None or held == job.id else self._jobs.get(held)

    def _sync_key(self, job: StoredJob, hold: bool) -> None:
        """Release the job's key if it left the key's scope; with ``hold``, take it if
        the job is in scope and no other job holds it."""
        if job.key is None:
            return
        scope, key = job.key
        if job.status not in SCOPE_STATUSES[scope]:
            self._release_key(job)
        elif hold:
            self._keys[scope].setdefault(key, job.id)

    def _release_key(self, job: StoredJob) -> None:
        if job.key is not None:
            scope, key = job.key
            if key in self._keys[scope] and self._keys[scope][key] == job.id:
                del self._keys[scope][key]

    # Indexes ------------------------------------------------------------------------------------
    def _refresh(self, job: StoredJob, hold: bool = False) -> None:
        """After a change: file the job under its status, sync its dedupe key, and push
        a fresh index entry under a new version (older entries stop counting)."""
        if job.listed is not job.status:
            if job.listed is not None:
                del self._by_status[job.listed][job.id]
            self._by_status[job.status][job.id] = job
            job.listed = job.status
        self._sync_key(job, hold)
        job.version = next(self._counter)
        self._flow.track(job)
        if job.status is PENDING:
            pending = self._by_status[PENDING]
            self._indexes.add_pending(job, pending.values(), len(pending))
            self._watchers.notify(job.task, job.queue, job.run_at)
        elif job.status is RUNNING and job.lease is not None:
            running = self._by_status[RUNNING]
            self._indexes.add_running(job, running.values(), len(running))
