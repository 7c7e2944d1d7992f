"""Releasing the jobs that wait for others (``configure(depends_on=...)``), and the
expiry sweep: the steps that follow when a job reaches a final status, for the runner,
the reaper, :meth:`App.cancel` and the purges alike.

What each dependent does is decided by :func:`mongosched._core.outcome.after_dependency`
(and an expired job by :func:`mongosched._core.outcome.expired`); this module only finds the
jobs concerned (each lookup on an index) and writes those decisions. When a job ends,
its dependents are released at once if it is marked as having any; a crash between
the job's own write and that release is repaired by :func:`repair` (the reaper's), so
nothing waits forever. A purge releases them first (:func:`release_finished`): the
store never deletes a job still so marked. A job deleted anyway before it released
its dependents (by the server's retention, or by hand) is found by the repair's walk
of the waiting jobs, a page per pass. No scan of waiting jobs happens per claim.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from mongosched._core import outcome
from mongosched._core.outcome import Retention
from mongosched._core.records import JobRecord, JobStatus
from mongosched.errors import JobNotFound
from mongosched.store import Staged, Store

__all__ = [
    "BATCH",
    "Emit",
    "Walk",
    "checked",
    "expire_due",
    "release",
    "release_finished",
    "repair",
    "resolve_new",
]

log = logging.getLogger("mongosched")

BATCH = 100
"""Jobs read per lookup."""

Emit = Callable[[str, JobRecord], None]
"""Sends an event about a job as stored (the app's ``emit``, bound)."""


def release(
    store: Staged, job: JobRecord, *, now: datetime, retention: Retention, emit: Emit
) -> int:
    """``job`` reached a final status: release the jobs waiting for it (crossed off,
    pending once nothing remains; or ended, by the outcome's decision), and theirs in
    turn when they end. Returns how many were released. Safe to repeat."""
    if not job.status.is_final:
        return 0
    released = 0
    todo = [job]
    while todo:
        parent = todo.pop()
        while True:
            children = store.dependents.of(parent.id, BATCH)
            landed = 0
            for child in children:
                stored = _release_one(store, child, parent.id, parent.status, now, retention, emit)
                if stored is None:
                    continue
                landed += 1
                if stored.status.is_final and stored.has_dependents:
                    todo.append(stored)
            released += landed
            if len(children) < BATCH or not landed:
                break
        store.dependents.dependents_released(parent.id)
    return released


def _release_one(
    store: Staged,
    child: JobRecord,
    dependency: object,
    status: JobStatus | None,
    now: datetime,
    retention: Retention,
    emit: Emit,
) -> JobRecord | None:
    decision = outcome.after_dependency(child, dependency, status, now, retention)
    stored = store.dependents.release_dependent(child, dependency, decision.settlement)
    if stored is None:
        return None
    if stored.status is not JobStatus.WAITING:
        if stored.status.is_final:
            log.info("job %s (%s): %s", stored.id, stored.task, decision.error)
        emit(decision.event, stored)
    return stored


def checked(store: Staged, job: JobRecord, now: datetime) -> JobRecord:
    """A new job with its dependencies as ids the store knows (a string form parsed),
    each of which must exist: :class:`~mongosched.errors.JobNotFound` names the first
    that does not (so only existing jobs can be depended on: no cycle can form).
    They are marked as having dependents already."""
    if not job.depends_on:
        return job
    ids = tuple(dict.fromkeys(store.parse_id(d) for d in job.depends_on))
    found = store.dependents.link_dependencies(ids, now)
    for dependency in ids:
        if dependency not in found:
            raise JobNotFound(f"task {job.task!r}: depends_on: no job with id {dependency}")
    return replace(job, depends_on=ids, waiting_for=ids)


def resolve_new(
    store: Staged,
    job: JobRecord,
    statuses: dict[object, JobStatus],
    *,
    now: datetime,
    retention: Retention,
    emit: Emit,
) -> JobRecord:
    """A job just stored ``waiting``: cross off (or end it for) the dependencies that
    were already final when it was linked to them (``statuses``, as
    ``store.dependents.link_dependencies`` read them after the insert; a dependency
    missing there no longer exists). Returns the job as it stands."""
    ended = [(d, statuses.get(d)) for d in job.depends_on]
    return _release_ended(store, job, ended, now, retention, emit)


def _release_ended(
    store: Staged,
    job: JobRecord,
    ended: Iterable[tuple[Any, JobStatus | None]],
    now: datetime,
    retention: Retention,
    emit: Emit,
) -> JobRecord:
    """Release the waiting ``job`` from each dependency that ended with the status
    given (None: it no longer exists; one not final is passed over) until it ends
    (then its own dependents in turn). Returns the job as it stands."""
    current = job
    for dependency, status in ended:
        if status is not None and not status.is_final:
            continue
        stored = _release_one(store, current, dependency, status, now, retention, emit)
        if stored is not None:
            current = stored
        if current.status.is_final:
            release(store, current, now=now, retention=retention, emit=emit)
            break
    return current


def expire_due(
    store: Store, *, now: datetime, retention: Retention, emit: Emit, limit: int = BATCH
) -> int:
    """End the pending and waiting jobs past their expiry (index-backed, ``limit`` at a
    time): each ends ``expired``, never run. Returns how many."""
    expired = 0
    for record in store.dependents.start_deadlines_due(now, limit):
        decision = outcome.expired(record, now, retention)
        stored = store.jobs.cancel_pending(record.id, decision.settlement)
        if stored is None:  # claimed or ended meanwhile
            continue
        expired += 1
        log.info("job %s (%s): %s", stored.id, stored.task, decision.error)
        emit(decision.event, stored)
        if stored.has_dependents:
            release(store, stored, now=now, retention=retention, emit=emit)
    return expired


def release_finished(
    store: Store,
    *,
    before: datetime,
    now: datetime,
    retention: Retention,
    emit: Emit,
    pages: int | None = None,
) -> int:
    """Release the dependents of the final jobs that finished before ``before`` and are
    still marked as having some (a release a crash interrupted, or one under way:
    releasing twice changes nothing), ``BATCH`` jobs a page, ``pages`` pages (None:
    until none is left; one marked again meanwhile is not taken twice). Returns how
    many dependents were released."""
    released, seen = 0, set[Any]()
    while pages is None or pages > 0:
        page = store.dependents.unreleased(before, BATCH)
        fresh = [job for job in page if job.id not in seen]
        for job in fresh:
            released += release(store, job, now=now, retention=retention, emit=emit)
        seen.update(job.id for job in fresh)
        if len(page) < BATCH or not fresh:
            break
        pages = None if pages is None else pages - 1
    return released


@dataclass
class Walk:
    """Where a reaper's walk of the waiting jobs (for those whose dependency no longer
    exists) goes on at its next pass."""

    after: Any = None


def repair(
    store: Store,
    *,
    now: datetime,
    finished_before: datetime,
    retention: Retention,
    emit: Emit,
    walk: Walk | None = None,
) -> int:
    """The reaper's repair of releases a crash interrupted: waiting jobs whose
    dependencies were never linked (created before ``finished_before``), final jobs
    (finished before it) still marked as having dependents, waiting jobs left waiting
    for nothing, and the next page of ``walk`` (a fresh walk: the first page): waiting
    jobs whose dependency no longer exists, released as from any missing dependency
    (:func:`~mongosched._core.outcome.after_dependency`). Returns how many jobs it moved."""
    moved = 0
    for job in store.dependents.unlinked(finished_before, BATCH):
        statuses = store.dependents.link_dependencies(job.depends_on, now, job.id)
        linked = resolve_new(store, job, statuses, now=now, retention=retention, emit=emit)
        moved += linked.status is not JobStatus.WAITING
    moved += release_finished(
        store, before=finished_before, now=now, retention=retention, emit=emit, pages=1
    )
    for job in store.dependents.stranded(BATCH):  # waiting for nothing: pending now
        stored = _release_one(store, job, None, JobStatus.COMPLETED, now, retention, emit)
        moved += stored is not None and stored.status is JobStatus.PENDING
    walk = walk or Walk()
    orphans, walk.after = store.dependents.orphaned(walk.after, BATCH)
    for job, missing in orphans:
        ended = [(dependency, None) for dependency in missing]
        moved += _release_ended(store, job, ended, now, retention, emit) is not job
    return moved
