"""Waking runners when a job becomes due elsewhere (App(wake=...), mongosched.runner.watcher).

On SecantusDB's real change streams (``shared_db``: a one-member replica set; a real
MongoDB with ``MONGOSCHED_TEST_URI``), across processes and across a restart of the
server; and on the wire-protocol stand-in with change streams on (a one-member replica
set, see tests/support/changestreams.py) or off (a standalone), for what it controls
and a server does not: a stream dropped and refused for a while, a history cut short,
the streams opened and closed. Poll intervals are long here (30 s), so a job that
starts within a couple of seconds was started by a wake-up, not a poll; latency
figures are printed by bench/wake.py, not asserted here.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from mongosched import App
from mongosched._core.records import JobStatus
from mongosched.app import reconfigure
from mongosched.errors import ConfigurationError, StoreUnavailable
from mongosched.runner.runner import Runner
from mongosched.store import DueHint, Store
from tests.contract.helpers import T0, add, job, sec
from tests.support import worker_app
from tests.support.processes import LoggedProcess
from tests.support.server import MockServer
from tests.support.waiting import wait_for
from tests.support.watching import Hints

if TYPE_CHECKING:
    from tests.support.server_fixtures import SharedDatabase

pytest_plugins = ["tests.support.server_fixtures"]  # shared_db: SecantusDB

LONG_POLL = 30.0
PROMPT = 4.0  # seconds: well under LONG_POLL, with room for a loaded machine (2 cores, shared)


@pytest.fixture
def replica() -> Iterator[MockServer]:
    with MockServer(change_streams=True) as server:
        yield server


@pytest.fixture
def standalone() -> Iterator[MockServer]:
    with MockServer() as server:
        yield server


def _apps(uri: str, **options: object) -> tuple[App, App, threading.Event]:
    """A runner's app and a scheduler's app (two clients) sharing task ``t``."""
    ran = threading.Event()
    runner_app = App(uri, poll_interval=LONG_POLL, **options)  # type: ignore[arg-type]
    other = App(uri, poll_interval=LONG_POLL)

    @runner_app.task(name="t")
    def t() -> None:
        ran.set()

    other.task(name="t")(lambda: None)
    return runner_app, other, ran


@dataclass
class Running:
    runner: Runner
    app: App  # the runner's
    other: App  # schedules task ``t``
    ran: threading.Event  # set when ``t`` ran


@contextmanager
def _running(
    uri: str, runner_options: dict[str, Any] | None = None, **options: object
) -> Iterator[Running]:
    """A started one-worker runner of an app on ``uri`` (App ``options``) and another app
    to schedule with, as in :func:`_apps`; stopped and closed afterwards."""
    runner_app, other, ran = _apps(uri, **options)
    runner = runner_app.runner(workers=1, **(runner_options or {})).start()
    try:
        yield Running(runner, runner_app, other, ran)
    finally:
        runner.stop(timeout=5)
        runner_app.close()
        other.close()


def test_a_job_scheduled_by_another_process_starts_at_once(
    shared_db: SharedDatabase, tmp_path: Path
) -> None:
    uri = shared_db.uri()
    worker = LoggedProcess(
        "worker", ["tests.support.worker_app", uri, "--poll", str(LONG_POLL)], tmp_path / "log"
    )
    app = worker_app.build(uri, 1.5, LONG_POLL)
    try:
        # A job scheduled before its stream is open is claimed when it opens ("claim now").
        wait_for(lambda: "started" in worker.log(), 30, message="the worker to start")
        runs = worker_app.side_collection(uri)
        for n in range(3):
            before = time.time()
            job_id = app.get_task("record").schedule().id
            run = wait_for(lambda i=job_id: runs.find_one({"job": i}), 20, message=f"run {n}")
            assert run["start"] - before < PROMPT, worker.log()[-2000:]
    finally:
        worker.stop(30)
        app.close()


@contextmanager
def _watching(uri: str) -> Iterator[tuple[Hints, Store]]:
    """A store watching ``uri``'s jobs (established: its first hint read) and another
    client's store to write with."""
    watching, writing = App(uri), App(uri)
    writing.ensure_indexes()
    hints = Hints(watching.store.watch_due(None))
    try:
        assert hints.next() == DueHint()
        yield hints, writing.store
    finally:
        hints.close()
        watching.close()
        writing.close()


def _assert_woken_at_once(uri: str) -> None:
    """A runner watching ``uri`` starts a job another app schedules well before its poll."""
    with _running(uri) as r:
        assert r.runner.wait_ready(10)
        wait_for(lambda: r.runner.health()["wake"] == "watching", message="watching")
        r.other.get_task("t").schedule()
        assert r.ran.wait(PROMPT)


