"""claim_batch: up to a limit of jobs at once, in claim order, each under a lease of its
own; racing claimers (batched or single) never take one job twice."""

from __future__ import annotations

from typing import Any

from mongosched.records import JobStatus
from mongosched.store import Store

from .helpers import LATER, LEASE, T0, add, claim, ids, job, sec, succeeded, token
from .test_atomicity import race


def batch(
    store: Store,
    limit: int,
    tasks: tuple[str, ...] = ("t",),
    queues: tuple[str, ...] | None = None,
    owner: str = "me",
    now: Any = LATER,
) -> list[Any]:
    return store.claim_batch(
        owner=owner, tasks=tasks, queues=queues, now=now, lease_duration=LEASE, limit=limit
    )


def test_a_batch_takes_up_to_its_limit_in_claim_order(store: Store) -> None:
    late_low = add(store, job(priority=5, at=T0 - sec(10)))[0]
    high_now = add(store, job(priority=1, at=T0))[0]
    early = add(store, *[job(priority=1, at=T0 - sec(5)) for _ in range(3)])
    add(store, job(priority=0, at=LATER + sec(1)))  # not due
    first = batch(store, 2)
    assert ids(first) == [early[0].id, early[1].id]
    second = batch(store, 10)
    assert ids(second) == [early[2].id, high_now.id, late_low.id]
    assert batch(store, 10) == []


def test_each_job_of_a_batch_is_claimed_as_a_single_claim_would(store: Store) -> None:
    queued = add(store, *[job(attempts=1, max_attempts=5, args=(n,)) for n in range(4)])
    got = batch(store, 4, owner="worker-1")
    assert ids(got) == ids(queued)
    tokens = {token(r) for r in got}
    assert len(tokens) == 4  # a lease, and a token, of its own
    for record, before in zip(got, queued, strict=True):
        assert record.status is JobStatus.RUNNING and record.attempts == 2
        assert record.args == before.args
        assert record.lease is not None and record.lease.owner == "worker-1"
        assert record.lease.until == LATER + sec(LEASE)
        assert record.started_at == record.updated_at == LATER
        assert store.get(record.id) == record


def test_each_job_of_a_batch_is_fenced_by_its_own_token(store: Store) -> None:
    first, second = batch_of_two(store)
    # Another job's token does not hold this job's lease.
    assert not store.renew(first.id, token(second), LATER, LATER + sec(60)).held
    assert not store.write_progress(second.id, token(first), 0.5, None, LATER)
    assert store.renew(first.id, token(first), LATER, LATER + sec(60)).held
    done = store.settle(second, succeeded(second))
    assert done is not None and done.status is JobStatus.COMPLETED
    assert store.get(first.id).status is JobStatus.RUNNING  # type: ignore[union-attr]


def batch_of_two(store: Store) -> list[Any]:
    add(store, job(), job())
    got = batch(store, 2)
    assert len(got) == 2
    return got


def test_a_batch_takes_only_due_jobs_of_the_listed_tasks_and_queues(store: Store) -> None:
    other_task, other_queue, mine, also_mine = add(
        store,
        job("other", priority=1),
        job(queue="q2", priority=1),
        job(queue="q1"),
        job(queue="q3"),
    )
    add(store, job(queue="q1", at=LATER + sec(60)))  # not due
    assert batch(store, 5, tasks=()) == []
    assert batch(store, 5, queues=()) == []
    assert ids(batch(store, 5, queues=("q1", "q3"))) == [mine.id, also_mine.id]
    assert ids(batch(store, 5, tasks=("t",))) == [other_queue.id]
    assert batch(store, 5) == []
    assert ids(batch(store, 5, tasks=("nothing", "other"))) == [other_task.id]
    assert len(batch(store, 5, now=LATER + sec(60))) == 1


def test_a_batch_never_exceeds_its_limit(store: Store) -> None:
    add(store, *[job() for _ in range(7)])
    sizes = []
    while got := batch(store, 3):
        sizes.append(len(got))
    assert sizes == [3, 3, 1]


def test_racing_batch_claimers_take_each_job_once(store: Store) -> None:
    add(store, *[job(priority=1 + n % 3) for n in range(60)])

    def drain(n: int) -> list[Any]:
        taken: list[Any] = []
        while True:
            got = batch(store, 1 + n % 5, owner=f"w{n}") if n % 4 else [claim(store)]
            got = [r for r in got if r is not None]
            if not got:
                return taken
            assert len(got) <= 1 + n % 5
            taken.extend(r.id for r in got)

    every = [job_id for taken in race(drain, threads=8) for job_id in taken]
    assert len(every) == len(set(every)) == 60
    assert batch(store, 5) == []


def test_racing_batches_of_few_jobs_leave_none_claimed_twice_or_lost(store: Store) -> None:
    queued = add(store, *[job() for _ in range(5)])
    results = race(lambda n: batch(store, 5, owner=f"w{n}"), threads=8)
    every = [r.id for got in results for r in got]
    assert sorted(map(str, every)) == sorted(str(r.id) for r in queued)
    owners = {r.id: r.lease.owner for got in results for r in got}
    for job_id, owner in owners.items():
        stored = store.get(job_id)
        assert stored is not None and stored.lease is not None and stored.lease.owner == owner
        assert stored.attempts == 1
