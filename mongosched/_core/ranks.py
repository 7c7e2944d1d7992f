"""Ranked jobs: priority aging and fair shares across keys, as one number per job.

A job of a task with ``aging`` or a ``fair_key`` carries a **rank**, set when it is
inserted: ``since + (priority - 1) * interval``, in milliseconds since the epoch.

* ``interval`` is the task's aging interval (seconds per priority level), or
  :data:`STRICT` for a task that does not age (a level then weighs decades: priority
  decides first, as for ordinary jobs).
* ``since`` is its due time; for a fair task, its **fair start** instead: the keys of a
  task take turns on one virtual clock (start-time fair queueing). A job of key *k*
  starts at ``max(V, last start of k + QUANTUM / weight of k)``, where ``V`` is the
  task's virtual time: the fair start of its first pending job in claim order (the
  head), shifted by how far the job is due in the future. A key with a backlog has its
  starts spread ahead of ``V``; a new key starts at ``V`` and is taken next, then
  alternates with the others in proportion to the weights.

At a given time ``now``, the job's effective priority is ``priority`` less one level per
``interval`` waited since ``since`` (it keeps rising past 1). Ranks sort the same way
as effective priorities among jobs of one interval (``since + (priority - 1) *
interval`` is the time the job reaches priority 1): a level is worth an interval of
waiting, so a priority-9 job is served as if due eight intervals later. A claim takes
the ranked jobs in rank order (an index of their own) and merges them with ordinary
jobs by effective priority, then due time (:func:`claim_key`). Nothing here reads or
writes: the store does, with these.
"""

from __future__ import annotations

from datetime import datetime, timezone

__all__ = [
    "QUANTUM",
    "STRICT",
    "claim_key",
    "effective_priority",
    "fair_start",
    "millis",
    "rank",
]

STRICT = 1e9
"""The interval (seconds per level) of a ranked job that does not age: about 31 years."""
QUANTUM = 1.0
"""The fair clock's step for one job of a key of weight 1, in milliseconds."""
EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


def millis(when: datetime) -> float:
    """A time as milliseconds since the epoch (what ranks are counted in)."""
    return (when - EPOCH).total_seconds() * 1000.0


def rank(since: float, priority: float, aging: float | None) -> float:
    """The rank of a job of ``priority`` waiting since ``since`` (milliseconds)."""
    return since + (priority - 1) * (STRICT if aging is None else aging) * 1000.0


def since_of(job_rank: float, priority: float, aging: float | None) -> float:
    """What :func:`rank` was given as ``since``."""
    return job_rank - (priority - 1) * (STRICT if aging is None else aging) * 1000.0


def effective_priority(
    priority: float, job_rank: float, aging: float | None, now: datetime
) -> float:
    """The priority of a ranked job at ``now``: one level higher (a smaller number) per
    ``aging`` seconds waited since it was due. It keeps rising past 1: among jobs of one
    interval, the order is the rank's, a level being worth an interval of waiting."""
    if aging is None:
        return priority
    waited = max(0.0, millis(now) - since_of(job_rank, priority, aging)) / 1000.0
    return priority - waited / aging


def fair_start(
    due: float, now: float, head: float | None, last: float | None, weight: float
) -> float:
    """The fair start of a job of a key due at ``due`` (milliseconds; ``now`` likewise):
    ``head`` is the fair start of the task's first pending job in claim order (None:
    none pending), ``last`` the latest fair start of the key (None: it has none)."""
    lag = 0.0 if head is None else max(0.0, now - head)
    start = due - lag
    if last is not None:
        start = max(start, last + QUANTUM / weight)
    return start


def claim_key(
    priority: float, run_at: datetime, job_rank: float | None, aging: float | None, now: datetime
) -> tuple[float, float]:
    """Where a due job comes in a claim that merges ranked and ordinary jobs: its
    effective priority, then its due time (a ranked job's ``since``)."""
    if job_rank is None:
        return priority, millis(run_at)
    return (
        effective_priority(priority, job_rank, aging, now),
        since_of(job_rank, priority, aging),
    )
