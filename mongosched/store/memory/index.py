"""The in-memory store's ordered indexes: pending jobs for claims, running jobs by
lease expiry.

Pending jobs sit in one heap per bucket ``task -> queue -> priority``, ordered by
``(run_at, seq)`` (``seq`` is insertion order: equal due times are served first in,
first out); running jobs in one heap by lease expiry. Entries are deleted lazily: each
carries the version its job had when it was pushed, and counts only while its job keeps
that version and the index's status. Stale heads are popped when looked at, and an index
grown to twice its live size (plus a margin) is rebuilt, so garbage costs amortised O(1)
per write. Finding the first due job looks at one head per non-empty bucket of the tasks
and queues asked for: O(buckets + log n).

Flow control has indexes of its own (:class:`FlowIndex`), so that its sweeps do not
scan either: a heap of expiring jobs, the waiting jobs by what they wait for, the
finished jobs still marked as having dependents, what is waited for but no longer
exists. The caller holds the store's lock.
"""

from __future__ import annotations

import heapq
import logging
from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any

from mongosched._core import ranks
from mongosched._core.records import UNSTARTED_STATUSES as UNSTARTED
from mongosched._core.records import JobStatus, evolved
from mongosched.store.memory.stored import PENDING, RUNNING, Entry, StoredJob, sort_key

__all__ = ["FlowIndex", "JobIndexes"]

log = logging.getLogger("mongosched.store")

Ranked = tuple[float, tuple[datetime, int], int, Any]
"""A ranked job's claim index entry: (rank, (due time, job seq), job version, job id):
equal ranks are taken by due time, as the ``claim_ranked`` index orders them."""

SLACK = 1024
"""Stale entries an index may carry beyond its live size before it is rebuilt."""


