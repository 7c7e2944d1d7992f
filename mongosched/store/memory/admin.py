"""The in-memory store's :class:`~mongosched.store.control.Admin` part (of
:class:`~mongosched.store.memory.MemoryStore`), beyond one job at a time: bulk writes
by filter, pauses, schedule edits, the registry of live runners and throughput. Each
method is one atomic step under the store's lock, as its MongoDB counterpart is one
write per batch."""

from __future__ import annotations

import heapq
import itertools
import logging
from collections.abc import Iterable, Sequence
from dataclasses import replace
from datetime import datetime
from typing import Any

from mongosched._core import transitions
from mongosched._core.records import (
    IDLE_SCHEDULE_STATUSES,
    OPEN_STATUSES,
    AuditEntry,
    JobQuery,
    JobRecord,
    JobStatus,
    Pause,
    QueueBacklog,
    RunnerInfo,
    ScheduleChanges,
    Settlement,
)
from mongosched.errors import JobStateError
from mongosched.store import codec
from mongosched.store.memory.stored import (
    PAUSED,
    PENDING,
    RUNNING,
    StoredJob,
    ms,
    purgeable,
    sort_key,
)
from mongosched.store.memory.table import MemoryTable

__all__ = ["MemoryAdmin"]

log = logging.getLogger("mongosched.store")


