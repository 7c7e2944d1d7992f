"""A transient database error (a network error, a primary stepping down or shutting
down) costs a retry of the command that met it, never a second run of a job whose run
had finished: a holder's outcome write retries, still fenced on its lease token, until
its lease would end; other calls retry a few times, then raise StoreUnavailable.

The errors are injected as a server's ``failCommand`` fail point would raise them in
pymongo (``tests/support/faults.py``), on the test server; and, for one PrimarySteppedDown
on the SecantusDB server, by its own fail point.
"""

from __future__ import annotations

import random
import time
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from pymongo.errors import AutoReconnect, PyMongoError

from mongosched import App, JobStatus
from mongosched._core import outcome
from mongosched._core.records import JobRecord
from mongosched.errors import StoreError, StoreUnavailable
from mongosched.store.mongo import MongoStore
from tests.support.faults import FaultyCollection, server_error
from tests.support.realserver import configure_fail_point
from tests.support.server_fixtures import SharedDatabase, shared_db
from tests.support.tasks import Recorder
from tests.support.waiting import wait_for

__all__ = ["shared_db"]

LEASE = 30.0
STEPPED_DOWN = server_error(189, "RetryableWriteError")  # PrimarySteppedDown
REFUSED = server_error(2)  # BadValue: not retryable


def _faulty(store: MongoStore) -> FaultyCollection:
    """The store's job collection behind a fault injector that fails only as told."""
    store.connection.retry_delay = 0.01
    faulty = FaultyCollection(store.connection.jobs, random.Random(0), rate=0.0)
    store.connection.jobs = faulty
    return faulty


def _running(store: MongoStore, count: int, max_attempts: int = 1) -> list[JobRecord]:
    """``count`` jobs of task ``t``, claimed (one batch)."""
    now = outcome_now()
    new = JobRecord(task="t", run_at=now, created_at=now, updated_at=now, max_attempts=max_attempts)
    store.jobs.insert([new] * count)
    got = store.claims.claim_batch(
        owner="me", tasks=["t"], queues=None, now=now, lease_duration=LEASE, limit=count
    )
    assert len(got) == count
    return got


def outcome_now() -> datetime:
    return datetime.now(timezone.utc).replace(microsecond=0)


def _done(job: JobRecord) -> Any:
    retention = outcome.Retention()
    return outcome.decide(
        job, outcome.Ending.SUCCESS, now=outcome_now(), retention=retention, result=1
    ).settlement


@pytest.mark.parametrize(
    "error",
    [
        STEPPED_DOWN,
        server_error(10107),  # NotWritablePrimary
        server_error(91),  # ShutdownInProgress
        server_error(11600),  # InterruptedAtShutdown
        server_error(262, "RetryableWriteError"),  # ExceededTimeLimit
        server_error(9001),  # SocketException
        server_error(2, "RetryableWriteError"),  # any error the server labels so
        AutoReconnect("connection reset"),
    ],
    ids=lambda e: getattr(e, "code", None) or type(e).__name__,
)
def test_a_transient_error_is_retried(database: Any, error: PyMongoError) -> None:
    store = MongoStore(database=database)
    [job] = _running(store, 1)
    _faulty(store).fail("find_one", error)
    assert store.jobs.get(job.id) == job


def test_any_other_error_is_a_store_error_at_once(database: Any) -> None:
    store = MongoStore(database=database)
    [job] = _running(store, 1)
    faulty = _faulty(store)
    faulty.fail("find_one", server_error(2), server_error(2))  # BadValue
    with pytest.raises(StoreError) as raised:
        store.jobs.get(job.id)
    assert not isinstance(raised.value, StoreUnavailable)
    assert faulty.injected["find_one:scripted"] == 1  # not retried


def _write(store: MongoStore, how: str, jobs: list[JobRecord], patience: Any) -> list[Any]:
    """Write a success for each of ``jobs`` with ``how``, with ``patience``."""
    items = [(job, _done(job)) for job in jobs]
    if how == "settle":
        return [store.leases.settle(job, settlement, patience) for job, settlement in items]
    if how == "settle_many":
        return store.claims.settle_many(items, patience)
    return store.claims.settle_and_claim(
        items,
        owner="me",
        tasks=["t"],
        queues=None,
        now=outcome_now(),
        lease_duration=LEASE,
        limit=3,
        patience=patience,
    )[0]


