"""claim_batch: up to a limit of jobs at once, in claim order, each under a lease of its
own; racing claimers (batched or single) never take one job twice."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from mongosched._core import outcome
from mongosched._core.outcome import Ending
from mongosched._core.records import JobRecord, JobStatus, LogEntry, Settlement
from mongosched.errors import SerializationError
from mongosched.store import Store
from mongosched.store.parts import Landed
from tests.support.tasks import Unreadable

from .helpers import (
    LATER,
    LEASE,
    RETENTION,
    T0,
    add,
    as_stored,
    batch,
    claim,
    claimed,
    given_back,
    ids,
    job,
    lapsed,
    raised,
    sec,
    settle_and_claim,
    succeeded,
    token,
)
from .test_atomicity import race


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
        assert store.jobs.get(record.id) == record


def test_each_job_of_a_batch_is_fenced_by_its_own_token(store: Store) -> None:
    first, second = batch_of_two(store)
    # Another job's token does not hold this job's lease.
    assert not store.leases.renew(first.id, token(second), LATER, LATER + sec(60)).held
    assert not store.leases.write_progress(second.id, token(first), 0.5, None, LATER)
    assert store.leases.renew(first.id, token(first), LATER, LATER + sec(60)).held
    done = store.leases.settle(second, succeeded(second))
    assert done is not None and done.status is JobStatus.COMPLETED
    assert store.jobs.get(first.id).status is JobStatus.RUNNING  # type: ignore[union-attr]


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


@pytest.mark.parametrize(("limit", "sizes"), [(2, [2, 2, 2, 1]), (4, [4, 3]), (5, [5, 2])])
def test_a_batch_never_exceeds_its_limit(store: Store, limit: int, sizes: list[int]) -> None:
    add(store, *[job() for _ in range(7)])
    taken = []
    while got := batch(store, limit):
        taken.append(len(got))
    assert taken == sizes


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
        stored = store.jobs.get(job_id)
        assert stored is not None and stored.lease is not None and stored.lease.owner == owner
        assert stored.attempts == 1


# settle_many --------------------------------------------------------------------------------
def test_settle_many_lands_each_settlement_and_returns_the_jobs_as_stored(store: Store) -> None:
    """Every kind of settlement at once; the records returned are the jobs as stored
    (a store may compute them instead of reading them back: they must agree)."""
    declared = job(id="schedule:t", repeat={"every": 60.0}, scheduled_for=T0)
    assert store.jobs.upsert_schedule(declared, T0)
    add(
        store,
        job(args=("done",)),
        job(args=("retried",), max_attempts=3, dedupe_key="k", dedupe_scope="pending"),
        job(args=("failed",), dedupe_key="a"),
        job(args=("given back",), max_attempts=2),
        job(args=("progress",)),
        job(args=("dated",), priority=9),
    )
    running = {r.args[0] if r.args else r.id: r for r in batch(store, 10)}
    assert len(running) == 7
    progress = running["progress"]
    assert store.leases.write_progress(progress.id, token(progress), 0.5, "half", LATER + sec(1))
    at = LATER + sec(2)
    when = LATER + timedelta(microseconds=1500)
    settlements = {
        "done": lambda r: succeeded(r, at, result={"n": 1, "s": "x"}),
        "retried": lambda r: raised(r, at),
        "failed": lambda r: raised(r, at),
        "given back": lambda r: given_back(r, at),
        "progress": lambda r: succeeded(r, at, result=[1, 2]),
        "dated": lambda r: succeeded(r, at, result={"when": when, "t": (1, 2)}),
        "schedule:t": lambda r: succeeded(r, at, result=7),
    }
    items = [(running[name], settle(running[name])) for name, settle in settlements.items()]
    results = dict(zip(settlements, store.claims.settle_many(items), strict=True))
    for name, result in results.items():
        assert isinstance(result, JobRecord), (name, result)
        assert result == store.jobs.get(running[name].id), name
    statuses = {name: r.status.value for name, r in results.items()}  # type: ignore[union-attr]
    assert statuses == {
        "done": "completed",
        "retried": "pending",
        "failed": "failed",
        "given back": "pending",
        "progress": "completed",
        "dated": "completed",
        "schedule:t": "pending",
    }
    done = results["done"]
    assert isinstance(done, JobRecord) and done.result == {"n": 1, "s": "x"}
    assert done.finished_at == at and done.delete_at is not None and done.lease is None
    dated = results["dated"]
    assert isinstance(dated, JobRecord) and dated.result == {
        "when": LATER + sec(0.001),
        "t": [1, 2],
    }
    kept = results["progress"]
    assert isinstance(kept, JobRecord) and kept.progress is not None
    assert kept.progress.message == "half"
    tick = results["schedule:t"]
    assert isinstance(tick, JobRecord) and tick.last_run is not None
    assert tick.run_at == T0 + sec(60) and tick.delete_at is None
    # The retried job holds its pending-scope key again; the failed one let its key go.
    [(holder, created)] = store.jobs.insert([job(dedupe_key="k", dedupe_scope="pending")])
    assert holder.id == running["retried"].id and not created
    [(_, created)] = store.jobs.insert([job(dedupe_key="a")])
    assert created


def test_settle_many_reports_each_job_alone(store: Store) -> None:
    """A lost lease, a cancel requested meanwhile and a result that cannot be stored
    each concern their own job only, reported as a single settle reports them."""
    add(store, *[job(max_attempts=3) for _ in range(5)])
    lost, cancelled, unstorable, fine, also_fine = batch(store, 5)
    # lost: its lease ran out and another runner holds it now.
    later = LATER + sec(LEASE + 1)
    assert store.leases.reap(lost, later, lapsed(lost, later)) is not None
    taken = claim(store, now=later, owner="other")
    assert taken is not None and taken.id == lost.id
    assert store.jobs.request_cancel(cancelled.id, later) is not None
    items = [
        (lost, succeeded(lost, later)),
        (cancelled, succeeded(cancelled, later, result="done")),
        (unstorable, succeeded(unstorable, later, result=object())),
        (fine, succeeded(fine, later, result=1)),
        (also_fine, raised(also_fine, later)),
    ]
    results = store.claims.settle_many(items)
    assert results[0] is None
    assert store.jobs.get(lost.id) == taken  # the other worker's lease is untouched
    assert isinstance(results[1], JobRecord) and results[1].status is JobStatus.CANCELLED
    assert results[1] == store.jobs.get(cancelled.id) and results[1].result == "done"
    assert isinstance(results[2], SerializationError) and "return value" in str(results[2])
    assert store.jobs.get(unstorable.id) == unstorable  # nothing written for it
    assert isinstance(results[3], JobRecord) and results[3].status is JobStatus.COMPLETED
    assert results[3] == store.jobs.get(fine.id)
    assert isinstance(results[4], JobRecord) and results[4].status is JobStatus.PENDING
    assert results[4] == store.jobs.get(also_fine.id) and results[4].attempts == 1


@pytest.mark.parametrize("claiming", [False, True], ids=["settle_many", "settle_and_claim"])
def test_a_result_whose_encoding_raises_anything_concerns_its_own_job_only(
    store: Store, claiming: bool
) -> None:
    """Encoding a result runs the value's own code (a mapping's ``__getitem__``): an
    exception from it, whatever its type, is that job's SerializationError, and the
    others' outcomes (and claims) land."""
    add(store, *[job(args=(n,)) for n in range(5)])
    first, bad, last = batch(store, 3)
    items = [
        (first, succeeded(first, result=1)),
        (bad, succeeded(bad, result=Unreadable())),
        (last, succeeded(last, result=3)),
    ]
    if claiming:
        results, got = settle_and_claim(store, items, 10)
        assert [r.args for r in got] == [(3,), (4,)]
    else:
        results = store.claims.settle_many(items)
    assert isinstance(results[1], SerializationError)
    assert "task 't': return value" in str(results[1])
    assert store.jobs.get(bad.id) == bad  # nothing written for it
    for n, running in ((0, first), (2, last)):
        stored = results[n]
        assert isinstance(stored, JobRecord) and stored.status is JobStatus.COMPLETED
        assert stored == store.jobs.get(running.id) and stored.result == n + 1


