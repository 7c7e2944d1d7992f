"""Production edges: an unreachable database costs one bounded wait and a clear error."""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time
import uuid
from collections.abc import Callable
from datetime import date
from decimal import Decimal
from unittest.mock import ANY

import pytest

from mongosched import App, JobStatus, current_job
from mongosched.cli import main
from mongosched.errors import MongoschedError, SerializationError, StoreUnavailable
from mongosched.testing import drain
from tests.support.server_fixtures import SharedDatabase, mongo_server, shared_db
from tests.support.waiting import wait_for

__all__ = ["mongo_server", "shared_db"]


def _closed_port() -> int:
    """A local port nobody listens on (connections are refused at once)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.mark.parametrize(
    ("uri_options", "app_timeout", "bound"),
    [("", 0.5, 0.5), ("?serverSelectionTimeoutMS=700", 30, 0.7)],
    ids=["app-option", "uri-wins"],
)
def test_an_unreachable_server_costs_one_timeout_and_a_store_unavailable(
    uri_options: str, app_timeout: float, bound: float
) -> None:
    port = _closed_port()
    app = App(f"mongodb://127.0.0.1:{port}/db{uri_options}", connect_timeout=app_timeout)
    app.task(name="t")(lambda: None)
    for what, call in [
        ("schedule", lambda: app.schedule("t")),
        ("get_jobs", lambda: app.get_jobs()),
        ("cancel", lambda: app.cancel("0123456789abcdef01234567")),
    ]:
        started = time.monotonic()
        with pytest.raises(StoreUnavailable) as caught:
            call()
        elapsed = time.monotonic() - started
        assert bound * 0.9 <= elapsed < bound * 2 + 0.5, (what, elapsed)  # not x retries
        assert isinstance(caught.value, MongoschedError)
        # What was tried (where, how long) and what to do, in the library's words: not
        # the driver's own timeouts (socketTimeoutMS: 20000.0ms) nor an internal word.
        message = str(caught.value)
        assert message.startswith(f"cannot reach MongoDB at 127.0.0.1:{port} within {bound:g} s")
        assert "Connection refused" in message and "check that MongoDB is running" in message
        assert "socketTimeoutMS" not in message and "Timeout:" not in message, message


def test_a_schedule_behind_a_starting_runner_costs_one_timeout_not_two(
    make_app: Callable[..., App], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A runner starting in a web process prepares the store while the database is
    down; a request that schedules meanwhile waits for that attempt and gets its
    failure, rather than waiting for it and then trying again (two timeouts)."""
    app = make_app()
    app.task(name="t")(lambda: None)
    attempts: list[str] = []

    def unreachable() -> None:  # what preparing costs when the server is down
        attempts.append(threading.current_thread().name)
        time.sleep(0.5)
        raise StoreUnavailable("create index: connection refused")

    monkeypatch.setattr(app.store, "prepare", unreachable)
    runner = app.start_runner(workers=1)  # its dispatcher prepares at once, again and again
    try:
        wait_for(lambda: attempts, message="the runner to try")
        for call in range(4):
            started = time.monotonic()
            with pytest.raises(StoreUnavailable, match="connection refused"):
                app.schedule("t")
            elapsed = time.monotonic() - started
            assert elapsed < 0.75, (call, elapsed)  # one attempt (0.5 s), never two
        assert runner.is_running and not runner.ready
    finally:
        app.stop_runner(timeout=5)


@pytest.mark.processes
def test_a_runner_starts_at_once_without_the_database_and_works_when_it_comes(
    shared_db: SharedDatabase,
) -> None:
    server = shared_db.server
    if server is None:
        pytest.skip("needs the SecantusDB server to take the database away")
    app = App(shared_db.uri(), connect_timeout=0.5, poll_interval=0.05, lease_duration=3)
    app.task(name="t")(lambda: "done")
    server.kill()
    try:
        started = time.monotonic()
        runner = app.runner(workers=1).start()
        assert time.monotonic() - started < 0.2  # start() never waits on the database
        wait_for(lambda: runner.health()["last_error"] is not None, message="tried")
        health = runner.health()
        assert health["running"] and not health["ready"] and health["healthy"]
    finally:
        server.start()
    assert runner.wait_ready(timeout=30)
    job = app.schedule("t")
    assert job.wait(timeout=10).result == "done"
    assert runner.stop(timeout=5)


def test_payloads_users_pass_round_trip(make_app: Callable[..., App]) -> None:
    app = make_app()
    seen: list[tuple[object, ...]] = []
    app.task(name="t")(lambda *args: seen.append(args) or list(args))
    ident, amount = uuid.uuid4(), Decimal("0.10")
    job = app.schedule("t", ident, amount, [1, 2])
    drain(app)
    assert seen == [(ident, amount, [1, 2])]
    assert job.refresh().result == [ident, amount, [1, 2]]
    with pytest.raises(SerializationError, match="task 't': argument 0 .*isoformat"):
        app.schedule("t", date(2026, 1, 1))
    with pytest.raises(SerializationError, match="task 't': argument 2 holds a tuple.*a list"):
        app.schedule("t", ident, amount, (1, 2))  # it would reach the task as a list
    assert app.count_jobs() == 1


def test_async_tasks_run_in_their_own_event_loop(make_app: Callable[..., App]) -> None:
    app = make_app()

    @app.task(name="fetch")
    async def fetch(n: int) -> int:
        await asyncio.sleep(0.01)
        ctx = current_job()
        assert ctx is not None and not ctx.is_cancelled()
        return n * 2

    @app.task(name="hang", timeout=0.3, retry=0)
    async def hang() -> None:
        await asyncio.sleep(30)

    done, stuck = app.schedule("fetch", 21), app.schedule("hang")
    runner = app.runner(workers=2).start()
    try:
        assert done.wait(timeout=10).result == 42
        stuck.wait(timeout=10)
    finally:
        runner.stop(timeout=5)
    assert stuck.status is JobStatus.FAILED and stuck.error is not None
    assert stuck.error.type == "JobTimeout"


def test_a_delayed_job_starts_when_due_not_a_poll_interval_later(
    make_app: Callable[..., App],
) -> None:
    """An idle runner of this process waits until the next job it knows of is due."""
    app = make_app(poll_interval=30)
    app.task(name="t")(lambda: "ran")
    runner = app.runner(workers=1).start()
    try:
        assert runner.wait_ready(timeout=10)
        job = app.get_task("t").configure(delay=0.3).schedule()
        assert job.wait(timeout=10).result == "ran"  # not 30 s later
    finally:
        runner.stop(timeout=5)


def test_mongosched_ping_for_probes(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--uri", "memory://ping-test", "ping", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == {"ok": True, "ms": ANY, "running": 0}
    down = f"mongodb://127.0.0.1:{_closed_port()}/db"
    started = time.monotonic()
    assert main(["--uri", down, "--timeout", "0.5", "ping"]) == 4  # cannot connect
    assert time.monotonic() - started < 3
    assert "cannot reach MongoDB" in capsys.readouterr().err