WRITES = {"settle": "find_one_and_update", "settle_many": "update", "settle_and_claim": "update"}


@pytest.mark.parametrize("how", list(WRITES))
def test_an_outcome_write_retries_a_transient_error_while_its_patience_lasts(
    database: Any, how: str
) -> None:
    """More failures in a row than the usual retries: an outcome write with patience
    (a runner's: until its lease ends) lands all the same, once; without, it gives up."""
    store = MongoStore(database=database)
    jobs = _running(store, 3)
    faulty = _faulty(store)
    faulty.fail(WRITES[how], *[STEPPED_DOWN] * 6)
    with pytest.raises(StoreUnavailable):
        _write(store, how, jobs[:1], None)
    faulty.fail(WRITES[how], *[STEPPED_DOWN] * 6)
    results = _write(store, how, jobs, lambda: time.monotonic() + 10)
    for job, stored in zip(jobs, results, strict=True):
        assert isinstance(stored, JobRecord) and stored.status is JobStatus.COMPLETED
        assert stored == store.jobs.get(job.id) and stored.attempts == 1


@pytest.mark.parametrize("how", list(WRITES))
def test_an_outcome_write_retries_a_refusal_while_its_patience_lasts(
    database: Any, how: str
) -> None:
    """A refusal the driver does not call retryable (here BadValue, as a one-shot
    ``failCommand`` fail point gives it): with patience the outcome write repeats it and
    lands, once; without, it gives up at once. Found by tests/faults/test_fail_points.py:
    a refused settle ran its finished job again once the lease expired."""
    store = MongoStore(database=database)
    jobs = _running(store, 3)
    faulty = _faulty(store)
    faulty.fail(WRITES[how], REFUSED)
    with pytest.raises(StoreError, match="BadValue|error 2"):
        _write(store, how, jobs[:1], None)
    faulty.fail(WRITES[how], REFUSED, REFUSED)
    results = _write(store, how, jobs, lambda: time.monotonic() + 10)
    for job, stored in zip(jobs, results, strict=True):
        assert isinstance(stored, JobRecord) and stored.status is JobStatus.COMPLETED
        assert stored == store.jobs.get(job.id) and stored.attempts == 1


@pytest.mark.parametrize("how", list(WRITES))
def test_a_retried_outcome_write_never_lands_over_another_holder(database: Any, how: str) -> None:
    """While an outcome write retries (past the usual retries, as its patience
    allows), the lease expired and another holder took the job: the retry, fenced on
    the first holder's token, misses."""
    store = MongoStore(database=database)
    [job] = _running(store, 1, max_attempts=3)
    faulty = _faulty(store)
    taken: list[JobRecord] = []

    def meanwhile() -> float:  # asked before each retry past the usual ones
        if not taken:  # the reaper and another runner, past the fault injector
            store.connection.jobs = faulty._target
            later = outcome_now() + timedelta(seconds=LEASE + 1)
            expired = outcome.decide(
                job, outcome.Ending.LEASE_EXPIRED, now=later, retention=outcome.Retention()
            )
            assert store.leases.reap(job, later, expired.settlement) is not None
            other = store.claims.claim(
                owner="other", tasks=["t"], queues=None, now=later, lease_duration=LEASE
            )
            assert other is not None
            taken.append(other)
            store.connection.jobs = faulty
        return time.monotonic() + 10

    faulty.fail(WRITES[how], *[STEPPED_DOWN] * 6)
    assert _write(store, how, [job], meanwhile) == [None]
    assert taken and store.jobs.get(job.id) == taken[0]  # the other holder's lease, untouched


def test_patience_bounds_the_retries(database: Any) -> None:
    """A fault that lasts: the write gives up once its patience is over."""
    store = MongoStore(database=database)
    [job] = _running(store, 1)
    _faulty(store).fail("find_one_and_update", *[STEPPED_DOWN] * 10_000)
    started = time.monotonic()
    with pytest.raises(StoreUnavailable):
        store.leases.settle(job, _done(job), lambda: started + 0.3)
    assert 0.2 <= time.monotonic() - started < 2.0
    assert store.jobs.get(job.id) == job  # nothing written: its lease decides


