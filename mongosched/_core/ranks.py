"""Ranked jobs: priority aging and fair shares across keys, as one number per job.

A job of a task with ``aging`` or a ``fair_key`` carries a **rank**, set when it is
inserted: ``since + (priority - 1) * interval``, in milliseconds since the epoch.

* ``interval`` is the task's aging interval (seconds per priority level), or
  :data:`STRICT` for a task that does not age (a level then weighs decades: priority
  decides first, as for ordinary jobs).
* ``since`` is its due time; for a fair task, its **fair start** instead: the keys of a
  task take turns on one virtual clock (start-time fair queueing). A job of key *k*
  starts at ``max(V, last start of k + QUANTUM / weight of k)`` (:func:`fair_start`),
  where ``V`` is the task's **fair clock** (:func:`fair_clock`): the later of the
  fair start of its first *due* pending job in rank order (the head; the time now
  when none is due) and the latest fair start among its claimed jobs. A key with a
  backlog has its starts spread ahead of ``V``; a new key starts at ``V`` and is
  taken next, then alternates with the others in proportion to the weights. The
  clock moves only as jobs are claimed: a job nobody claims (a queue no runner
  serves or one paused, a long retry delay) cannot hold it back, since claims of
  later starts move it on. A job due later than it is scheduled has no start yet:
  it is **unplaced** (its rank :func:`unplaced`, past every start, so it sorts
  after the due jobs and its wait holds nothing back), and takes its start, from
  the clock of then, when a claim of its task and queue finds it due (a find on the
  ranked index, by the rank's range: :func:`unplaced_until`).

The start is stored with the job (``fair_at``), not derived from its rank, so an edit of
its priority moves no other job; it ranks the edited job again from its start
(:func:`edited_rank`).

At a given time ``now``, the job's effective priority is ``priority`` less one level per
``interval`` waited since ``since`` (it keeps rising past 1). Ranks sort the same way
as effective priorities among jobs of one interval (``since + (priority - 1) *
interval`` is the time the job reaches priority 1): a level is worth an interval of
waiting, so a priority-9 job is served as if due eight intervals later. A claim takes
each ranked task's jobs in rank order (an index of their own; one task has one
interval, so its rank order is its claim order) and merges them with each other and
with ordinary jobs by effective priority, then due time (:func:`claim_key`): the one
rule of both stores. Nothing here reads or writes: the store does, with these.
"""

from __future__ import annotations

from datetime import datetime, timezone

__all__ = [
    "QUANTUM",
    "STRICT",
    "UNPLACED",
    "claim_key",
    "unplaced",
    "unplaced_until",
    "edited_rank",
    "effective_priority",
    "fair_clock",
    "fair_start",
    "millis",
    "rank",
]

STRICT = 1e9
"""The interval (seconds per level) of a ranked job that does not age: about 31 years."""
QUANTUM = 1.0
"""The fair clock's step for one job of a key of weight 1, in milliseconds."""
EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
UNPLACED = 1e15
"""Where the ranks of unplaced fair jobs begin: past every start (about the year 33,600),
below a float's whole-millisecond limit."""


def millis(when: datetime) -> float:
    """A time as milliseconds since the epoch (what ranks are counted in)."""
    return (when - EPOCH).total_seconds() * 1000.0


def rank(since: float, priority: float, aging: float | None) -> float:
    """The rank of a job of ``priority`` waiting since ``since`` (milliseconds)."""
    return since + (priority - 1) * (STRICT if aging is None else aging) * 1000.0


def since_of(job_rank: float, priority: float, aging: float | None) -> float:
    """What :func:`rank` was given as ``since``."""
    return job_rank - (priority - 1) * (STRICT if aging is None else aging) * 1000.0


def edited_rank(
    job_rank: float | None,
    fair_at: float | None,
    priority: float,
    aging: float | None,
    run_at: datetime,
) -> float | None:
    """The rank of a ranked job once an edit (or a debounce) set its priority to
    ``priority`` and its due time to ``run_at``. A placed fair job that does not age
    is ranked from its fair start again, so that priority still decides first among
    its task's jobs (its start, and every other job, stay). An unplaced fair job
    waits for its new due time (:func:`unplaced`), and takes its rank, from its
    priority then, when it is placed. An aging job keeps its rank: it is fixed when
    the job is scheduled."""
    if job_rank is None:
        return None
    if fair_at is None:
        return unplaced(millis(run_at)) if job_rank >= UNPLACED else job_rank
    return job_rank if aging is not None else rank(fair_at, priority, None)


def effective_priority(
    priority: float, job_rank: float, aging: float | None, now: datetime
) -> float:
    """The priority of a ranked job at ``now``: one level higher (a smaller number) per
    ``aging`` seconds waited since ``since``, and lower before it. It keeps rising past
    1, and it is a function of the rank for one interval: among jobs of one interval
    the order is the rank's, a level being worth an interval of waiting (what lets a
    store read each task's ranked jobs in rank order and merge them by this)."""
    if aging is None:
        return priority
    # priority - (now - since) / aging, with since = since_of(job_rank, priority,
    # aging): the same number, computed from the rank alone, so that jobs of one rank
    # tie exactly rather than by the rounding of their priorities.
    return 1.0 + (job_rank - millis(now)) / (aging * 1000.0)


def unplaced(due: float) -> float:
    """The rank of a fair job due at ``due`` (milliseconds) that has no start yet."""
    return UNPLACED + due


def unplaced_until(now: datetime) -> tuple[float, float]:
    """The range of ranks of the unplaced fair jobs due by ``now``."""
    return UNPLACED, unplaced(millis(now))


def fair_clock(head: float | None, claimed: float | None, now: float) -> float:
    """A fair task's virtual time ``V`` (milliseconds): the later of ``head``, the fair
    start of its first due pending job in rank order (None: none is due; ``now``
    then), and ``claimed``, the latest fair start among its claimed jobs (None:
    none)."""
    clock = now if head is None else head
    return clock if claimed is None else max(clock, claimed)


def fair_start(clock: float, last: float | None, weight: float) -> float:
    """The fair start of a job of a key scheduled when the task's fair clock is
    ``clock`` (:func:`fair_clock`), whatever its due time; ``last`` is the key's
    latest fair start (None: it has none)."""
    if last is None:
        return clock
    return max(clock, last + QUANTUM / weight)


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