class JobIndexes:
    """The claim index and the lease index over ``jobs`` (the store's table)."""

    def __init__(self, jobs: dict[Any, StoredJob]) -> None:
        self._jobs = jobs
        self._claims: dict[str, dict[str, dict[float, list[Entry]]]] = {}
        self._ranked: dict[str, dict[str, list[Ranked]]] = {}
        """Ranked jobs (see :mod:`mongosched._core.ranks`): one heap per ``task -> queue``
        by ``(rank, due time, seq)``."""
        self._unplaced: dict[str, dict[str, list[Ranked]]] = {}
        """Unplaced fair jobs (not due when scheduled, no start yet): one heap per
        ``task -> queue`` by rank (their due time)."""
        self._claim_entries = 0
        self._leases: list[Entry] = []
        self.examined = 0
        """Entries looked at since :meth:`take_first_due` last began (for tests)."""

    # Keeping them up to date ------------------------------------------------------------------
    def add_pending(self, job: StoredJob, pending: Iterable[StoredJob], live: int) -> None:
        """``job`` became (or stays) pending under a new version."""
        self._push_claim(job)
        if self._claim_entries > 2 * live + SLACK:  # mostly stale: rebuild
            log.debug("rebuilding the claim index (%d entries, %d live)", self._claim_entries, live)
            self._claims, self._ranked, self._unplaced, self._claim_entries = {}, {}, {}, 0
            for other in pending:
                self._push_claim(other)

    def add_running(self, job: StoredJob, running: Iterable[StoredJob], live: int) -> None:
        """``job`` is running with a lease (new, or renewed under a new version)."""
        lease = job.record.lease
        assert lease is not None
        heapq.heappush(self._leases, (lease.until, job.seq, job.version, job.id))
        if len(self._leases) > 2 * live + SLACK:  # a sorted list is a heap
            self._leases = sorted(
                (j.record.lease.until, j.seq, j.version, j.id) for j in running if j.record.lease
            )

    def _push_claim(self, job: StoredJob) -> None:
        r = job.record
        self._claim_entries += 1
        if r.rank is not None:
            heap = self._ranked.setdefault(r.task, {}).setdefault(r.queue, [])
            heapq.heappush(heap, (r.rank, (r.run_at, job.seq), job.version, r.id))
            if r.fair_key is not None and r.fair_at is None:
                heap = self._unplaced.setdefault(r.task, {}).setdefault(r.queue, [])
                heapq.heappush(heap, (r.rank, (r.run_at, job.seq), job.version, r.id))
            return
        by_priority = self._claims.setdefault(r.task, {}).setdefault(r.queue, {})
        entry = (r.run_at, job.seq, job.version, r.id)
        heapq.heappush(by_priority.setdefault(r.priority, []), entry)

    def _valid(self, entry: Entry | Ranked, status: JobStatus) -> bool:
        """Whether an index entry still stands for its job (same version and status)."""
        self.examined += 1
        job = self._jobs.get(entry[3])
        return job is not None and job.version == entry[2] and job.record.status is status

    # Reading them -------------------------------------------------------------------------------
    def take_first_due(
        self, tasks: Sequence[str], queues: Sequence[str] | None, now: datetime
    ) -> StoredJob | None:
        """Remove and return the first due pending job (by priority, due time, then
        first in) of ``tasks`` in ``queues`` (None: any)."""
        self.examined = 0
        heap = self._first_due(tasks, queues, now)
        if self._ranked:
            ranked = self._first_ranked(tasks, queues, now)
            if ranked is not None and (heap is None or ranked[0] < self._key(heap[0], now)):
                return self._jobs[ranked[1]]  # its entry goes stale once it is claimed
        if heap is None:
            return None
        self._claim_entries -= 1
        return self._jobs[heapq.heappop(heap)[3]]

    def unplaced_due(
        self, tasks: Sequence[str], queues: Sequence[str] | None, now: datetime
    ) -> list[StoredJob]:
        """The unplaced fair jobs of ``tasks`` in ``queues`` (None: any) due by
        ``now``, the earliest due first; taken out of the unplaced index."""
        found: list[Ranked] = []
        until = ranks.unplaced_until(now)[1]
        for task in tasks:
            by_queue = self._unplaced.get(task, {})
            for queue in list(by_queue) if queues is None else queues:
                heap = by_queue.get(queue, [])
                while heap and heap[0][0] <= until:
                    entry = heapq.heappop(heap)
                    if self._valid(entry, PENDING):
                        found.append(entry)
        return [self._jobs[entry[3]] for entry in sorted(found)]

    def first_due_ranked(self, task: str, now: datetime) -> StoredJob | None:
        """The first due pending ranked job of ``task`` in rank order (its claim order:
        one task, one interval), in any queue."""
        first = self._first_ranked([task], None, now)
        return None if first is None else self._jobs[first[1]]

    def _key(self, entry: Entry | Ranked, now: datetime) -> tuple[float, float]:
        job = self._jobs[entry[3]].record
        return ranks.claim_key(job.priority, job.run_at, job.rank, job.aging, now)

    def _first_ranked(
        self, tasks: Sequence[str], queues: Sequence[str] | None, now: datetime
    ) -> tuple[tuple[float, float], Any] | None:
        """The claim key and id of the first due ranked job of ``tasks`` in ``queues``:
        each heap is read in rank order up to its first due job (those not yet due
        before it are put back)."""
        best: tuple[tuple[float, float], Any] | None = None
        for task in tasks:
            by_queue = self._ranked.get(task)
            if not by_queue:
                continue
            for queue in list(by_queue) if queues is None else queues:
                heap = by_queue.get(queue)
                if heap is None:
                    continue
                skipped = []
                while (entry := self._claim_head(heap)) is not None:
                    if self._jobs[entry[3]].record.run_at <= now:
                        key = self._key(entry, now)
                        if best is None or key < best[0]:
                            best = key, entry[3]
                        break
                    skipped.append(heapq.heappop(heap))
                for entry in skipped:
                    heapq.heappush(heap, entry)
        return best

    def oldest_due(self, now: datetime) -> StoredJob | None:
        heads = [
            self._claim_head(heap)
            for by_queue in self._claims.values()
            for by_priority in by_queue.values()
            for heap in by_priority.values()
        ]
        due = [entry for entry in heads if entry is not None and entry[0] <= now]
        for by_queue in self._ranked.values():  # their heads, by rank
            for ranked in by_queue.values():
                head = self._claim_head(ranked)
                job = None if head is None else self._jobs[head[3]]
                if job is not None and job.record.run_at <= now:
                    due.append((job.record.run_at, job.seq, job.version, job.id))
        return self._jobs[min(due)[3]] if due else None

    def pending_tasks(self) -> set[str]:
        """The tasks the claim index files pending jobs under (a superset: a task whose
        jobs all left may stay until a claim looks at it); O(tasks), not O(jobs)."""
        return self._claims.keys() | self._ranked.keys()

    def pending_queues(self) -> list[str]:
        """The queues holding pending jobs: one look at the heads of each bucket."""
        queues: set[str] = set()
        for by_queue in self._claims.values():
            for queue, by_priority in by_queue.items():
                if queue not in queues and any(
                    self._claim_head(heap) is not None for heap in by_priority.values()
                ):
                    queues.add(queue)
        for by_ranked in self._ranked.values():
            queues.update(q for q, heap in by_ranked.items() if self._claim_head(heap) is not None)
        return sorted(queues)

    def leases_expired(self, now: datetime, limit: int) -> list[StoredJob]:
        """Running jobs whose lease ran out before ``now``, oldest first."""
        heap, found = self._leases, list[Entry]()
        while heap and (len(found) < limit or not limit) and heap[0][0] < now:
            entry = heapq.heappop(heap)
            if self._valid(entry, RUNNING):
                found.append(entry)
        for entry in found:  # they stay running until reaped
            heapq.heappush(heap, entry)
        return [self._jobs[entry[3]] for entry in found]

    def _claim_head(self, heap: list[Any]) -> Any:
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
        """The claim heap whose head is the first due job; drops buckets found empty."""
        best: tuple[float, datetime, int] | None = None
        found: list[Entry] | None = None
        for task in tasks:
            by_queue = self._claims.get(task)
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
                del self._claims[task]
        return found