def test_a_failover_during_a_backlog_costs_retries_never_a_second_run(
    database: Any,
) -> None:
    """A started runner with a backlog meets a primary stepping down: several failures
    in a row of the commands its outcome writes send (batched and single), more than
    the usual retries. Every job runs once and completes (a job without retries left
    would otherwise end failed, its outcome given up and its lease expired)."""
    app = App(database=database, lease_duration=3.0, poll_interval=0.05)
    recorder = Recorder()
    work = app.task(name="work", retry=0)(lambda n: recorder.ran(n, n))
    store = app.store
    assert isinstance(store, MongoStore)
    faulty = _faulty(store)
    settle_many, settle_and_claim = store.claims.settle_many, store.claims.settle_and_claim

    def fail_over() -> None:
        if not faulty.injected:  # the first batched settle meets the failover
            faulty.fail("update", *[STEPPED_DOWN] * 6)
            faulty.fail("find_one_and_update", *[STEPPED_DOWN] * 6)

    def failing_over(items: Any, patience: Any = None) -> Any:
        fail_over()
        return settle_many(items, patience)

    def failing_over_with_claims(items: Any, **claim: Any) -> Any:
        fail_over()  # a busy runner's outcomes ride in its next claim's write
        return settle_and_claim(items, **claim)

    store.claims.settle_many = failing_over  # type: ignore[method-assign]
    store.claims.settle_and_claim = failing_over_with_claims  # type: ignore[method-assign]
    app.schedule_bulk(work.job(n) for n in range(60))
    runner = app.runner(workers=4).start()
    try:
        wait_for(lambda: app.count_jobs(status="completed") == 60, timeout=30, message="done")
    finally:
        runner.stop(timeout=10)
    assert faulty.injected["update:scripted"] + faulty.injected["find_one_and_update:scripted"]
    assert recorder.counts() == {n: 1 for n in range(60)}


STEP_DOWN = {"errorCode": 189, "errorLabels": ["RetryableWriteError"]}  # PrimarySteppedDown


@pytest.mark.parametrize("command", ["update", "findAndModify"])
def test_a_primary_stepping_down_once_costs_an_outcome_write_a_wait_not_the_outcome(
    shared_db: SharedDatabase, command: str
) -> None:
    """The server's own fail point: one PrimarySteppedDown on the command an outcome
    write sends (a bulk settle's ``update``, a settle's ``findAndModify``). pymongo
    then waits for its monitor to find the primary again (up to its heartbeat
    interval: 2 s here), longer than the usual retries last (``connect_timeout``
    0.5 s): without patience the outcome is given up and its jobs are left running
    (they would run again once their leases expire); with a holder's patience it lands,
    once, as soon as the primary is back."""
    server = shared_db.server
    if server is None:
        pytest.skip("needs the SecantusDB server's fail points")
    app = App(shared_db.uri(heartbeatFrequencyMS=2000), connect_timeout=0.5)
    app.task(name="t")(lambda: None)
    app.schedule_bulk(app.tasks["t"].job() for _ in range(6))
    store = app.store
    assert isinstance(store, MongoStore)
    jobs = store.claims.claim_batch(
        owner="me", tasks=["t"], queues=None, now=app.now(), lease_duration=LEASE, limit=6
    )
    given_up, kept = jobs[:3], jobs[3:]
    how = "settle_many" if command == "update" else "settle"
    client = server.client()  # (its own view of the server: it never saw the error)
    stored = shared_db.database(client)["mongosched_jobs"]
    try:
        configure_fail_point(client, {"times": 1}, {"failCommands": [command], **STEP_DOWN})
        with pytest.raises(StoreUnavailable):
            _write(store, how, given_up, None)
        running = stored.count_documents(
            {"_id": {"$in": [j.id for j in given_up]}, "status": "running"}
        )
        assert running == 3  # given up: they would run again once their leases expire
        configure_fail_point(client, {"times": 1}, {"failCommands": [command], **STEP_DOWN})
        started = time.monotonic()
        results = _write(store, how, kept, lambda: started + 20)
        assert time.monotonic() - started < 10
        for job, landed in zip(kept, results, strict=True):
            assert isinstance(landed, JobRecord) and landed.status is JobStatus.COMPLETED
            doc = stored.find_one({"_id": job.id})
            assert doc is not None and doc["status"] == "completed" and doc["attempts"] == 1
    finally:
        configure_fail_point(client, "off")
        client.close()
