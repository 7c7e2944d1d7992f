"""Dedupe beyond one key at a time: a throttle window (``dedupe_window``) and debounce
(``dedupe="replace"``), as a user schedules them, with the injectable clock."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

from mongosched import App, Job
from mongosched._core.records import JobStatus
from mongosched.testing import FakeClock, drain


def stored(app: App, job_id: Any) -> Job[Any]:
    job = app.get_job(job_id)
    assert job is not None
    return job


def test_a_throttle_window_allows_one_job_per_key_per_window(
    make_app: Callable[..., App], clock: FakeClock
) -> None:
    app = make_app(clock=clock)
    ran: list[int] = []

    @app.task(name="report")
    def report(n: int) -> None:
        ran.append(n)

    throttled = report.configure(dedupe_key="acme", dedupe_window=timedelta(minutes=5))
    first = throttled.schedule(1)
    assert drain(app) == 1 and ran == [1]
    clock.advance(seconds=299)
    # Finished, yet its window is open: the call returns the finished job.
    again = throttled.schedule(2)
    assert again.id == first.id and again.status is JobStatus.COMPLETED
    assert drain(app) == 0 and ran == [1]
    clock.advance(seconds=1)
    second = throttled.schedule(3)
    assert second.id != first.id
    assert drain(app) == 1 and ran == [1, 3]


def test_replace_debounces_while_pending_and_queues_behind_a_running_job(
    make_app: Callable[..., App], clock: FakeClock
) -> None:
    app = make_app(clock=clock)

    @app.task(name="reindex")
    def reindex(doc: str) -> str:
        return doc

    debounced = reindex.configure(dedupe_key="doc:7", dedupe="replace", delay=10)
    first = debounced.schedule("v1")
    clock.advance(seconds=5)
    last = debounced.schedule("v2")  # the last call wins, and pushes the due time
    assert last.id == first.id and last.args == ["v2"]
    assert last.run_at == clock() + timedelta(seconds=10)
    clock.advance(seconds=6)
    assert drain(app) == 0  # the first due time passed, the pushed one not yet
    clock.advance(seconds=4)
    runner = app.runner(workers=1)
    runner.prepare()
    assert runner.claim_next() is not None
    assert stored(app, first.id).status is JobStatus.RUNNING
    queued = debounced.schedule("v3")  # a running job is not touched
    assert queued.id != first.id and queued.status is JobStatus.PENDING
    assert stored(app, first.id).args == ["v2"]
    assert debounced.schedule("v4").id == queued.id
    assert stored(app, queued.id).args == ["v4"]


def test_a_short_retention_keeps_a_finished_job_until_its_window_closes(
    make_app: Callable[..., App], clock: FakeClock
) -> None:
    app = make_app(clock=clock, keep_completed=timedelta(seconds=1))
    ran: list[int] = []

    @app.task(name="digest")
    def digest(n: int) -> None:
        ran.append(n)

    throttled = digest.configure(dedupe_key="acme", dedupe_window=timedelta(hours=1))
    first = throttled.schedule(1)
    assert drain(app) == 1
    clock.advance(seconds=60)  # long past its retention, well inside its window
    again = throttled.schedule(2)
    assert again.id == first.id and drain(app) == 0 and ran == [1]
    assert stored(app, first.id).delete_at == first.created_at + timedelta(hours=1)
    clock.advance(hours=1)
    assert throttled.schedule(3).id != first.id
