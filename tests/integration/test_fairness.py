"""Fair shares across keys and priority aging, as users declare them (issue 27)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import timedelta

import pytest

from mongosched import App, Every
from mongosched.errors import ConfigurationError
from mongosched.store.memory import MemoryStore
from mongosched.testing import FakeClock, drain
from tests.conftest import TEST_URI
from tests.support.fairness import aging_stream
from tests.support.waiting import wait_for


def test_a_small_tenant_is_not_held_behind_a_large_backlog(make_app: Callable[..., App]) -> None:
    """Tenant A schedules 10,000 jobs (200 on SecantusDB), then tenant B 10: with 4
    workers, B's 10 all start within the first ~20 starts."""
    app = make_app()
    starts: list[str] = []
    lock = threading.Lock()

    @app.task(name="sync", fair_key="tenant")
    def sync(tenant: str, n: int) -> None:
        with lock:
            starts.append(tenant)

    # SecantusDB's planner scans the collection for each claim, ranked or not (see
    # tests/contract/test_mongo_only.py: plans_only_on_mongodb): a tenth of a second
    # per job at a few hundred jobs on this machine, so a smaller backlog there.
    backlog = 10_000 if isinstance(app.store, MemoryStore) or TEST_URI else 200
    app.schedule_bulk([sync.job("A", n) for n in range(backlog)])
    app.schedule_bulk([sync.job("B", n) for n in range(10)])
    runner = app.runner(workers=4).start()
    try:
        wait_for(lambda: starts.count("B") == 10, timeout=60, message="B's jobs start")
    finally:
        runner.stop(timeout=10)
    positions = [n for n, tenant in enumerate(starts) if tenant == "B"]
    assert positions[-1] < 24, positions


def test_a_delayed_job_takes_its_turn_when_it_comes_due(
    make_app: Callable[..., App], clock: FakeClock
) -> None:
    """Issue 32 #9: tenant B's job scheduled 3 s ahead ran after A's whole backlog
    (the 1,002nd of 1,000 + 2; without the delay, 2nd); now it runs among the next
    two once due, and a paused queue's job holds nothing back (#10)."""
    app = make_app(clock=clock)
    starts: list[str] = []

    @app.task(name="sync", fair_key="tenant")
    def sync(tenant: str, n: int) -> None:
        starts.append(tenant)

    backlog = 1_000 if isinstance(app.store, MemoryStore) or TEST_URI else 100  # as above
    sync.configure(queue="later").schedule("X", 0)
    app.pause(queue="later")
    app.schedule_bulk([sync.job("A", n) for n in range(backlog)])
    sync.configure(delay=3).schedule("B", 0)
    assert drain(app, limit=2) == 2
    clock.advance(seconds=3)
    assert drain(app, limit=2) == 2
    assert "B" in starts[2:4], starts[:6]


def test_weights_share_the_starts(make_app: Callable[..., App]) -> None:
    """Weights 3:1 over 1,000 starts (100 on SecantusDB): within 10% of 3:1."""
    app = make_app()
    starts: list[str] = []

    @app.task(name="crawl", fair_key="site", fair_weights={"big": 3})
    def crawl(site: str, n: int) -> None:
        starts.append(site)

    starts_counted = 1_000 if isinstance(app.store, MemoryStore) or TEST_URI else 100  # as above
    jobs = [crawl.job(site, n) for n in range(starts_counted) for site in ("big", "small")]
    app.schedule_bulk(jobs)
    assert drain(app, limit=starts_counted) == starts_counted
    ratio = starts.count("big") / starts.count("small")
    assert 2.7 <= ratio <= 3.3, ratio


def test_an_aging_job_runs_once_its_priority_rose_to_the_stream(
    make_app: Callable[..., App], clock: FakeClock
) -> None:
    """Only the report ages, a level a minute: at minute 8 it is at priority 1 and the
    oldest there, so it runs, although priority-1 work arrives faster than it runs."""
    started = aging_stream(make_app(clock=clock), clock, 20, report_aging=60)
    assert started["report"] == [8.0], started


def test_with_the_app_aging_every_job_a_level_counts_as_an_interval(
    make_app: Callable[..., App], clock: FakeClock
) -> None:
    """``App(aging=...)``: every job ages, the urgent ones too. A level is worth a
    minute of waiting: the report is served as if due 8 minutes later, after the 16
    urgent jobs due before that (not at minute 8), yet it never starves."""
    app = make_app(clock=clock, aging=timedelta(minutes=1))
    started = aging_stream(app, clock, 20)
    assert app.get_task("report").aging == 60.0  # the app's default
    assert started["report"] == [16.0], started


def test_without_aging_the_stream_starves_it(
    make_app: Callable[..., App], clock: FakeClock
) -> None:
    started = aging_stream(make_app(clock=clock), clock, 20)
    assert started["report"] == [] and len(started["urgent"]) == 20


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"aging": 0}, "aging must be > 0"),
        ({"fair_key": "nope"}, "fair_key"),
        ({"fair_weights": {"a": 2}}, "fair_weights needs a fair_key"),
        ({"fair_key": "tenant", "fair_weights": {"a": 0}}, r"fair_weights\['a'\]"),
        ({"aging": 60, "every": 60}, "neither ages nor shares"),
    ],
)
def test_bad_fairness_options_are_refused_naming_the_task(
    app: App, options: dict, message: str
) -> None:
    with pytest.raises(ConfigurationError, match=message):
        app.task(name="sync", **options)(lambda tenant="t": None)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"aging": 60}, "task 'sync': a repeating task neither ages nor shares"),
        ({"fair_key": "tenant"}, "task 'sync': a repeating task neither ages nor shares"),
        ({"rate_key": "tenant", "rate_limit": "5/s"}, "task 'sync': a repeating task has no"),
    ],
)
def test_a_repeat_given_to_one_call_follows_the_repeating_task_rule(
    app: App, options: dict, message: str
) -> None:
    task = app.task(name="sync", **options)(lambda tenant="t": None)
    with pytest.raises(ConfigurationError, match=message):
        task.configure(repeat=Every(60)).schedule()
    assert app.get_jobs(task="sync") == []
