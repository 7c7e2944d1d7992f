"""get, find, count, counts, oldest_due, running, unknown_due_tasks, schedules, parse_id."""

from __future__ import annotations

from typing import Any

import pytest
from bson import ObjectId

from mongosched._core.records import JobQuery, JobStatus
from mongosched.errors import InvalidJobId
from mongosched.store import Store, schedule_id

from .helpers import LATER, T0, add, claimed, ids, job, sec, succeeded

PENDING, RUNNING, COMPLETED = JobStatus.PENDING, JobStatus.RUNNING, JobStatus.COMPLETED


def test_get_of_an_unknown_id_is_none(store: Store) -> None:
    add(store, job(), job(id="schedule:t"))
    assert store.jobs.get(ObjectId()) is None
    assert store.jobs.get("schedule:nothing") is None
    got = store.jobs.get("schedule:t")
    assert got is not None and got.id == "schedule:t"


def test_find_and_count_filter_by_task_status_and_queue(store: Store) -> None:
    a, b, c, d = add(
        store, job(priority=1), job(queue="q"), job("x", queue="q"), job("x", priority=2)
    )
    running = claimed(store, tasks=("t", "x"))  # a: priority 1
    assert running.id == a.id
    cases: list[tuple[JobQuery, list[Any]]] = [
        (JobQuery(), [a.id, b.id, c.id, d.id]),
        (JobQuery(task="t"), [a.id, b.id]),
        (JobQuery(task="nothing"), []),
        (JobQuery(statuses=(PENDING,)), [b.id, c.id, d.id]),
        (JobQuery(statuses=(RUNNING,)), [a.id]),
        (JobQuery(statuses=(RUNNING, PENDING)), [a.id, b.id, c.id, d.id]),
        (JobQuery(statuses=(COMPLETED,)), []),
        (JobQuery(statuses=()), []),
        (JobQuery(queue="q"), [b.id, c.id]),
        (JobQuery(task="x", queue="q"), [c.id]),
        (JobQuery(task="t", statuses=(PENDING,)), [b.id]),
        (JobQuery(task="x", statuses=(PENDING,), queue="default"), [d.id]),
    ]
    for query, expected in cases:
        assert sorted(ids(store.jobs.find(query, limit=0))) == sorted(expected), query
        assert store.jobs.count(query) == len(expected), query


def test_find_sorts_either_way_then_by_id(store: Store) -> None:
    a, b, c, d = add(store, job(priority=3), job(priority=1), job(priority=3), job(priority=2))
    by_id = sorted([a.id, c.id])
    ascending = store.jobs.find(JobQuery(), sort="priority", descending=False)
    assert ids(ascending) == [b.id, d.id, *by_id]
    descending = store.jobs.find(JobQuery(), sort="priority", descending=True)
    assert ids(descending) == [*reversed(by_id), d.id, b.id]
    assert ids(store.jobs.find(JobQuery(), sort="priority", descending=False, skip=1, limit=2)) == [
        d.id,
        by_id[0],
    ]
    late = add(store, job(at=T0 + sec(5)))[0]
    assert ids(store.jobs.find(JobQuery(), sort="run_at", limit=1)) == [late.id]
    assert store.jobs.find(JobQuery(), sort="run_at", descending=False)[-1].id == late.id


def test_unset_sort_fields_come_first_ascending(store: Store) -> None:
    a, b, c = add(store, job(), job(), job())
    running = claimed(store)
    assert running.id == a.id
    assert store.leases.settle(running, succeeded(running)) is not None
    by_finish = store.jobs.find(JobQuery(), sort="finished_at", descending=False, limit=0)
    assert ids(by_finish) == [*sorted([b.id, c.id]), a.id]
    assert store.jobs.find(JobQuery(), sort="finished_at")[0].id == a.id


def test_pages_are_stable_and_limit_zero_is_all(store: Store) -> None:
    records = add(store, *[job() for _ in range(57)])  # one updated_at for all
    everything = store.jobs.find(JobQuery(), limit=0)
    assert len(everything) == 57 and len(store.jobs.find(JobQuery())) == 50  # the default limit
    assert ids(everything) == sorted(ids(records), reverse=True)  # ties by id
    pages = [store.jobs.find(JobQuery(), skip=skip, limit=10) for skip in range(0, 60, 10)]
    assert [len(p) for p in pages] == [10, 10, 10, 10, 10, 7]
    assert [r.id for page in pages for r in page] == ids(everything)
    ascending = store.jobs.find(JobQuery(), descending=False, skip=50, limit=0)
    assert ids(ascending) == sorted(ids(records))[50:]


def test_ties_order_schedule_ids_before_made_ids(store: Store) -> None:
    made = add(store, job(), job())
    add(store, job(id="schedule:b"), job(id="schedule:a"))
    expected = ["schedule:a", "schedule:b", *sorted(ids(made))]
    assert ids(store.jobs.find(JobQuery(), descending=False)) == expected
    assert ids(store.jobs.find(JobQuery())) == list(reversed(expected))