def test_a_runner_of_another_app_on_a_replica_set_starts_a_job_at_once(
    shared_db: SharedDatabase,
) -> None:
    _assert_woken_at_once(shared_db.uri())


def _failing_fast(shared_db: SharedDatabase) -> str:
    """The URI of the test's database on SecantusDB, giving up on the server after 0.5 s
    (so that while it is down the driver's own attempt to resume a stream fails too)."""
    if shared_db.server is None:
        pytest.skip("restarting the server needs SecantusDB (not MONGOSCHED_TEST_URI)")
    return shared_db.uri(serverSelectionTimeoutMS=500)


def _restart_once_the_watch_failed(
    shared_db: SharedDatabase, caplog: pytest.LogCaptureFixture
) -> None:
    """Kill SecantusDB (-9), wait until the library's watch has failed, and start the
    server again on its storage: the stream is resumed by the library, not the driver."""
    with caplog.at_level(logging.WARNING, logger="mongosched"):
        shared_db.server.kill()
        wait_for(lambda: "change stream failed" in caplog.text, 15, message="the watch to fail")
    shared_db.server.start()


def _schedule_once_answered(app: App) -> None:
    """Schedule a job of ``t`` once the restarted server answers ``app``: the old
    connections in its pool fail first, and on a loaded machine the server's monitor may
    not have found it again within the app's half-second server selection."""

    def scheduled() -> bool:
        try:
            app.get_task("t").schedule()
        except StoreUnavailable:
            return False
        return True

    wait_for(scheduled, 15, message="the restarted server to answer")


@contextmanager
def _watching_runner(shared_db: SharedDatabase) -> Iterator[Running]:
    """A runner on SecantusDB, watching, whose stream's resume token is an event's: one
    job ran first (SecantusDB refuses to resume from the token it gives after a command
    in the database, here the apps' createIndexes: see tests/meta/test_realserver.py)."""
    with _running(_failing_fast(shared_db)) as r:
        assert r.runner.wait_ready(10)
        wait_for(lambda: r.runner.health()["wake"] == "watching", message="watching")
        assert r.other.get_task("t").schedule().wait(timeout=PROMPT).status is JobStatus.COMPLETED
        r.ran.clear()
        # The dispatcher idle (its claim after that job done): a claim that met the
        # outage would back off (as the test below makes it).
        wait_for(lambda: (r.runner.health()["seconds_since_poll"] or 0) > 0.3, message="idle")
        yield r


def test_a_runner_is_woken_again_after_the_server_restarts(
    shared_db: SharedDatabase, caplog: pytest.LogCaptureFixture
) -> None:
    with _watching_runner(shared_db) as r:
        _restart_once_the_watch_failed(shared_db, caplog)
        _schedule_once_answered(r.other)
        assert r.ran.wait(PROMPT), f"health {r.runner.health()}"


def test_a_runner_backing_off_after_a_database_error_is_woken_by_its_stream(
    shared_db: SharedDatabase, caplog: pytest.LogCaptureFixture
) -> None:
    with _watching_runner(shared_db) as r:
        shared_db.server.kill()
        r.runner.wake()  # a claim while the server is down: a database error, a backoff
        wait_for(lambda: "retrying in" in caplog.text, 15, message="the dispatcher to back off")
        shared_db.server.start()
        _schedule_once_answered(r.other)
        assert r.ran.wait(PROMPT), f"health {r.runner.health()}"


def test_a_watch_resumes_where_it_was_after_the_server_restarts(
    shared_db: SharedDatabase, caplog: pytest.LogCaptureFixture
) -> None:
    """After a crash and restart the watch goes on from its resume token (the server's
    history survived in its journal): the next hint is the next job's, not the "claim
    now" of a watch that lost its place and started afresh."""
    with _watching(_failing_fast(shared_db)) as (hints, writing):
        add(writing, job("before", at=T0))
        assert hints.next() == DueHint(at=T0, task="before")
        _restart_once_the_watch_failed(shared_db, caplog)
        add(writing, job("after", at=T0 + sec(3600)))
        assert hints.next(15) == DueHint(at=T0 + sec(3600), task="after")
        assert hints.none_within()
        assert "lost its place" not in caplog.text


def test_a_standalone_server_falls_back_to_polling(
    standalone: MockServer, caplog: pytest.LogCaptureFixture
) -> None:
    uri = standalone.uri("wake_standalone")
    with _running(uri, {"poll_interval": 0.1}, wake="change_stream") as r:
        with caplog.at_level(logging.WARNING, logger="mongosched"):
            wait_for(lambda: r.runner.health()["wake"] == "polling", message="polling")
        assert "cannot watch for due jobs" in caplog.text and "replica sets" in caplog.text
        r.other.get_task("t").schedule()
        assert r.ran.wait(5)  # by polling
        assert standalone.streams.open_streams == 0


