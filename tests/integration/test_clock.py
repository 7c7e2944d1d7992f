"""Clock skew between a worker host and the MongoDB server: measured from the server's
``localTime`` (``hello``) when a runner starts, warned about, and shown in ``stats()``.

Runs against the SecantusDB test server, or the real one with MONGOSCHED_TEST_URI;
the in-process store has no clock of its own."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING, Any

import pytest

from mongosched import App
from mongosched.cli import main

if TYPE_CHECKING:
    from tests.support.server_fixtures import SharedDatabase

pytest_plugins = ["tests.support.server_fixtures"]


@pytest.fixture
def skewed(shared_db: SharedDatabase) -> Iterator[Any]:
    """``skewed(seconds)``: an App on the shared server whose clock runs that far behind."""
    apps: list[App] = []

    def make(seconds: float) -> App:
        app = App(
            shared_db.uri(serverSelectionTimeoutMS=5000),
            clock=lambda: datetime.now(timezone.utc) - timedelta(seconds=seconds),
            lease_duration=30,
            poll_interval=0.05,
        )
        apps.append(app)
        return app

    yield make
    for app in apps:
        app.close()


def test_a_runner_warns_at_start_when_its_clock_is_off(
    skewed: Any, caplog: pytest.LogCaptureFixture
) -> None:
    app = skewed(300)
    with caplog.at_level(logging.WARNING, logger="mongosched"):
        runner = app.runner(workers=1).start()
        runner.stop()
    warnings = [r.getMessage() for r in caplog.records if "clock is" in r.getMessage()]
    assert len(warnings) == 1 and "behind the MongoDB server's" in warnings[0], warnings
    assert 290 < app.stats()["clock_offset"] < 310


def test_no_warning_while_the_clocks_agree(skewed: Any, caplog: pytest.LogCaptureFixture) -> None:
    app = skewed(0)
    with caplog.at_level(logging.WARNING, logger="mongosched"):
        offset = app.runner(workers=1).check_clock()
    assert offset is not None and abs(offset) < 1.0
    assert "clock is" not in caplog.text


def test_a_store_without_a_clock_of_its_own_reports_no_offset(
    capsys: pytest.CaptureFixture[str],
) -> None:
    app = App("memory://")  # in-process: there is no server clock to compare with
    assert app.runner(workers=1).check_clock() is None
    assert app.stats()["clock_offset"] is None
    assert main(["stats"], app=app) == 0
    out = capsys.readouterr().out
    assert "running: 0" in out and "clock:" not in out


def test_the_stats_command_shows_the_offset(
    skewed: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["stats"], app=skewed(120)) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("clock:"))
    assert "ahead of this host's" in line and float(line.split()[4]) > 100


def test_the_default_clock_reads_whole_milliseconds_of_the_system_clock() -> None:
    app = App("memory://")
    before = datetime.now(timezone.utc) - timedelta(milliseconds=1)
    now = app.now()
    after = datetime.now(timezone.utc)
    assert now.tzinfo is timezone.utc and now.microsecond % 1000 == 0
    assert before <= now <= after


def test_a_time_in_milliseconds_is_exact_as_a_float_of_seconds() -> None:
    # What App.now relies on: fromtimestamp(ms / 1000) is that millisecond, exactly.
    epoch = datetime(1970, 1, 1, tzinfo=timezone.utc)
    start = int((datetime(2020, 1, 1, tzinfo=timezone.utc) - epoch).total_seconds() * 1000)
    end = int((datetime(2112, 1, 1, tzinfo=timezone.utc) - epoch).total_seconds() * 1000)
    step = (end - start) // 200_000 + 1  # ~200,000 values across the range, and their ends
    for ms in [*range(start, end, step), *range(end - 1000, end)]:
        value = datetime.fromtimestamp(ms / 1000, timezone.utc)
        assert value == epoch + timedelta(milliseconds=ms), ms
