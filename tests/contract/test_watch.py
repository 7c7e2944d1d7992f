"""watch_due: a store reports jobs that become pending, written by anyone.

Runs where a store can watch: ``memory``, SecantusDB (``server``: a one-member replica
set with real change streams), the wire-protocol stand-in with change streams on
(``wire_rs``), and a real server at ``MONGOSCHED_TEST_URI`` when it is a replica set or
a sharded cluster. The writes come from a *second* store on the same database (another
client, as another process would be), except on ``memory``, which no other process sees.
Where a store cannot watch (a standalone server, mongomock), iterating raises
WatchUnavailable at once.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from mongosched._core.records import JobStatus
from mongosched.errors import WatchUnavailable
from mongosched.store import DueHint, Store
from mongosched.store.memory import MemoryStore
from mongosched.store.mongo import MongoStore
from tests.support.server import MockServer
from tests.support.server_fixtures import with_database
from tests.support.watching import Hints

from .conftest import TEST_URI
from .helpers import LATER, T0, add, claimed, given_back, job, raised, sec, succeeded, token

WATCHING = ["memory", "server", "wire_rs", *(["mongodb"] if TEST_URI else [])]


@pytest.fixture(scope="module")
def replica_server() -> Iterator[MockServer]:
    with MockServer(change_streams=True) as server:
        yield server


@pytest.fixture(params=WATCHING)
def pair(request: pytest.FixtureRequest) -> Iterator[tuple[Store, Store]]:
    """A store that watches and one that writes, on one database."""
    if request.param == "memory":
        store = MemoryStore()
        yield store, store
        return
    name = f"watch_{uuid.uuid4().hex[:12]}"
    if request.param == "wire_rs":
        server: MockServer = request.getfixturevalue("replica_server")
        uri = server.uri(name, serverSelectionTimeoutMS=5000)
    elif request.param == "server":
        uri = with_database(request.getfixturevalue("real_server").uri, name)
    else:
        assert TEST_URI
        uri = with_database(TEST_URI, name)
    watcher, writer = MongoStore(uri=uri), MongoStore(uri=uri)
    hello = watcher.connection.database.command("hello")
    if not hello.get("setName") and hello.get("msg") != "isdbgrid":
        pytest.skip("change streams need a replica set or a sharded cluster")
    writer.prepare()
    try:
        yield watcher, writer
    finally:
        writer.connection.database.client.drop_database(writer.connection.database.name)
        watcher.close()
        writer.close()


@pytest.fixture
def hints(pair: tuple[Store, Store]) -> Iterator[Hints]:
    reader = Hints(pair[0].watch_due(None))
    first = reader.next()
    assert first == DueHint()  # established: claim now
    yield reader
    reader.close()


def test_an_inserted_job_is_reported_with_its_due_time_and_task(
    pair: tuple[Store, Store], hints: Hints
) -> None:
    writer = pair[1]
    add(writer, job("soon", at=T0))
    assert hints.next() == DueHint(at=T0, task="soon")
    add(writer, job("later", at=T0 + sec(3600)))
    assert hints.next() == DueHint(at=T0 + sec(3600), task="later")


def test_claims_heartbeats_and_finishes_are_not_reported(
    pair: tuple[Store, Store], hints: Hints
) -> None:
    writer = pair[1]
    queued = add(writer, job())[0]
    hints.next()
    running = claimed(writer)
    assert writer.leases.renew(queued.id, token(running), LATER, LATER + sec(60)).held
    writer.leases.settle(running, succeeded(running))
    assert hints.none_within()


def test_jobs_that_become_pending_again_are_reported(
    pair: tuple[Store, Store], hints: Hints
) -> None:
    writer = pair[1]
    queued = add(writer, job(max_attempts=3))[0]
    hints.next()
    running = claimed(writer)
    retrying = writer.leases.settle(running, raised(running))  # a retry
    assert retrying is not None and retrying.status is JobStatus.PENDING
    assert hints.next().at in (None, retrying.run_at)
    running = claimed(writer, now=retrying.run_at + sec(1))
    assert writer.leases.settle(running, given_back(running)) is not None  # given back
    assert hints.next().at in (None, retrying.run_at)
    running = claimed(writer, now=retrying.run_at + sec(1))
    done = writer.leases.settle(running, succeeded(running))
    assert done is not None and done.status is JobStatus.COMPLETED
    assert hints.none_within()
    retried = writer.jobs.retry_finished(queued.id, JobStatus.COMPLETED, LATER + sec(5))  # by hand
    assert retried is not None
    assert hints.next().at in (None, LATER + sec(5))


def test_a_watch_of_some_queues_is_not_told_of_new_jobs_of_others(
    pair: tuple[Store, Store],
) -> None:
    watcher, writer = pair
    reader = Hints(watcher.watch_due(["mine"]))
    try:
        assert reader.next() == DueHint()
        add(writer, job("theirs", queue="other"), job("ours", queue="mine"))
        assert reader.next() == DueHint(at=T0, task="ours")
        assert reader.none_within()
    finally:
        reader.close()


def test_close_ends_the_watch_promptly(pair: tuple[Store, Store], hints: Hints) -> None:
    assert hints.close() < 2.0


def test_a_watch_closed_before_it_is_read_reports_nothing(pair: tuple[Store, Store]) -> None:
    watch = pair[0].watch_due(None)
    watch.close()
    assert list(watch) == []


def test_a_store_that_cannot_watch_says_so_at_once(store: Store, substrate: str) -> None:
    watch = store.watch_due(None)
    try:
        first = next(iter(watch))
    except WatchUnavailable:
        assert substrate != "memory"
    else:
        assert first == DueHint()
        assert substrate != "wire"  # a standalone stand-in, no streams
    finally:
        watch.close()
