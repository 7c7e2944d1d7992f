"""The runner's worker pool and the free workers' places: what the dispatcher and the
workers rely on when they hand claims and places to each other."""

from __future__ import annotations

import threading

import pytest

from mongosched.runner.inflight import Places
from mongosched.runner.pool import WorkerPool
from tests.support.waiting import wait_for


def test_calls_queued_before_the_shutdown_run_and_later_ones_are_refused() -> None:
    pool = WorkerPool(2, "test-worker")
    gate = threading.Event()
    ran: list[int] = []
    pool.submit(gate.wait, 5)  # both threads busy, the rest queued
    pool.submit(gate.wait, 5)
    for n in range(5):
        pool.submit(ran.append, n)
    pool.shutdown()
    with pytest.raises(RuntimeError):
        pool.submit(ran.append, 99)
    gate.set()
    wait_for(lambda: len(ran) == 5, 5, message="the calls queued before the shutdown")
    assert sorted(ran) == [0, 1, 2, 3, 4]
    threads = [t for t in threading.enumerate() if t.name.startswith("test-worker")]
    for thread in threads:
        thread.join(5)
    assert not any(thread.is_alive() for thread in threads)


def test_a_call_that_raises_leaves_its_thread_serving(caplog: pytest.LogCaptureFixture) -> None:
    pool = WorkerPool(1, "test-raising")
    done = threading.Event()

    def fail() -> None:
        raise ValueError("boom")

    pool.submit(fail)
    pool.submit(done.set)
    assert done.wait(5), "the only thread ended with the call that raised"
    pool.shutdown()
    assert "a call in the worker pool raised" in caplog.text


def test_the_taker_waits_for_every_place_it_asks_and_is_woken_once() -> None:
    places = Places(3)
    assert places.take(3, 0) == 3
    taken: list[int] = []
    waiter = threading.Thread(target=lambda: taken.append(places.take(3, 5)))
    waiter.start()
    wait_for(lambda: places._want == 3, 5, message="the taker to wait")
    wakes: list[int] = []
    notify = places._changed.notify
    places._changed.notify = lambda n=1: (wakes.append(n), notify(n))  # type: ignore[method-assign]
    places.release()
    places.release()
    assert wakes == [] and taken == [], "the taker was woken before all three were free"
    places.release()
    waiter.join(5)
    assert wakes == [1] and taken == [3]


def test_when_the_time_runs_out_the_taker_takes_what_is_free() -> None:
    places = Places(2)
    assert places.take(2, 0) == 2
    places.release()
    assert places.take(2, 0.01) == 1
    assert not places.acquire(timeout=0.01)
    places.release(2)
    assert places.acquire(timeout=0) and places.acquire(timeout=0)
