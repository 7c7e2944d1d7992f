"""Log records kept with the job (mongosched.observe.logs): what a task logs while it
runs is written with its outcome, per attempt, capped, off per task; nothing else."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator

import pytest

from mongosched import App, RetryPolicy
from mongosched.errors import ConfigurationError
from mongosched.observe.logs import MAX_BYTES, MAX_RECORDS
from mongosched.testing import drain

log = logging.getLogger("shop.orders")


@pytest.fixture(autouse=True)
def info_level() -> Iterator[None]:
    """The task's logger lets INFO through (a record the logger drops is never made)."""
    before = log.level
    log.setLevel(logging.INFO)
    yield
    log.setLevel(before)


def test_what_a_task_logs_is_kept_with_its_job(app: App) -> None:
    handlers = list(logging.getLogger().handlers)

    @app.task(name="charge")
    def charge(amount: float) -> None:
        log.debug("not kept: below INFO")
        log.info("charging %.2f EUR", amount)
        logging.getLogger("mongosched.runner").warning("the package's own: not kept")
        try:
            raise KeyError("card")
        except KeyError:
            log.exception("card refused")

    job = charge.schedule(12.5)
    drain(app)
    entries = job.refresh().logs
    assert [(e.level, e.logger, e.attempt) for e in entries] == [
        ("INFO", "shop.orders", 1),
        ("ERROR", "shop.orders", 1),
    ]
    assert entries[0].message == "charging 12.50 EUR"
    assert entries[1].message.startswith("card refused\nTraceback (most recent call last):")
    assert "KeyError: 'card'" in entries[1].message
    assert job.started_at is not None and job.started_at <= entries[0].at <= job.updated_at
    assert logging.getLogger().handlers == handlers  # no handler added anywhere


def test_each_attempt_adds_its_own_and_a_new_occurrence_starts_afresh(app: App) -> None:
    calls = {"n": 0, "fail": 1}

    @app.task(name="flaky", retry=RetryPolicy(retries=2, delay=0))
    def flaky() -> None:
        calls["n"] += 1
        log.warning("attempt %d", calls["n"])
        if calls["fail"]:
            raise ValueError("not yet")

    job = flaky.schedule()
    drain(app)
    assert job.refresh().status.value == "failed"
    assert [(e.message, e.attempt) for e in job.logs] == [
        ("attempt 1", 1),
        ("attempt 2", 2),
        ("attempt 3", 3),
    ]
    calls["n"], calls["fail"] = 0, 0
    app.retry_job(job)  # an operator's retry: a new occurrence
    drain(app)
    assert [(e.message, e.attempt) for e in job.refresh().logs] == [("attempt 1", 1)]


def test_a_silent_new_occurrence_clears_the_last_ones(app: App) -> None:
    loud = {"on": True}

    @app.task(name="maybe", retry=0)
    def maybe() -> None:
        if loud["on"]:
            log.info("said something")
        raise ValueError("no")

    job = maybe.schedule()
    drain(app)
    assert len(job.refresh().logs) == 1
    loud["on"] = False
    app.retry_job(job)
    drain(app)
    assert job.refresh().logs == ()


def test_records_of_other_threads_and_of_tasks_that_opt_out_are_not_kept(app: App) -> None:
    @app.task(name="spawns")
    def spawns() -> None:
        thread = threading.Thread(target=lambda: log.info("from another thread"))
        thread.start()
        thread.join()
        log.info("from the job's thread")

    @app.task(name="quiet", capture_logs=False)
    def quiet() -> None:
        log.info("not kept")

    @app.task(name="verbose", capture_logs=logging.DEBUG)
    def verbose() -> None:
        log.setLevel(logging.DEBUG)
        log.debug("kept at DEBUG")

    jobs = [spawns.schedule(), quiet.schedule(), verbose.schedule()]
    drain(app)
    logged = [[e.message for e in j.refresh().logs] for j in jobs]
    assert logged == [["from the job's thread"], [], ["kept at DEBUG"]]


def test_a_job_keeps_at_most_the_cap_and_says_how_many_were_cut(app: App) -> None:
    @app.task(name="chatty")
    def chatty(n: int, size: int) -> None:
        for i in range(n):
            log.info("line %d %s", i, "x" * size)

    many, big = chatty.schedule(MAX_RECORDS + 50, 1), chatty.schedule(100, 4096)
    drain(app)
    entries = many.refresh().logs
    assert len(entries) == MAX_RECORDS + 1
    assert entries[MAX_RECORDS - 1].message.startswith(f"line {MAX_RECORDS - 1} ")
    cut = entries[-1]
    assert (cut.level, cut.logger) == ("WARNING", "mongosched")
    assert cut.message.startswith("50 more log record(s) cut: a job keeps at most 200 records")
    entries = big.refresh().logs
    text = sum(len(e.message) + len(e.logger) for e in entries[:-1])
    assert text <= MAX_BYTES and len(entries) < 20
    assert entries[-2].message.endswith(" [cut]")
    assert entries[-1].message.startswith(f"{100 - (len(entries) - 1)} more log record(s) cut")


@pytest.mark.parametrize("value", ["yes", -1, 2.5, None])
def test_a_bad_capture_logs_option_names_the_task(
    make_app: Callable[..., App], value: object
) -> None:
    app = make_app()
    with pytest.raises(ConfigurationError, match=r"task 'bad': capture_logs must be True"):
        app.task(name="bad", capture_logs=value)(lambda: None)
