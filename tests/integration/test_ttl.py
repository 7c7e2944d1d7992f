"""What the server's TTL monitor deletes for the library, on SecantusDB: finished jobs
past their retention, the entries of runners that stopped refreshing them, idle limit
documents; and nothing else.

The library writes ``expire_at`` and makes the TTL indexes (``prepare``); the server
deletes. Clocks in the past make the expiries fall in the real past (the monitor reads
the server's clock). The monitor is made to sweep at once (``sweep_ttl``): SecantusDB
0.7.0b3 sweeps every 60 s whatever it is told (see tests/meta/test_realserver.py).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

from mongosched import App, JobStatus
from mongosched.runner.registration import FORGET_AFTER
from mongosched.testing import FakeClock, drain
from tests.support.realserver import RealServer, sweep_ttl
from tests.support.server_fixtures import with_database
from tests.support.waiting import wait_for

WORKERS = "mongosched_jobs_workers"


@dataclass
class OnServer:
    uri: str
    client: Any
    name: str

    def app(self, clock: FakeClock | None = None, **options: Any) -> App:
        return App(self.uri, clock=clock, lease_duration=5, poll_interval=0.05, **options)

    def ids(self, collection: str) -> list[Any]:
        return [d["_id"] for d in self.client[self.name][collection].find({}, {"_id": 1})]

    def sweep(self) -> None:
        sweep_ttl(self.client)


@pytest.fixture
def on_server(real_server: RealServer) -> Iterator[OnServer]:
    """A database of its own on SecantusDB (dropped after)."""
    name = f"mongosched_ttl_{uuid.uuid4().hex[:12]}"
    client = real_server.client()
    try:
        yield OnServer(with_database(real_server.uri, name), client, name)
    finally:
        client.drop_database(name)
        client.close()


def _ago(**delta: float) -> FakeClock:
    return FakeClock(datetime.now(timezone.utc).replace(microsecond=0) - timedelta(**delta))


def test_finished_jobs_go_when_their_retention_ends(on_server: OnServer) -> None:
    clock = _ago(days=8)  # a week and a day ago
    app = on_server.app(clock, keep_completed=timedelta(days=7), keep_failed=None)
    ok = app.task(name="ok")(lambda: None)

    @app.task(name="bad", retry=1)
    def bad() -> None:
        raise ValueError("on purpose")

    done_then, failed_then = app.schedule("ok"), app.schedule("bad")
    drain(app)
    clock.set(datetime.now(timezone.utc))
    done_now, waiting = ok.schedule(), ok.configure(delay=timedelta(days=30)).schedule()
    drain(app)
    assert done_then.refresh().status is JobStatus.COMPLETED
    assert failed_then.refresh().status is JobStatus.FAILED
    assert done_now.refresh().status is JobStatus.COMPLETED
    on_server.sweep()
    # Completed a week and a day ago: gone. Failed (kept forever), completed just now
    # (for a week) and not yet run: kept.
    assert set(on_server.ids("mongosched_jobs")) == {failed_then.id, done_now.id, waiting.id}
    app.close()


def test_the_entry_of_a_runner_that_stopped_refreshing_it_goes(on_server: OnServer) -> None:
    # A runner whose clock is past its entry's lifetime: as if it had not refreshed its
    # entry since then (killed, or cut off).
    stale_app = on_server.app(_ago(seconds=FORGET_AFTER.total_seconds() + 60))
    live_app = on_server.app()
    stale = stale_app.runner(workers=1, name="stale").start()
    live = live_app.runner(workers=1, name="live").start()
    try:
        assert stale.wait_ready(10) and live.wait_ready(10)
        wait_for(lambda: len(on_server.ids(WORKERS)) == 2, message="both registered")
        on_server.sweep()
        assert [w.name for w in live_app.live_runners()] == ["live"]
        assert len(on_server.ids(WORKERS)) == 1  # deleted, not just hidden
    finally:
        stale.stop(timeout=5)
        live.stop(timeout=5)
        stale_app.close()
        live_app.close()


def test_idle_limit_documents_go(on_server: OnServer) -> None:
    clock = _ago(hours=2)
    app = on_server.app(clock)
    app.task(name="rated", rate_limit="5/s")(lambda: None)
    app.schedule("rated")
    drain(app)
    limits = app.store.connection.limits.name  # type: ignore[attr-defined]
    assert len(on_server.ids(limits)) == 1
    on_server.sweep()
    assert on_server.ids(limits) == []
    app.close()