def test_settle_many_of_the_same_claim_from_racing_threads_lands_once(store: Store) -> None:
    add(store, job(), job())
    first, second = batch(store, 2)
    results = race(
        lambda n: store.claims.settle_many(
            [(first, succeeded(first, result=n)), (second, succeeded(second, result=n))]
        ),
        threads=8,
    )
    for i, running_job in enumerate((first, second)):
        landed = [r[i] for r in results if r[i] is not None]
        assert len(landed) == 1 and landed[0] == store.jobs.get(running_job.id)


def test_settle_many_of_nothing_is_nothing(store: Store) -> None:
    assert store.claims.settle_many([]) == []


# settle_and_claim ---------------------------------------------------------------------------
@pytest.mark.parametrize("records", [True, False], ids=["records", "landed"])
@pytest.mark.parametrize("limit", [2, 10], ids=["one at a time", "batched"])
def test_settle_and_claim_settles_as_settle_many_and_claims_as_claim_batch(
    store: Store, limit: int, records: bool
) -> None:
    """The outcomes of finished jobs and the next claims together: each settlement
    reported as settle_many reports it (a cancel requested meanwhile, a lease lost and
    taken by another runner concern their own job only), the claims those of
    claim_batch, in claim order; a settlement that misses never keeps a claim from
    landing, nor the other way round. Without ``records``, one that landed as written
    may come back as Landed: what it says of the job, and the record it makes (once),
    are the job as stored."""
    add(store, *[job(max_attempts=3, args=(n,)) for n in range(3)])
    done, cancelled, lost = batch(store, 3)
    queued = add(store, *[job(args=(n,), at=T0 + sec(n)) for n in range(3, 7)])
    later = LATER + sec(LEASE + 1)
    assert store.jobs.request_cancel(cancelled.id, later) is not None
    assert store.leases.reap(lost, later, lapsed(lost, later)) is not None
    taken = claim(store, now=later, owner="other", job_id=lost.id)
    assert taken is not None
    items = [
        (done, succeeded(done, later, result={"n": 1})),
        (cancelled, succeeded(cancelled, later)),
        (lost, succeeded(lost, later)),
        (queued[0], succeeded(queued[0], later)),  # never claimed: no lease to settle
    ]
    settled, got = settle_and_claim(store, items, limit, now=later, records=records)
    assert ids(got) == ids(queued[: min(limit, 4)])
    for record in got:
        assert record == store.jobs.get(record.id) and record.status is JobStatus.RUNNING
        assert record.lease is not None and record.lease.owner == "me"
    if isinstance(settled[0], Landed):
        assert not records
        assert settled[0].status is JobStatus.COMPLETED and settled[0].repeat is None
        assert not settled[0].has_dependents
        assert settled[0].record() is settled[0].record()  # made once
        settled[0] = settled[0].record()
    assert isinstance(settled[0], JobRecord) and settled[0].status is JobStatus.COMPLETED
    assert settled[0] == store.jobs.get(done.id) and settled[0].result == {"n": 1}
    assert isinstance(settled[1], JobRecord) and settled[1].status is JobStatus.CANCELLED
    assert settled[1] == store.jobs.get(cancelled.id)
    assert settled[2] is None and store.jobs.get(lost.id) == taken  # the other's lease holds
    assert settled[3] is None