class MemoryAdmin:
    """Bulk writes, pauses, schedule edits and the runner registry, in memory."""

    def __init__(self, table: MemoryTable) -> None:
        self._table = table
        self._pauses: dict[tuple[str, str], Pause] = {}
        self._runners: dict[str, tuple[RunnerInfo, datetime]] = {}
        self._audit: list[tuple[AuditEntry, datetime | None, int]] = []
        self._audit_seq = itertools.count()

    # Bulk operations -------------------------------------------------------------------------
    def select_ids(self, query: JobQuery, *, after: Any = None, limit: int = 500) -> list[Any]:
        start = None if after is None else sort_key(after)
        with self._table.lock:
            keyed = [(sort_key(job.id), job.id) for job in self._table.select(query)]
        found = [kv for kv in keyed if start is None or kv[0] > start]
        return [job_id for _, job_id in heapq.nsmallest(limit, found, key=lambda kv: kv[0])]

    def retry_many(self, ids: Sequence[Any], statuses: Sequence[JobStatus], now: datetime) -> int:
        wanted, now, retried = set(statuses), ms(now), 0
        with self._table.lock:
            for job_id in ids:
                job = self._table.find(job_id)
                if job is None or job.record.status not in wanted or not job.record.status.is_final:
                    continue
                try:
                    self._table.retry(job, now)
                except JobStateError as exc:
                    log.warning("%s; not retried", exc)
                    continue
                retried += 1
        return retried

    def cancel_many(self, ids: Sequence[Any], settlement: Settlement) -> tuple[int, int]:
        cancelled = requested = 0
        with self._table.lock:
            for job_id in ids:
                job = self._table.find(job_id)
                if job is None:
                    continue
                if job.record.status in OPEN_STATUSES:
                    self._table.settle(job, settlement, None)
                    cancelled += 1
                elif job.record.status is RUNNING and not job.record.cancel_requested:
                    job.record = transitions.cancel_requested(job.record, settlement.now)
                    requested += 1
        return cancelled, requested

    def purge_many(self, ids: Sequence[Any], statuses: Sequence[JobStatus]) -> int:
        final = {s for s in statuses if s.is_final}
        deleted = 0
        with self._table.lock:
            for job_id in ids:
                job = self._table.find(job_id)
                if job is None or job.record.status not in final or not purgeable(job):
                    continue
                self._table.delete(job)
                deleted += 1
        return deleted

    def finished_counts(self, since: datetime, bucket: float) -> dict[tuple[int, JobStatus], int]:
        since = ms(since)
        counts: dict[tuple[int, JobStatus], int] = {}
        with self._table.lock:
            for status in (JobStatus.COMPLETED, JobStatus.FAILED):
                for job in self._table.by_status[status].values():
                    finished = job.record.finished_at
                    if finished is not None and finished >= since:
                        key = (int((finished - since).total_seconds() // bucket), status)
                        counts[key] = counts.get(key, 0) + 1
        return counts

    def open_counts(self) -> dict[tuple[str, str, JobStatus], int]:
        counts: dict[tuple[str, str, JobStatus], int] = {}
        with self._table.lock:
            for status, jobs in self._table.by_status.items():
                if status.is_final:
                    continue
                for job in jobs.values():
                    key = (job.record.queue, job.record.task, status)
                    counts[key] = counts.get(key, 0) + 1
        return counts

    def backlog(self, now: datetime) -> dict[str, QueueBacklog]:
        now = ms(now)
        found: dict[str, QueueBacklog] = {}
        with self._table.lock:
            for stored in self._table.by_status[PENDING].values():
                job = stored.record
                if job.run_at <= now:
                    seen = found.get(job.queue, QueueBacklog(0, None))
                    oldest = job.run_at if seen.oldest is None else min(seen.oldest, job.run_at)
                    found[job.queue] = replace(seen, due=seen.due + 1, oldest=oldest)
            for stored in self._table.by_status[RUNNING].values():
                job = stored.record
                seen = found.get(job.queue, QueueBacklog(0, None))
                lapsed = job.lease is not None and job.lease.until < now
                found[job.queue] = replace(
                    seen, running=seen.running + 1, expired=seen.expired + int(lapsed)
                )
        return found

    # Pauses and schedule edits -----------------------------------------------------------------
    def add_pause(self, pause: Pause) -> bool:
        with self._table.lock:
            key = (pause.kind, pause.name)
            if key in self._pauses:
                return False
            self._pauses[key] = replace(pause, since=ms(pause.since))
            return True

    def remove_pause(self, kind: str, name: str) -> bool:
        with self._table.lock:
            return self._pauses.pop((kind, name), None) is not None

    def pauses(self) -> list[Pause]:
        with self._table.lock:
            return [self._pauses[key] for key in sorted(self._pauses)]

    def pending_queues(self) -> list[str]:
        with self._table.lock:
            return self._table.indexes.pending_queues()

    def task_names(self) -> list[str]:
        # No index by task here: the table is read (a memory:// store holds one
        # process's jobs, for demos and tests).
        with self._table.lock:
            return sorted({job.record.task for job in self._table.jobs.values()})

    def labels(self) -> list[str]:
        with self._table.lock:
            labels = (job.record.label for job in self._table.jobs.values())
            return sorted({label for label in labels if label is not None})

    def pause_label(self, label: str, now: datetime, ids: Sequence[Any] | None = None) -> int:
        with self._table.lock:
            if ("task", label) not in self._pauses:  # resumed meanwhile
                return 0
            if ids is None:
                pending: Iterable[StoredJob] = self._table.by_status[PENDING].values()
            else:  # a runner pausing the job it claimed: no look at the others
                pending = filter(None, (self._table.find(job_id, PENDING) for job_id in ids))
            chosen = in_order(job for job in pending if job.record.label == label)
            for job in chosen:
                self._table.write(job, transitions.paused(job.record, now))
            return len(chosen)

    def resume_label(self, label: str, now: datetime) -> int:
        with self._table.lock:
            chosen = in_order(
                j for j in self._table.by_status[PAUSED].values() if j.record.label == label
            )
            for job in chosen:
                self._table.write(job, transitions.resumed(job.record, now), hold=True)
            return len(chosen)

    def pause_schedules(self, ids: Sequence[Any], now: datetime) -> int:
        moved = 0
        with self._table.lock:
            for job_id in ids:
                job = self._table.find(job_id, PENDING)
                paused = ("schedule", str(job_id)) in self._pauses
                if job is not None and job.repeat is not None and paused:
                    self._table.write(job, transitions.paused(job.record, now))
                    moved += 1
        return moved

    def resume_unpaused(self, now: datetime) -> int:
        with self._table.lock:
            chosen = in_order(  # the reaper's sweep, every reap interval: no look at the backlog
                job
                for job in self._table.by_status[PAUSED].values()
                if (job.record.label is not None or job.repeat is not None)
                and ("task", job.record.label) not in self._pauses
                and (job.repeat is None or ("schedule", str(job.id)) not in self._pauses)
            )
            for job in chosen:
                self._table.write(job, transitions.resumed(job.record, now), hold=True)
            return len(chosen)

    def resume_schedule(self, job_id: Any, now: datetime) -> JobRecord | None:
        with self._table.lock:
            job = self._table.find(job_id, PAUSED)
            if job is None:
                return None
            self._table.write(job, transitions.resumed(job.record, now), hold=True)
            return job.snapshot()

    def insert_runs(
        self, schedule_id: Any, jobs: Sequence[JobRecord]
    ) -> list[tuple[JobRecord, bool]] | None:
        encoded = [self._table.encode(job) for job in jobs]
        with self._table.lock:  # the schedule read and the jobs stored in one step
            schedule = self._table.find(schedule_id)
            if schedule is None or schedule.record.status.is_final:
                return None
            added = [self._table.add(job, data) for job, data in zip(jobs, encoded, strict=True)]
            return [(job.snapshot(), created) for job, created in added]

    def update_schedule(
        self, job: JobRecord, changes: ScheduleChanges, now: datetime
    ) -> JobRecord | None:
        repeat = None
        if changes.repeat is not None:  # checked before anything is written
            repeat = codec.encode_value(job.task, "repeat", dict(changes.repeat))
        with self._table.lock:
            stored = self._table.find(job.id)
            if (
                stored is None
                or stored.record.status not in IDLE_SCHEDULE_STATUSES
                or stored.record.updated_at != ms(job.updated_at)
            ):
                return None
            if repeat is not None:
                stored.repeat = repeat
            self._table.write(stored, transitions.schedule_edited(stored.record, changes, now))
            return stored.snapshot()

    # Live runners -------------------------------------------------------------------------------
    def save_runner(self, runner: RunnerInfo, expire_at: datetime) -> None:
        with self._table.lock:
            self._runners[runner.id] = (runner, ms(expire_at))

    def remove_runner(self, runner_id: str) -> None:
        with self._table.lock:
            self._runners.pop(runner_id, None)

    # The audit trail -----------------------------------------------------------------------
    def record_audit(self, entry: AuditEntry, expire_at: datetime | None) -> None:
        kept = replace(entry, at=ms(entry.at))
        with self._table.lock:
            until = None if expire_at is None else ms(expire_at)
            self._audit.append((kept, until, next(self._audit_seq)))
            if len(self._audit) % 1000 == 0:  # now and then, forget what expired
                latest = max(e.at for e, _, _ in self._audit)
                self._audit = [a for a in self._audit if a[1] is None or a[1] > latest]

    def audit_entries(self, now: datetime, limit: int = 100, job: Any = None) -> list[AuditEntry]:
        now = ms(now)
        with self._table.lock:
            live = [
                (e.at, seq, e)
                for e, until, seq in self._audit
                if (until is None or until > now) and (job is None or e.job == job)
            ]
        live.sort(key=lambda item: (item[0], item[1]), reverse=True)
        return [e for _, _, e in live[: limit or None]]

    def runners(self, now: datetime) -> list[RunnerInfo]:
        now = ms(now)
        with self._table.lock:
            for runner_id, (_, expire_at) in list(self._runners.items()):
                if expire_at <= now:  # as the TTL index would have deleted it
                    del self._runners[runner_id]
            found = [runner for runner, _ in self._runners.values()]
        return sorted(found, key=lambda r: (r.name, r.id))


def in_order(jobs: Iterable[StoredJob]) -> list[StoredJob]:
    """``jobs`` in the order they were stored, each once (a map by status, or a list of
    ids, may hold them in another)."""
    return sorted({job.id: job for job in jobs}.values(), key=lambda job: job.seq)