def test_counts_per_task_and_status(store: Store) -> None:
    assert store.jobs.counts() == {}
    add(store, job(), job(), job(), job("x"))
    first = claimed(store)
    store.leases.settle(first, succeeded(first))
    claimed(store)
    assert store.jobs.counts() == {
        ("t", COMPLETED): 1,
        ("t", RUNNING): 1,
        ("t", PENDING): 1,
        ("x", PENDING): 1,
    }


def test_oldest_due_is_the_pending_job_due_longest(store: Store) -> None:
    assert store.jobs.oldest_due(LATER) is None
    first, second, third = add(
        store, job(at=T0 - sec(20)), job("other", at=T0 - sec(10)), job(queue="q", at=T0)
    )
    add(store, job(at=LATER + sec(1)))  # not due
    oldest = store.jobs.oldest_due(LATER)
    assert oldest is not None and oldest.id == first.id
    assert store.jobs.oldest_due(T0 - sec(21)) is None
    oldest = store.jobs.oldest_due(T0 - sec(20))  # due at exactly now counts
    assert oldest is not None and oldest.id == first.id
    assert claimed(store).id == first.id  # running: no longer waiting
    oldest = store.jobs.oldest_due(LATER)
    assert oldest is not None and oldest.id == second.id
    assert claimed(store, tasks=("other",)).id == second.id
    oldest = store.jobs.oldest_due(LATER)
    assert oldest is not None and oldest.id == third.id
    assert claimed(store).id == third.id
    assert store.jobs.oldest_due(LATER) is None


def test_running_lists_soonest_lease_expiry_first(store: Store) -> None:
    add(store, *[job() for _ in range(4)], job())
    leases = [claimed(store, lease=n) for n in (30, 10, 40, 20)]
    assert store.jobs.running() == sorted(leases, key=lambda r: r.lease and r.lease.until)
    assert ids(store.jobs.running(limit=2)) == [leases[1].id, leases[3].id]
    assert len(store.jobs.running(limit=0)) == 4


def test_unknown_due_tasks_counts_due_jobs_of_tasks_not_known(store: Store) -> None:
    add(
        store,
        job("known"),
        job("x"),
        job("x"),
        job("x", at=LATER + sec(1)),  # not due
        job("y", queue="q"),
    )
    assert store.jobs.unknown_due_tasks(["known"], LATER) == {"x": 2, "y": 1}
    assert store.jobs.unknown_due_tasks(["known", "x", "y"], LATER) == {}
    assert store.jobs.unknown_due_tasks([], T0 - sec(1)) == {}
    claimed(store, tasks=("y",))  # running: not waiting
    assert store.jobs.unknown_due_tasks(["known"], LATER) == {"x": 2}
    add(store, *[job(f"u{n:02}") for n in range(25)])
    unknown = store.jobs.unknown_due_tasks(["known"], LATER)
    assert len(unknown) == 20 and unknown["x"] == 2  # up to 20, the most first


def test_schedules_lists_every_repeating_job_by_task(store: Store) -> None:
    assert store.jobs.schedules() == []
    add(store, job())
    for task in ("b", "a", "c"):
        assert store.jobs.upsert_schedule(
            job(task, id=schedule_id(task), repeat={"every": 60.0}, scheduled_for=T0), T0
        )
    assert [r.task for r in store.jobs.schedules()] == ["a", "b", "c"]
    running = claimed(store, tasks=("b",))
    assert (
        store.leases.settle(running, succeeded(running)) is not None
    )  # its next slot: still there
    found = store.jobs.schedules()
    assert [r.id for r in found] == ["schedule:a", "schedule:b", "schedule:c"]
    assert found[1].repeat == {"every": 60.0} and found[1].scheduled_for == T0 + sec(60)


# Ids -----------------------------------------------------------------------------------------------
def test_parse_id_takes_ids_and_their_string_forms(store: Store) -> None:
    stored = add(store, job())[0]
    assert store.parse_id(stored.id) == stored.id
    assert store.parse_id(str(stored.id)) == stored.id
    oid = ObjectId()
    assert store.parse_id(oid) == oid and store.parse_id(str(oid)) == oid
    assert store.parse_id(str(oid).upper()) == oid
    assert store.parse_id("schedule:t") == "schedule:t"
    assert store.jobs.get(store.parse_id(str(stored.id))) == store.jobs.get(stored.id)


@pytest.mark.parametrize(
    "value",
    [
        {"$ne": None},
        {"$ne": "x"},
        {"$gt": ""},
        0,
        12,
        None,
        "",
        "nope",
        "0123456789abcdef0123456z",
        "0123456789abcdef012345678",
        b"0123456789ab",
        ["schedule:t"],
    ],
    ids=repr,
)
def test_parse_id_refuses_anything_else(store: Store, value: Any) -> None:
    add(store, job())
    with pytest.raises(InvalidJobId):
        store.parse_id(value)
