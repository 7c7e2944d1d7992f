"""Jobs, times and settlements for the contract tests, in the scheduler's own terms.

Settlements come from :mod:`mongosched._core.outcome`, as the runner and the reaper make them.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta, timezone
from typing import Any

from mongosched._core import outcome
from mongosched._core.outcome import Ending, Retention
from mongosched._core.records import JobRecord, Settlement
from mongosched.store import Store

# Far in the future of the real clock: finished jobs expire (retention) after T0, and a
# TTL index (a server's within a minute, the stand-in's at once) deletes jobs whose expiry
# lies in the real past.
T0 = datetime(2099, 3, 1, 12, 0, 0, tzinfo=timezone.utc)
LATER = T0 + timedelta(minutes=1)
LEASE = 30.0
RETENTION = Retention()


def sec(n: float) -> timedelta:
    return timedelta(seconds=n)


def job(task: str = "t", *, at: datetime = T0, **fields: Any) -> JobRecord:
    """A new job (no id yet) of ``task``, due ``at``."""
    return JobRecord(task=task, run_at=at, created_at=T0, updated_at=T0, **fields)


def add(store: Store, *records: JobRecord) -> list[JobRecord]:
    """Insert jobs that must all be created; the jobs as stored."""
    results = store.jobs.insert(records)
    assert [created for _, created in results] == [True] * len(records)
    return [stored for stored, _ in results]


def claim(
    store: Store,
    tasks: tuple[str, ...] = ("t",),
    queues: tuple[str, ...] | None = None,
    now: datetime = LATER,
    job_id: Any = None,
    lease: float = LEASE,
    owner: str = "me",
) -> JobRecord | None:
    return store.claims.claim(
        owner=owner, tasks=tasks, queues=queues, now=now, lease_duration=lease, job_id=job_id
    )


def as_stored(store: Store, records: Sequence[Any], *args: tuple[Any, ...]) -> None:
    """Each of ``records`` is its job as ``store`` holds it; with ``args``, the jobs'
    arguments are those, in that order."""
    if args:
        assert [r.args for r in records] == list(args)
    for record in records:
        assert record == store.jobs.get(record.id)


def settle_and_claim(
    store: Store,
    items: Sequence[tuple[JobRecord, Any]],
    limit: int,
    now: datetime = LATER,
    records: bool = True,
) -> tuple[list[Any], list[JobRecord]]:
    """Write ``items``' outcomes and claim up to ``limit`` jobs of task ``t`` at once
    (``settle_and_claim``, as owner ``me``)."""
    return store.claims.settle_and_claim(
        items,
        owner="me",
        tasks=("t",),
        queues=None,
        now=now,
        lease_duration=LEASE,
        limit=limit,
        records=records,
    )


def batch(
    store: Store,
    limit: int,
    tasks: tuple[str, ...] = ("t",),
    queues: tuple[str, ...] | None = None,
    owner: str = "me",
    now: datetime = LATER,
) -> list[JobRecord]:
    """Claim up to ``limit`` jobs at once (``claim_batch``)."""
    return store.claims.claim_batch(
        owner=owner, tasks=tasks, queues=queues, now=now, lease_duration=LEASE, limit=limit
    )


def claimed(store: Store, **options: Any) -> JobRecord:
    """Claim a job that must be there."""
    got = claim(store, **options)
    assert got is not None and got.lease is not None
    return got


def token(running: JobRecord) -> str:
    assert running.lease is not None
    return running.lease.token


def succeeded(running: JobRecord, now: datetime = LATER, result: Any = None) -> Settlement:
    """The function returned ``result``: completed, or the next slot of a repeating job."""
    return outcome.decide(
        running, Ending.SUCCESS, now=now, retention=RETENTION, result=result
    ).settlement


def raised(
    running: JobRecord, now: datetime = LATER, error: BaseException | None = None
) -> Settlement:
    """The function raised: pending again while attempts remain (at once), else failed."""
    return outcome.decide(
        running, Ending.ERROR, now=now, retention=RETENTION, error=error or ValueError("boom")
    ).settlement


def lapsed(running: JobRecord, now: datetime) -> Settlement:
    """The reaper's decision about a job whose lease ran out."""
    return outcome.decide(running, Ending.LEASE_EXPIRED, now=now, retention=RETENTION).settlement


def given_back(running: JobRecord, now: datetime = LATER) -> Settlement:
    """The claim given back unrun: pending in its place, the attempt uncounted."""
    return outcome.given_back(running, now)


def cancelled(now: datetime = LATER) -> Settlement:
    return outcome.cancelled(now, RETENTION)


def ids(records: Any) -> list[Any]:
    return [r.id if r is not None else None for r in records]