def test_settle_and_claim_without_outcomes_or_without_tasks(store: Store) -> None:
    """No outcomes: a claim_batch. No tasks (or a limit of 0): a settle_many."""
    add(store, *[job(args=(n,)) for n in range(4)])
    settled, got = settle_and_claim(store, [], 3)
    assert settled == [] and [r.args for r in got] == [(0,), (1,), (2,)]
    first = got[0]
    settled, none = store.claims.settle_and_claim(
        [(first, succeeded(first))],
        owner="me",
        tasks=(),
        queues=None,
        now=LATER,
        lease_duration=LEASE,
        limit=5,
    )
    assert none == [] and settled == [store.jobs.get(first.id)]
    assert settled[0] is not None and settled[0].status is JobStatus.COMPLETED
    settled, none = settle_and_claim(store, [(got[1], succeeded(got[1]))], 0)
    assert none == [] and settled == [store.jobs.get(got[1].id)]
    assert [r.args for r in batch(store, 5)] == [(3,)]  # the limits held


def test_log_entries_land_with_the_outcome_and_stay_until_replaced(store: Store) -> None:
    """A settlement's log entries are written with it (alone, in a batch, with claims,
    and with what lands instead when a cancel was requested); one without any leaves
    them as they are."""
    a, b, _, _ = add(store, *[job(max_attempts=3) for _ in range(4)])
    entries = (
        LogEntry(T0, "INFO", "shop.orders", "charged 12.50 EUR", 1),
        LogEntry(T0 + sec(0.25), "ERROR", "shop.orders", "refund failed: é\nTraceback ...", 1),
    )

    def logged(running: JobRecord, ending: Ending = Ending.SUCCESS) -> Settlement:
        error = ValueError("no") if ending is Ending.ERROR else None
        decided = outcome.decide(
            running, ending, now=LATER, retention=RETENTION, error=error, logs=entries
        )
        return decided.settlement

    running = claimed(store)
    settled = store.leases.settle(running, logged(running))
    assert settled is not None and settled.id == a.id and settled.logs == entries
    as_stored(store, [settled])
    first, second = batch(store, 2)
    many = store.claims.settle_many(
        [(first, logged(first, Ending.ERROR)), (second, succeeded(second))]
    )
    assert [r.logs for r in many] == [entries, ()]  # type: ignore[union-attr]
    as_stored(store, many)
    last = claimed(store)
    done, got = settle_and_claim(store, [(last, logged(last))], 1)
    assert done[0].logs == entries
    as_stored(store, done)
    assert [r.id for r in got] == [b.id] and got[0].logs == entries  # its first attempt's
    back = store.leases.settle(got[0], given_back(got[0]))  # no entries: they stay
    assert back is not None and back.logs == entries
    again = claimed(store)
    assert store.jobs.request_cancel(again.id, LATER) is not None
    ended = store.leases.settle(again, logged(again))  # lands as its on_cancel
    assert ended is not None and ended.status is JobStatus.CANCELLED and ended.logs == entries
    as_stored(store, [ended])