def test_a_dropped_stream_resumes_without_missing_a_job(replica: MockServer) -> None:
    with _running(replica.uri("wake_resume")) as r:
        assert r.runner.wait_ready(10)
        wait_for(lambda: r.runner.health()["wake"] == "watching", message="watching")
        assert replica.streams.drop(refuse_for=1.0) >= 1
        # Scheduled while the stream is down, due after any claim in progress: only the
        # resumed stream's report (with its due time) can start it before a poll.
        r.other.get_task("t").configure(delay=1.5).schedule()
        streams = replica.streams
        assert r.ran.wait(1.5 + PROMPT), (  # say which path stalled if it ever does
            f"health {r.runner.health()}; streams opened {streams.opened}, resumed "
            f"{streams.resumed}, open {streams.open_streams}"
        )
        assert replica.streams.resumed >= 1


def test_a_resumed_watch_reports_what_changed_while_it_was_down(replica: MockServer) -> None:
    """Resuming uses the stream's token: a job due in an hour, inserted while the stream
    was down, is reported with its due time (a fresh stream would not report it)."""
    with _watching(replica.uri("wake_resume_store")) as (hints, writing):
        replica.streams.drop(refuse_for=1.0)
        add(writing, job("later", at=T0 + sec(3600)))
        assert hints.next(10) == DueHint(at=T0 + sec(3600), task="later")
        assert replica.streams.resumed >= 1


def test_a_watch_whose_resume_point_is_gone_starts_afresh_and_says_claim_now(
    replica: MockServer, caplog: pytest.LogCaptureFixture
) -> None:
    replica.streams.history = 5
    with _watching(replica.uri("wake_history_lost")) as (hints, writing):
        replica.streams.drop(refuse_for=1.0)
        add(writing, *(job("gone", at=T0) for _ in range(20)))  # more than is kept
        assert hints.next(10) == DueHint()  # what it missed is unknown: claim now
        add(writing, job("after", at=T0))
        assert hints.next() == DueHint(at=T0, task="after")
        assert "lost its place" in caplog.text


def test_stopping_a_runner_closes_its_stream(replica: MockServer) -> None:
    with _running(replica.uri("wake_stop")) as r:
        wait_for(lambda: replica.streams.open_streams == 1, message="a stream")
        assert r.runner.stop(timeout=5)
        wait_for(lambda: replica.streams.open_streams == 0, 2, message="the stream closed")
        assert replica.streams.killed == 1
        assert r.runner.health()["wake"] == "stopped"


def test_wake_poll_never_watches(replica: MockServer) -> None:
    with _running(replica.uri("wake_poll"), wake="poll") as r:
        assert r.runner.wait_ready(5) and r.runner.health()["wake"] == "poll"  # no watcher
        assert r.app.runner(wake="auto").wake_mode == "auto"  # a runner's own choice
        assert replica.streams.opened == 0


def test_wake_must_be_a_known_mode() -> None:
    with pytest.raises(ConfigurationError, match="wake must be one of"):
        App("memory://", wake="push")
    with pytest.raises(ConfigurationError, match="Runner: wake"):
        App("memory://").runner(wake="sometimes")


def test_framework_settings_and_reconfigure_carry_the_mode() -> None:
    from mongosched.contrib import app_from_settings

    app = app_from_settings({"URI": "memory://", "WAKE": "poll"}, where="MONGOSCHED")
    assert app.wake == "poll" and app.runner().wake_mode == "poll"
    with pytest.raises(ConfigurationError, match="MONGOSCHED: App: wake must be one of"):
        app_from_settings({"URI": "memory://", "WAKE": "always"}, where="MONGOSCHED")
    reconfigure(app, App("memory://", wake="change_stream"))
    assert app.wake == "change_stream"


def test_a_wake_up_time_already_past_does_not_hide_a_later_one() -> None:
    """A runner busy claiming never consumed the wake-up time of the job it claimed; a
    job due later, scheduled meanwhile, must still start at its due time, not a poll
    interval later."""
    app = App(f"memory://wake-later-{uuid.uuid4().hex[:8]}", poll_interval=LONG_POLL)
    later, release = threading.Event(), threading.Event()

    @app.task(name="first")
    def first() -> None:
        release.wait(5)  # busy until the second job is scheduled

    @app.task(name="second")
    def second() -> None:
        later.set()

    runner = app.runner(workers=1).start()
    try:
        assert runner.wait_ready(10)
        first.configure(delay=0.2).schedule()
        wait_for(lambda: runner.in_flight == 1, message="the first job running")
        second.configure(delay=1.0).schedule()  # due after the first's (past) time
        release.set()
        assert later.wait(1.0 + PROMPT)
    finally:
        runner.stop(timeout=5)
        app.close()
