"""The in-memory store (``memory://[name]``): every job held in this process.

It keeps what MongoDB would keep: datetimes in whole milliseconds (UTC); payloads,
results and repeat rules as BSON bytes, decoded afresh for every record it returns, so
no caller can change a stored job through what it was given. Every method runs under
one lock per store: each is one atomic step, as on the server.

Claims and the reaper read ordered indexes (:mod:`.index`), never scan: a claim
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
from datetime import datetime, timedelta
from typing import Any

from mongosched._core import ranks, transitions
from mongosched._core.records import DEDUPE_SCOPE_STATUSES as SCOPE_STATUSES
from mongosched._core.records import (
    SORTABLE,
    UNSTARTED_STATUSES,
    JobQuery,
    JobRecord,
    JobStatus,
    PendingChanges,
    Renewal,
    Settlement,
    evolved,
)
from mongosched.errors import ConfigurationError, JobStateError
from mongosched.store import codec
from mongosched.store.memory.batches import MemoryBatches
from mongosched.store.memory.flow import MemoryFlow
from mongosched.store.memory.index import FlowIndex, JobIndexes
from mongosched.store.memory.limits import Limits
from mongosched.store.memory.operations import MemoryOperations
from mongosched.store.memory.permits import MemoryPermits, Permits
from mongosched.store.memory.stored import (
    PENDING,
    RUNNING,
    WAITING,
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
        self._windows: dict[tuple[str, str], Any] = {}  # a key's throttle window's job
        self._fair_last: dict[tuple[str, str], float] = {}  # a fair key's latest start
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
            return [(job.snapshot(), created) for job, created in added]

    def upsert_schedule(self, job: JobRecord, now: datetime) -> bool:
        encoded = self._encode(job)
        rule = decode_value(encoded[1])
        with self._lock:
            current = self._find(job.id)
            if current is None:
                return self._add(job, encoded)[1]
            before = current.snapshot()
            after = transitions.redeclared(before, evolved(job, repeat=rule), now)
            if after is not before:
                current.repeat = encoded[1]
                self._write(current, evolved(after, result=current.record.result))
            return False

    # Reads -----------------------------------------------------------------------------------
    def get(self, job_id: Any) -> JobRecord | None:
        with self._lock:
            job = self._find(job_id)
            return None if job is None else job.snapshot()

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
                key=lambda j: (sort_key(getattr(j.record, sort)), sort_key(j.id)),
                reverse=descending,
            )
            return [j.snapshot() for j in jobs[skip : skip + limit if limit else None]]

    def count(self, query: JobQuery) -> int:
        with self._lock:
            return len(self._select(query))

    def counts(self) -> dict[tuple[str, JobStatus], int]:
        with self._lock:
            records = [j.record for j in self._jobs.values()]
            return dict(Counter((r.label or r.task, r.status) for r in records))

    def oldest_due(self, now: datetime) -> JobRecord | None:
        now = ms(now)
        with self._lock:
            job = self._indexes.oldest_due(now)
            return None if job is None else job.snapshot()

    def running(self, limit: int = 1000) -> list[JobRecord]:
        with self._lock:
            jobs = sorted(
                self._by_status[RUNNING].values(),
                key=lambda j: (sort_key(j.record.lease and j.record.lease.until), j.seq),
            )
            return [j.snapshot() for j in jobs[: limit or None]]

    def unknown_due_tasks(self, known: Iterable[str], now: datetime) -> dict[str, int]:
        known, now = set(known), ms(now)
        with self._lock:
            due = Counter(
                j.record.task
                for j in self._by_status[PENDING].values()
                if j.record.run_at <= now and j.record.task not in known
            )
        return dict(sorted(due.items(), key=lambda item: (-item[1], item[0]))[:20])

    def schedules(self) -> list[JobRecord]:
        with self._lock:
            jobs = [j for j in self._jobs.values() if j.repeat is not None]
            jobs.sort(key=lambda j: (j.record.task, sort_key(j.id)))
            return [j.snapshot() for j in jobs]

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
        ranked: Sequence[str] = (),
    ) -> JobRecord | None:
        if not tasks:  # ranked jobs are known by their rank: ``ranked`` is not needed
            return None
        now = ms(now)
        with self._lock:
            if job_id is not None:
                job = self._find(job_id, PENDING)
                if job is None or job.record.task not in tasks:
                    return None
            else:
                job = self._indexes.take_first_due(tasks, queues, now)
                if job is None:
                    return None
            return self._start(job, owner, now, lease_duration)

    def renew(
        self,
        job_id: Any,
        token: str,
        now: datetime,
        until: datetime,
        deadline: float | None = None,
    ) -> Renewal:
        with self._lock:
            job = self._holding(job_id, token)
            if job is None:
                return Renewal(held=False)
            self._write(job, transitions.renewed(job.record, now, until))
            return Renewal(held=True, cancel_requested=job.record.cancel_requested)

    def record_slot(self, job_id: Any, token: str, slot: datetime, now: datetime) -> bool:
        with self._lock:
            job = self._holding(job_id, token)
            if job is not None:
                job.record = transitions.slot_recorded(job.record, slot, now)
            return job is not None

    def write_progress(
        self, job_id: Any, token: str, value: float | None, message: str | None, now: datetime
    ) -> bool:
        with self._lock:
            job = self._holding(job_id, token)
            if job is not None:
                job.record = transitions.progressed(job.record, value, message, now)
            return job is not None

    def settle(
        self, job: JobRecord, settlement: Settlement, patience: Patience | None = None
    ) -> JobRecord | None:
        return self._settle_if(job, settlement, expired_before=None)

    def leases_expired(self, now: datetime, limit: int = 100) -> list[JobRecord]:
        now = ms(now)
        with self._lock:
            return [job.snapshot() for job in self._indexes.leases_expired(now, limit)]

    def reap(self, job: JobRecord, now: datetime, settlement: Settlement) -> JobRecord | None:
        return self._settle_if(job, settlement, expired_before=ms(now))

    def quarantine(self, now: datetime, limit: int = 100) -> list[str]:
        """Nothing to do: every job here was made from a well-formed record."""
        return []

    # Control by users -----------------------------------------------------------------------
    def cancel_pending(self, job_id: Any, settlement: Settlement) -> JobRecord | None:
        with self._lock:
            job = self._find(job_id)
            if job is None or job.record.status not in UNSTARTED_STATUSES:
                return None
            self._settle(job, settlement, encode_result(job.record.task, settlement))
            return job.snapshot()

    def request_cancel(self, job_id: Any, now: datetime) -> JobRecord | None:
        with self._lock:
            job = self._find(job_id, RUNNING)
            if job is None:
                return None
            job.record = transitions.cancel_requested(job.record, now)
            return job.snapshot()

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
            self._write(stored, transitions.edited(stored.record, changes, now))
            return stored.snapshot()

    def retry_finished(self, job_id: Any, status: JobStatus, now: datetime) -> JobRecord | None:
        with self._lock:
            job = self._find(job_id, JobStatus(status))
            if job is None:
                return None
            self._retry(job, now)
            return job.snapshot()

    def _retry(self, job: StoredJob, now: datetime) -> None:
        """A finished job back to pending (see :meth:`retry_finished`)."""
        if self._holder(job) is not None:
            r = job.record
            raise JobStateError(
                f"job {job.id} ({r.task}): dedupe key {r.dedupe_key!r} is held by another job now"
            )
        self._write(job, transitions.retried(job.record, now), hold=True)

    def purge(
        self, statuses: Sequence[JobStatus], finished_before: datetime, task: str | None
    ) -> int:
        cutoff = ms(finished_before)
        with self._lock:
            doomed = [
                job
                for status in {JobStatus(s) for s in statuses}
                for job in self._by_status[status].values()
                if job.record.finished_at is not None
                and job.record.finished_at <= cutoff
                and (task is None or job.record.task == task)
                and purgeable(job)
            ]
            for job in doomed:
                self._delete(job)
            return len(doomed)

    def _delete(self, job: StoredJob) -> None:
        """Delete ``job`` (a purge's): index entries of its, if any, no longer count."""
        del self._jobs[job.id], self._by_status[job.record.status][job.id]
        self._release_key(job)
        window = (job.record.task, job.record.dedupe_key or "")
        if self._windows.get(window) == job.id:
            del self._windows[window]
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
        waiting = r.status is WAITING
        held = evolved(
            r,
            id=job_id,
            run_at=ms(r.run_at),
            created_at=ms(r.created_at),
            updated_at=ms(r.updated_at),
            status=JobStatus(r.status),
            lease=ms_in(r.lease),
            scheduled_for=opt_ms(r.scheduled_for),
            dedupe_scope=scope,
            progress=ms_in(r.progress),
            started_at=opt_ms(r.started_at),
            finished_at=opt_ms(r.finished_at),
            delete_at=opt_ms(r.delete_at),
            last_run=ms_in(r.last_run),
            missed=ms_in(r.missed),
            trace={str(k): str(v) for k, v in r.trace.items()} if r.trace else None,
            result=encoded[2],
            expires_at=opt_ms(r.expires_at),
            depends_on=tuple(r.depends_on),
            waiting_for=tuple(r.waiting_for) if waiting else (),
            dedupe_until=opt_ms(r.dedupe_until),
            dedupe_replace=r.dedupe_replace and r.dedupe_key is not None,
            aging=r.aging,
            fair_key=r.fair_key,
            fair_weight=r.fair_weight,
        )
        return StoredJob(
            record=held,
            payload=encoded[0],
            repeat=encoded[1],
            seq=next(self._counter),
            unlinked=waiting and bool(r.waiting_for),
        )

    def _put(self, job: StoredJob) -> tuple[StoredJob, bool]:
        """Add a new job: ``(it, True)``, or ``(the holder, False)`` if another job
        holds its dedupe key."""
        holder = self._holder(job)
        if holder is not None and job.key and job.record.status in SCOPE_STATUSES[job.key[0]]:
            if job.record.dedupe_replace and holder.record.status is PENDING:
                holder.record = transitions.replaced(holder.record, job.record)
                holder.payload = job.payload
                self._refresh(holder)
            return holder, False
        window = self._window_holder(job)
        if window is not None:
            return window, False
        if job.record.aging is not None or job.record.fair_key is not None:
            job.record = evolved(job.record, rank=self._rank(job.record))
        self._jobs[job.id] = job
        if job.record.dedupe_until is not None:
            self._windows[job.record.task, job.record.dedupe_key or ""] = job.id
        self._refresh(job, hold=True)
        return job, True

    def _find(self, job_id: Any, status: JobStatus | None = None) -> StoredJob | None:
        """The job of that id (if it has ``status``, when given)."""
        try:
            job = self._jobs.get(job_id)
        except TypeError:  # unhashable: no job has such an id
            return None
        return job if job is None or status is None or job.record.status is status else None

    def _select(self, query: JobQuery) -> list[StoredJob]:
        if query.statuses is None:
            jobs: Iterable[StoredJob] = self._jobs.values()
        else:
            statuses = {JobStatus(s) for s in query.statuses}
            jobs = itertools.chain.from_iterable(self._by_status[s].values() for s in statuses)
        return [j for j in jobs if matches(j, query)]

    def _start(self, job: StoredJob, owner: str, now: datetime, lease_duration: float) -> JobRecord:
        """Claim ``job``: running under a fresh lease, its attempt counted."""
        token = codec.new_token()
        # Releases a pending-scope key, indexes the lease.
        self._write(job, transitions.claimed(job.record, owner, token, now, lease_duration))
        return job.snapshot()

    def _holding(self, job_id: Any, token: str) -> StoredJob | None:
        """The job if ``token`` holds its lease (the fence), else None."""
        job = self._find(job_id, RUNNING)
        if job is None:
            return None
        lease = job.record.lease
        return job if lease is not None and lease.token == token else None

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
        if job is None:
            return None
        stored = job.record
        if expired_before is not None and stored.lease and stored.lease.until >= expired_before:
            return None  # a renewal landed first
        if stored.cancel_requested and settlement.on_cancel is not None:
            settlement = settlement.on_cancel  # a user asked meanwhile: it ends here
        self._settle(job, settlement, result)
        return job.snapshot()

    def _settle(self, job: StoredJob, settlement: Settlement, result: bytes | None) -> None:
        """Leave the job as ``settlement`` says (``result``: its result's BSON)."""
        job.unlinked = False  # not waiting any more
        record = transitions.settled(job.record, settlement, result)
        self._write(job, record, hold=record.status is PENDING)

    def _write(self, job: StoredJob, record: JobRecord, hold: bool = False) -> None:
        """Store ``record`` (a transition of the job's) as the job, and refresh the
        store's maps and indexes (see :meth:`_refresh`)."""
        job.record = record
        self._refresh(job, hold)

    # Dedupe keys ------------------------------------------------------------------------------
    def _holder(self, job: StoredJob) -> StoredJob | None:
        """Another job holding ``job``'s dedupe key in its scope, if any."""
        if job.key is None:
            return None
        scope, key = job.key
        held = self._keys[scope].get(key)
        return None if held is None or held == job.id else self._jobs.get(held)

    def _rank(self, job: JobRecord) -> float:
        """A new ranked job's rank (see :mod:`mongosched._core.ranks`); a fair one's
        start is its key's latest from now on."""
        since = ranks.millis(job.run_at)
        if job.fair_key is not None:
            first = self._indexes.first_ranked(job.task)
            head = None if first is None else first.record
            last = self._fair_last.get((job.task, job.fair_key))
            since = ranks.fair_start(
                since,
                ranks.millis(job.created_at),
                None
                if head is None or head.rank is None
                else ranks.since_of(head.rank, head.priority, head.aging),
                last,
                job.fair_weight,
            )
            self._fair_last[job.task, job.fair_key] = since
        return ranks.rank(since, job.priority, job.aging)

    def _window_holder(self, job: StoredJob) -> StoredJob | None:
        """The job whose throttle window for ``job``'s dedupe key is still open when
        ``job`` is scheduled, if ``job`` has a window."""
        r = job.record
        if r.dedupe_until is None:
            return None
        held = self._jobs.get(self._windows.get((r.task, r.dedupe_key or "")))
        until = None if held is None else held.record.dedupe_until
        return held if until is not None and until > r.created_at else None

    def _sync_key(self, job: StoredJob, hold: bool) -> None:
        """Release the job's key if it left the key's scope; with ``hold``, take it if
        the job is in scope and no other job holds it."""
        if job.key is None:
            return
        scope, key = job.key
        if job.record.status not in SCOPE_STATUSES[scope]:
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
        r = job.record
        if job.listed is not r.status:
            if job.listed is not None:
                del self._by_status[job.listed][r.id]
            self._by_status[r.status][r.id] = job
            job.listed = r.status
        self._sync_key(job, hold)
        job.version = next(self._counter)
        self._flow.track(job)
        if r.status is PENDING:
            pending = self._by_status[PENDING]
            self._indexes.add_pending(job, pending.values(), len(pending))
            self._watchers.notify(r.task, r.queue, r.run_at)
        elif r.status is RUNNING and r.lease is not None:
            running = self._by_status[RUNNING]
            self._indexes.add_running(job, running.values(), len(running))
