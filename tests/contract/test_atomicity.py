"""Each method is one atomic step: racing callers never both win."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, TypeVar

from mongosched._core.records import JobQuery
from mongosched.store import Store

from .helpers import LATER, T0, add, claim, claimed, job, sec, succeeded

T = TypeVar("T")
THREADS = 16
UNTIL = LATER + sec(30)


def race(action: Callable[[int], T], threads: int = THREADS) -> list[T]:
    """Run ``action(n)`` in ``threads`` threads released together; their results."""
    barrier = threading.Barrier(threads)
    results: list[Any] = [None] * threads
    errors: list[BaseException] = []

    def run(n: int) -> None:
        try:
            barrier.wait(30)
            results[n] = action(n)
        except BaseException as exc:  # reported below, in the test's thread
            errors.append(exc)

    started = [threading.Thread(target=run, args=(n,)) for n in range(threads)]
    for thread in started:
        thread.start()
    for thread in started:
        thread.join(60)
    assert not errors, errors
    return results


def test_a_single_job_is_claimed_by_one_of_16_racing_threads(store: Store) -> None:
    queued = add(store, job())[0]
    results = race(lambda n: claim(store, owner=f"w{n}"))
    winners = [r for r in results if r is not None]
    assert len(winners) == 1 and winners[0].id == queued.id
    assert store.jobs.get(queued.id) == winners[0] and winners[0].attempts == 1


def test_racing_threads_claim_each_job_once(store: Store) -> None:
    add(store, *[job() for _ in range(64)])

    def drain(n: int) -> list[Any]:
        taken = []
        while (got := claim(store, owner=f"w{n}")) is not None:
            taken.append(got.id)
        return taken

    every = [job_id for taken in race(drain) for job_id in taken]
    assert len(every) == len(set(every)) == 64


def test_16_racing_inserts_of_one_active_key_make_one_job(store: Store) -> None:
    results = race(lambda n: store.jobs.insert([job(dedupe_key="k", args=(n,))])[0])
    created = [stored for stored, new in results if new]
    assert len(created) == 1
    assert {stored.id for stored, _ in results} == {created[0].id}
    assert store.jobs.count(JobQuery()) == 1


def test_16_racing_upserts_of_one_schedule_create_it_once(store: Store) -> None:
    declared = job(id="schedule:t", repeat={"every": 60.0}, scheduled_for=T0)
    results = race(lambda n: store.jobs.upsert_schedule(declared, T0))
    assert sum(results) == 1 and store.jobs.count(JobQuery()) == 1


def test_16_racing_settles_of_one_claim_land_once(store: Store) -> None:
    add(store, job())
    running = claimed(store)
    results = race(lambda n: store.leases.settle(running, succeeded(running, result=n)))
    landed = [r for r in results if r is not None]
    assert len(landed) == 1 and store.jobs.get(running.id) == landed[0]


def test_16_racing_takers_of_3_permits(store: Store) -> None:
    store.permits.ensure_permits("t", 3)
    results = race(lambda n: store.permits.take_permit("t", 3, f"token-{n}", n, "me", LATER, UNTIL))
    assert sum(results) == 3 and store.permits.permit_holders("t", LATER) == 3
