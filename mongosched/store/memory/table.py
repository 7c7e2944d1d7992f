"""The jobs of one in-memory store and their bookkeeping (:class:`MemoryTable`): the
table of stored jobs, the maps by status and dedupe key, the ordered indexes, the one
lock and the counter of sequence numbers and versions.

Every part of :class:`~mongosched.store.memory.MemoryStore` works through one table
under its lock. The table writes a job in one place (:meth:`MemoryTable.write`, which
files the job again under its status and key and pushes a fresh index entry), so no
part keeps a map of its own in step with the jobs.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any

from mongosched._core import ranks, transitions
from mongosched._core.records import DEDUPE_SCOPE_STATUSES as SCOPE_STATUSES
from mongosched._core.records import (
    REPLACEABLE_STATUSES,
    JobQuery,
    JobRecord,
    JobStatus,
    Settlement,
    evolved,
)
from mongosched.errors import JobStateError
from mongosched.store import codec
from mongosched.store.claimant import here
from mongosched.store.memory.index import FlowIndex, JobIndexes
from mongosched.store.memory.stored import (
    PENDING,
    RUNNING,
    WAITING,
    StoredJob,
    matches,
    ms,
    ms_in,
    opt_ms,
)
from mongosched.store.memory.watch import DueWatchers

__all__ = ["MemoryTable", "holds_window"]


class MemoryTable:
    """One store's jobs, maps and indexes, and the lock every part takes to use them.
    All methods but :meth:`encode` expect the lock held."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.counter = itertools.count()  # seqs and versions
        self.jobs: dict[Any, StoredJob] = {}
        self.by_status: dict[JobStatus, dict[Any, StoredJob]] = {s: {} for s in JobStatus}
        self.keys: dict[str, dict[tuple[str, str], Any]] = {"active": {}, "pending": {}}
        self.windows: dict[tuple[str, str], Any] = {}  # a key's throttle window's job
        self.fair_last: dict[tuple[str, str], float] = {}  # a fair key's latest start
        self.fair_claimed: dict[str, float] = {}  # a fair task's latest start claimed
        self.indexes = JobIndexes(self.jobs)
        self.flow = FlowIndex(self.jobs)
        self.watchers = DueWatchers()

    def after_fork(self) -> None:
        """A fresh lock in a forked child: a thread of the parent may have held this one."""
        self.lock = threading.Lock()
        self.watchers.after_fork()

    # New jobs ---------------------------------------------------------------------------------
    def encode(self, job: JobRecord) -> tuple[bytes, bytes | None, bytes | None]:
        """A new job's payload, repeat rule and result as BSON; raises before anything
        is written (SerializationError naming what cannot be stored)."""
        repeat = job.repeat
        return (
            codec.encode_payload(job.task, job.args, job.kwargs),
            None if repeat is None else codec.encode_value(job.task, "repeat", dict(repeat)),
            None if job.result is None else codec.encode_value(job.task, "result", job.result),
        )

    def add(
        self, record: JobRecord, encoded: tuple[bytes, bytes | None, bytes | None]
    ) -> tuple[StoredJob, bool]:
        """Store a new job: ``(it, True)``; ``(the job, True)`` if its id exists already;
        ``(the holder, False)`` if another job holds its dedupe key."""
        job_id = codec.new_id() if record.id is None else record.id
        existing = self.find(job_id)
        if existing is not None:
            return existing, True
        return self.put(self.stored(record, encoded, job_id))

    def stored(
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
            seq=next(self.counter),
            unlinked=waiting and bool(r.waiting_for),
        )

    def put(self, job: StoredJob) -> tuple[StoredJob, bool]:
        """Add a new job: ``(it, True)``, or ``(the holder, False)`` if another job
        holds its dedupe key."""
        window = self.window_holder(job)  # a call with a window: its holder first
        if window is not None:
            return window, False
        holder = self.rival(job)
        if holder is not None:
            if job.record.dedupe_replace:
                self.replace(holder, job)
            return holder, False
        if job.record.aging is not None or job.record.fair_key is not None:
            job.record = self.ranked(job.record, job.record.created_at)
        self.jobs[job.id] = job
        if job.record.dedupe_until is not None:
            self.windows[job.record.task, job.record.dedupe_key or ""] = job.id
        self._refresh(job, hold=True)
        return job, True

    def replace(self, holder: StoredJob, job: StoredJob) -> bool:
        """Debounce: ``holder`` (stored, or held by a transaction) takes what ``job``, a
        later call with its dedupe key, replaces, if it still waits to be claimed."""
        if holder.record.status not in REPLACEABLE_STATUSES:
            return False
        holder.record = transitions.replaced(holder.record, job.record)
        holder.payload = job.payload
        if self.jobs.get(holder.id) is holder:
            self._refresh(holder)
        return True

    def find(self, job_id: Any, status: JobStatus | None = None) -> StoredJob | None:
        """The job of that id (if it has ``status``, when given)."""
        try:
            job = self.jobs.get(job_id)
        except TypeError:  # unhashable: no job has such an id
            return None
        return job if job is None or status is None or job.record.status is status else None

    def select(self, query: JobQuery) -> list[StoredJob]:
        if query.statuses is None:
            jobs: Iterable[StoredJob] = self.jobs.values()
        else:
            statuses = {JobStatus(s) for s in query.statuses}
            jobs = itertools.chain.from_iterable(self.by_status[s].values() for s in statuses)
        return [j for j in jobs if matches(j, query)]

    def start(self, job: StoredJob, owner: str, now: datetime, lease_duration: float) -> JobRecord:
        """Claim ``job``: running under a fresh lease, its attempt counted."""
        token = codec.new_token()
        task, start = job.record.task, job.record.fair_at
        if start is not None and start > self.fair_claimed.get(task, start - 1):
            self.fair_claimed[task] = start  # the task's fair clock moves on
        # Releases a pending-scope key, indexes the lease.
        self.write(job, transitions.claimed(job.record, owner, token, now, lease_duration, here()))
        return job.snapshot()

    def holding(self, job_id: Any, token: str) -> StoredJob | None:
        """The job if ``token`` holds its lease (the fence), else None."""
        job = self.find(job_id, RUNNING)
        if job is None:
            return None
        lease = job.record.lease
        return job if lease is not None and lease.token == token else None

    def settle_locked(
        self,
        claimed: JobRecord,
        settlement: Settlement,
        result: bytes | None,
        expired_before: datetime | None = None,
    ) -> JobRecord | None:
        """:meth:`settle_if` under the lock, the result encoded."""
        lease = claimed.lease
        job = None if lease is None else self.holding(claimed.id, lease.token)
        if job is None:
            return None
        stored = job.record
        if expired_before is not None and stored.lease and stored.lease.until >= expired_before:
            return None  # a renewal landed first
        if stored.cancel_requested and settlement.on_cancel is not None:
            settlement = settlement.on_cancel  # a user asked meanwhile: it ends here
        self.settle(job, settlement, result)
        return job.snapshot()

    def settle(self, job: StoredJob, settlement: Settlement, result: bytes | None) -> None:
        """Leave the job as ``settlement`` says (``result``: its result's BSON)."""
        job.unlinked = False  # not waiting any more
        record = transitions.settled(job.record, settlement, result)
        self.write(job, record, hold=record.status is PENDING)

    def write(self, job: StoredJob, record: JobRecord, hold: bool = False) -> None:
        """Store ``record`` (a transition of the job's) as the job, and refresh the
        store's maps and indexes (see :meth:`_refresh`)."""
        job.record = record
        self._refresh(job, hold)

    def retry(self, job: StoredJob, now: datetime) -> None:
        """A finished job back to pending (a user's retry, one or many)."""
        if self.holder(job) is not None:
            r = job.record
            raise JobStateError(
                f"job {job.id} ({r.task}): dedupe key {r.dedupe_key!r} is held by another job now"
            )
        self.write(job, transitions.retried(job.record, now), hold=True)

    def delete(self, job: StoredJob) -> None:
        """Delete ``job`` (a purge's): index entries of its, if any, no longer count."""
        del self.jobs[job.id], self.by_status[job.record.status][job.id]
        self._release_key(job)
        window = (job.record.task, job.record.dedupe_key or "")
        if self.windows.get(window) == job.id:
            del self.windows[window]
        self.flow.forget(job)

    # Dedupe keys ------------------------------------------------------------------------------
    def holder(self, job: StoredJob) -> StoredJob | None:
        """Another job holding ``job``'s dedupe key in its scope, if any."""
        if job.key is None:
            return None
        scope, key = job.key
        held = self.keys[scope].get(key)
        return None if held is None or held == job.id else self.jobs.get(held)

    def rival(self, job: StoredJob) -> StoredJob | None:
        """Another job holding ``job``'s dedupe key, if ``job`` has a status the key's
        scope counts (one outside it does not contend for the key)."""
        if job.key is None or job.record.status not in SCOPE_STATUSES[job.key[0]]:
            return None
        return self.holder(job)

    def ranked(self, job: JobRecord, now: datetime) -> JobRecord:
        """A ranked job with its rank at ``now`` (see :mod:`mongosched._core.ranks`); a
        fair one with its start too (its key's latest from now on), or unplaced while
        it is not due."""
        since, start = ranks.millis(job.run_at), None
        if job.fair_key is not None:
            if job.run_at > now:
                return evolved(job, rank=ranks.unplaced(since), fair_at=None)
            head = self.indexes.first_due_ranked(job.task, now)
            clock = ranks.fair_clock(
                None if head is None else head.record.fair_at,
                self.fair_claimed.get(job.task),
                ranks.millis(now),
            )
            last = self.fair_last.get((job.task, job.fair_key))
            since = start = ranks.fair_start(clock, last, job.fair_weight)
            self.fair_last[job.task, job.fair_key] = start
        return evolved(job, rank=ranks.rank(since, job.priority, job.aging), fair_at=start)

    def place(self, tasks: Sequence[str], queues: Sequence[str] | None, now: datetime) -> None:
        """Give the unplaced fair jobs of ``tasks`` in ``queues`` due by ``now`` their
        start, the earliest due first."""
        for job in self.indexes.unplaced_due(tasks, queues, now):
            self.write(job, self.ranked(job.record, now))

    def window_holder(self, job: StoredJob) -> StoredJob | None:
        """The job whose throttle window for ``job``'s dedupe key is still open when
        ``job`` is scheduled, if ``job`` has a window."""
        r = job.record
        if r.dedupe_until is None:
            return None
        held = self.jobs.get(self.windows.get((r.task, r.dedupe_key or "")))
        return held if held is not None and holds_window(held, job) else None

    def _sync_key(self, job: StoredJob, hold: bool) -> None:
        """Release the job's key if it left the key's scope; with ``hold``, take it if
        the job is in scope and no other job holds it."""
        if job.key is None:
            return
        scope, key = job.key
        if job.record.status not in SCOPE_STATUSES[scope]:
            self._release_key(job)
        elif hold:
            self.keys[scope].setdefault(key, job.id)

    def _release_key(self, job: StoredJob) -> None:
        if job.key is not None:
            scope, key = job.key
            if key in self.keys[scope] and self.keys[scope][key] == job.id:
                del self.keys[scope][key]

    # Indexes ------------------------------------------------------------------------------------
    def _refresh(self, job: StoredJob, hold: bool = False) -> None:
        """After a change: file the job under its status, sync its dedupe key, and push
        a fresh index entry under a new version (older entries stop counting)."""
        r = job.record
        if job.listed is not r.status:
            if job.listed is not None:
                del self.by_status[job.listed][r.id]
            self.by_status[r.status][r.id] = job
            job.listed = r.status
        self._sync_key(job, hold)
        job.version = next(self.counter)
        self.flow.track(job)
        if r.status is PENDING:
            pending = self.by_status[PENDING]
            self.indexes.add_pending(job, pending.values(), len(pending))
            self.watchers.notify(r.task, r.queue, r.run_at)
        elif r.status is RUNNING and r.lease is not None:
            running = self.by_status[RUNNING]
            self.indexes.add_running(job, running.values(), len(running))


def holds_window(held: StoredJob, job: StoredJob) -> bool:
    """Whether ``held``'s throttle window is still open when ``job``, a call with a
    window for the same dedupe key, is scheduled."""
    until = held.record.dedupe_until
    return (
        job.record.dedupe_until is not None and until is not None and until > job.record.created_at
    )