class FlowIndex:
    """The flow-control indexes over a store's jobs (kept current by :meth:`track`)."""

    def __init__(self, jobs: dict[Any, StoredJob]) -> None:
        self._jobs = jobs
        self._expiring: list[Entry] = []
        self._expiring_cap = SLACK
        self._waiting: dict[Any, set[Any]] = {}  # dependency -> jobs waiting for it
        self._registered: dict[Any, tuple[Any, ...]] = {}  # job -> what it is filed under
        self._stranded: set[Any] = set()  # waiting for nothing any more
        self._flagged: set[Any] = set()  # marked as having dependents
        self._unlinked: set[Any] = set()  # waiting, dependencies not yet linked
        self._gone: set[Any] = set()  # waited for, but no such job (any more)

    def track(self, job: StoredJob) -> None:
        """After a change of ``job`` (under a new version)."""
        r = job.record
        self._gone.discard(r.id)
        if r.expires_at is not None and r.status in UNSTARTED:
            heapq.heappush(self._expiring, (r.expires_at, job.seq, job.version, r.id))
            if len(self._expiring) > self._expiring_cap:
                self._rebuild_expiring()
        waits = r.waiting_for if r.status is JobStatus.WAITING else ()
        old = self._registered.get(job.id, ())
        if old != waits:
            for dep in set(old) - set(waits):
                self._waiting.get(dep, set()).discard(job.id)
                if not self._waiting.get(dep, True):
                    del self._waiting[dep]
                    self._gone.discard(dep)
            for dep in waits:
                self._waiting.setdefault(dep, set()).add(job.id)
                if dep not in self._jobs:
                    self._gone.add(dep)
            if waits:
                self._registered[job.id] = tuple(waits)
            else:
                self._registered.pop(job.id, None)
        if r.status is JobStatus.WAITING and not r.waiting_for:
            self._stranded.add(job.id)
        else:
            self._stranded.discard(job.id)
        if r.has_dependents:
            self._flagged.add(job.id)
        else:
            self._flagged.discard(job.id)
        if job.unlinked and r.status is JobStatus.WAITING:
            self._unlinked.add(job.id)
        else:
            self._unlinked.discard(job.id)

    def forget(self, job: StoredJob) -> None:
        """``job`` was deleted."""
        job.record = evolved(job.record, status=JobStatus.CANCELLED, has_dependents=False)
        job.unlinked = False
        self.track(job)
        if job.id in self._waiting:  # jobs wait for it still
            self._gone.add(job.id)

    def _rebuild_expiring(self) -> None:
        self._expiring = sorted(
            (j.record.expires_at, j.seq, j.version, j.id)
            for j in self._jobs.values()
            if j.record.expires_at is not None and j.record.status in UNSTARTED
        )
        self._expiring_cap = 2 * len(self._expiring) + SLACK

    def start_deadlines_due(self, now: datetime, limit: int) -> list[StoredJob]:
        heap, found = self._expiring, list[Entry]()
        while heap and len(found) < limit and heap[0][0] <= now:
            entry = heapq.heappop(heap)
            job = self._jobs.get(entry[3])
            if job is not None and job.version == entry[2] and job.record.status in UNSTARTED:
                found.append(entry)
        for entry in found:  # they stay until settled
            heapq.heappush(heap, entry)
        return [self._jobs[entry[3]] for entry in found]

    def dependents(self, job_id: Any, limit: int) -> list[StoredJob]:
        jobs = [self._jobs[i] for i in self._waiting.get(job_id, ()) if i in self._jobs]
        return sorted(jobs, key=lambda j: j.seq)[:limit]

    def stranded(self, limit: int) -> list[StoredJob]:
        return [self._jobs[i] for i in list(self._stranded)[:limit] if i in self._jobs]

    def orphaned(self, after: Any, limit: int) -> list[tuple[StoredJob, tuple[Any, ...]]]:
        start = None if after is None else sort_key(after)
        found = {
            self._jobs[i]
            for dep in self._gone
            for i in self._waiting.get(dep, ())
            if i in self._jobs and (start is None or sort_key(i) > start)
        }
        jobs = sorted(found, key=lambda j: sort_key(j.id))[:limit]
        return [(j, tuple(d for d in j.record.waiting_for if d in self._gone)) for j in jobs]

    def unlinked(self, before: datetime, limit: int) -> list[StoredJob]:
        jobs = [
            j
            for i in self._unlinked
            if (j := self._jobs.get(i)) is not None and j.record.created_at < before
        ]
        return sorted(jobs, key=lambda j: j.seq)[:limit]

    def unreleased(self, before: datetime, limit: int) -> list[StoredJob]:
        jobs = [
            j
            for i in self._flagged
            if (j := self._jobs.get(i)) is not None
            and j.record.status.is_final
            and j.record.finished_at is not None
            and j.record.finished_at < before
        ]
        return sorted(jobs, key=lambda j: (j.record.finished_at, j.seq))[:limit]
