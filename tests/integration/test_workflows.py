"""Durable workflows (docs/workflows.rst): steps recorded once and returned on replay,
sleeps, waits and gathers that write the workflow back to wait and free the thread,
events kept for a later wait, the non-determinism error, transactional steps, limits.
Each test runs on ``memory://`` and on the server."""

from __future__ import annotations

import contextlib
import threading
from collections import Counter
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest

from mongosched import (
    App,
    Cancellation,
    ConfigurationError,
    JobNotFound,
    JobStatus,
    NonDeterminismError,
    current_job,
    patched,
)
from mongosched._core.steps import StepKind, StepRecord
from mongosched.testing import FakeClock, drain
from tests.support.transactions import (
    EFFECTS,
    own_collection,
    store_target,
    tx_database,
    tx_uri,
)

__all__ = ["store_target", "tx_database", "tx_uri"]


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def wf_app(make_app: Any, clock: FakeClock) -> App:
    return make_app(clock=clock)


def test_steps_run_once_across_replays_and_sleep_waits_in_the_store(
    wf_app: App, clock: FakeClock
) -> None:
    app, calls = wf_app, Counter[str]()

    @app.step()
    def charge(order: str) -> dict[str, Any]:
        calls["charge"] += 1
        return {"order": order, "paid": 10}

    @app.step()
    def ship(payment: dict[str, Any]) -> str:
        calls["ship"] += 1
        return f"shipped {payment['order']}"

    @app.workflow(name="orders.fulfil")
    def fulfil(order: str) -> str:
        payment = charge(order)
        app.sleep(timedelta(hours=1))
        return ship(payment)

    job = fulfil.schedule("A-1")
    drain(app)
    assert job.refresh().status is JobStatus.PENDING  # asleep, its thread freed
    assert calls == {"charge": 1}
    drain(app)  # not yet due
    assert calls == {"charge": 1}
    clock.advance(timedelta(hours=1, seconds=1))
    drain(app)
    assert job.refresh().status is JobStatus.COMPLETED
    assert job.result == "shipped A-1"
    assert calls == {"charge": 1, "ship": 1}
    kinds = [(s.position, s.kind, s.name) for s in app.steps(job.id)]
    assert [k[1] for k in kinds] == [StepKind.STEP, StepKind.SLEEP, StepKind.STEP]


def test_event_sent_before_the_wait_is_kept_and_a_later_one_wakes(
    wf_app: App, clock: FakeClock
) -> None:
    app = wf_app

    @app.workflow(name="approve")
    def approve() -> list[Any]:
        first = app.wait_for("approved", timeout=timedelta(hours=4))
        app.set_event("stage", "second")
        second = app.wait_for("approved", timeout=timedelta(hours=4))
        third = app.wait_for("approved", timeout=timedelta(minutes=5))
        return [first, second, third]

    job = approve.schedule()
    app.send(job.id, "approved", {"by": "ops"})  # before the workflow ever ran
    drain(app)
    assert job.refresh().status is JobStatus.PENDING  # waits for the second
    assert app.get_event(job.id, "stage") == "second"
    app.send(job.id, "approved", "again")
    assert job.refresh().run_at <= app.now()  # the send made it due
    drain(app)
    assert job.refresh().status is JobStatus.PENDING  # waits for the third: none comes
    clock.advance(timedelta(minutes=6))
    drain(app)
    assert job.refresh().status is JobStatus.COMPLETED
    assert job.result == [{"by": "ops"}, "again", None]


def test_gather_waits_for_every_job_and_returns_their_results(wf_app: App) -> None:
    app = wf_app

    @app.task(name="pack")
    def pack(item: str) -> str:
        return item.upper()

    @app.workflow(name="fanout")
    def fanout(items: list[str]) -> list[str]:
        return app.gather(pack.job(item) for item in items)  # type: ignore[no-any-return]

    job = fanout.schedule(["a", "b", "c"])
    drain(app)
    assert job.refresh().status is JobStatus.COMPLETED
    assert job.result == ["A", "B", "C"]
    assert app.count_jobs(task="pack") == 3  # replays scheduled none again


def test_a_replay_that_meets_another_step_stops_with_non_determinism(
    wf_app: App, clock: FakeClock
) -> None:
    app, version = wf_app, {"new": False}

    @app.step(name="old")
    def old() -> int:
        return 1

    @app.step(name="new")
    def new() -> int:
        return 2

    @app.workflow(name="changing")
    def changing() -> int:
        value = new() if version["new"] else old()
        app.sleep(60)
        return value

    job = changing.schedule()
    drain(app)
    version["new"] = True
    clock.advance(timedelta(seconds=61))
    drain(app)
    stored = job.refresh()
    assert stored.status is JobStatus.FAILED
    assert stored.error is not None and stored.error.type.endswith(NonDeterminismError.__name__)
    assert "'old'" in stored.error.message and "'new'" in stored.error.message


def test_patched_keeps_old_histories_and_marks_new_ones(wf_app: App, clock: FakeClock) -> None:
    app, changed = wf_app, {"yes": False}

    @app.step(name="a")
    def a() -> str:
        return "a"

    @app.step(name="b")
    def b() -> str:
        return "b"

    @app.workflow(name="patching")
    def patching() -> str:
        value = b() if changed["yes"] and patched("use-b") else a()
        app.sleep(60)
        return value

    before = patching.schedule()
    drain(app)  # asleep, recorded before the change
    changed["yes"] = True
    after = patching.schedule()
    clock.advance(timedelta(seconds=61))
    drain(app)
    clock.advance(timedelta(seconds=61))
    drain(app)
    assert before.refresh().result == "a"
    assert after.refresh().result == "b"


def test_a_result_that_is_not_bson_fails_naming_workflow_and_step(wf_app: App) -> None:
    app = wf_app

    @app.step(name="bad")
    def bad() -> object:
        return object()

    @app.workflow(name="limits")
    def limits() -> None:
        bad()

    job = limits.schedule()
    drain(app)
    stored = job.refresh()
    assert stored.status is JobStatus.FAILED
    assert stored.error is not None
    assert "'limits'" in stored.error.message and "'bad'" in stored.error.message
    assert stored.attempts == 1  # failed at once: a replay would record it no better


def two_steps(app: App, name: str, calls: Counter[str], broken: dict[str, bool]) -> Any:
    """A workflow ``name`` of two counted steps; the second raises while ``broken``."""

    @app.step(name="first")
    def first() -> int:
        calls["first"] += 1
        return 1

    @app.step(name="second")
    def second(value: int) -> int:
        calls["second"] += 1
        if broken.get("yes"):
            raise RuntimeError("card declined")
        return value + 1

    @app.workflow(name=name)
    def workflow() -> int:
        return second(first())

    return workflow


def test_a_replay_after_a_crash_skips_the_recorded_steps(wf_app: App) -> None:
    app, calls = wf_app, Counter[str]()
    recovering = two_steps(app, "recovering", calls, {})
    job = recovering.schedule()
    # What a runner that died after recording the first step left behind.
    app.store.workflows.record_step(StepRecord(job.id, 0, "first", value=41), "dead-runner")
    drain(app)
    assert job.refresh().result == 42
    assert calls == {"second": 1}


def test_a_step_called_outside_a_workflow_is_a_plain_call(wf_app: App) -> None:
    app = wf_app

    @app.step()
    def plain(x: int) -> int:
        return x * 2

    @app.workflow(name="inline")
    def inline(x: int) -> int:
        return plain(x) + 1

    assert plain(2) == 4
    assert inline(2) == 5  # outside a runner, a workflow runs inline


def test_transactional_step_writes_and_record_commit_together(wf_app: App) -> None:
    app = wf_app
    effects = own_collection(app, EFFECTS)

    @app.step(name="ship", transactional=True)
    def ship(order: str) -> str:
        job = current_job()
        assert job is not None and job.transaction is not None
        if effects is not None:
            effects.insert_one({"order": order}, session=job.session)
        return "ok"

    @app.workflow(name="tx")
    def tx(order: str) -> str:
        result = ship(order)
        app.sleep(0)
        return result

    job = tx.schedule("A-1")
    drain(app)
    drain(app)
    assert job.refresh().result == "ok"
    if effects is not None:
        assert effects.count_documents({"order": "A-1"}) == 1
    assert [s.name for s in app.steps(job.id)] == ["ship", "sleep"]


def test_a_transactional_step_s_framework_writes_join_its_transaction(wf_app: App) -> None:
    """The app's transaction integrations (Django's, on MongoDB) bind a transactional
    step's transaction around its function, as they bind a transactional task's: the
    framework's own writes join it."""
    app = wf_app
    bound: list[tuple[Any, Any]] = []

    class Integration:
        def current(self) -> None:
            return None

        @contextlib.contextmanager
        def bind(self, transaction: Any) -> Iterator[None]:
            bound.append(("enter", transaction))
            yield
            bound.append(("exit", transaction))

    app.add_transaction_integration(Integration())
    seen: list[Any] = []

    @app.step(name="ship", transactional=True)
    def ship() -> str:
        job = current_job()
        assert job is not None
        seen.append(job.transaction)
        return "ok"

    @app.step(name="plain")
    def plain() -> str:
        return "ok"

    @app.workflow(name="tx")
    def tx() -> str:
        return ship() + plain()

    job = tx.schedule()
    drain(app)
    assert job.refresh().result == "okok"
    assert len(seen) == 1 and seen[0] is not None
    assert bound == [("enter", seen[0]), ("exit", seen[0])]  # the step's alone


def test_sleeping_workflows_hold_no_thread(wf_app: App, request: pytest.FixtureRequest) -> None:
    app = wf_app
    count = 10_000 if "memory" in request.node.name else 200

    @app.workflow(name="sleeper")
    def sleeper() -> None:
        app.sleep(timedelta(days=1))

    app.schedule_bulk([sleeper.job() for _ in range(count)])
    threads = threading.active_count()
    assert drain(app, limit=count + 1) == count
    assert app.count_jobs(task="sleeper", status="pending") == count
    assert len(app.steps(app.get_jobs(task="sleeper", limit=1)[0].id)) == 1
    assert threading.active_count() == threads  # asleep in the store, not in a thread


def test_retry_runs_again_from_the_failed_step_and_fork_copies_earlier_steps(
    wf_app: App,
) -> None:
    app, calls, broken = wf_app, Counter[str](), {"yes": True}
    retrying = two_steps(app, "retrying", calls, broken)
    job = retrying.schedule()
    drain(app)
    assert job.refresh().status is JobStatus.FAILED  # a step's failure: at once
    assert calls == {"first": 1, "second": 1}
    broken["yes"] = False
    app.retry_workflow(job.id)
    drain(app)
    assert job.refresh().result == 2
    assert calls == {"first": 1, "second": 2}  # the first step was kept
    fork = app.fork_workflow(job.id, 1)
    drain(app)
    assert fork.refresh().result == 2
    assert calls == {"first": 1, "second": 3}  # the fork copied the first, ran the second


def test_cancel_cancels_what_the_workflow_gathered(wf_app: App) -> None:
    app = wf_app

    @app.task(name="slow")
    def slow() -> None: ...

    @app.workflow(name="gathering")
    def gathering() -> list[Any]:
        return app.gather([slow.configure(delay=3600).job()])  # type: ignore[no-any-return]

    job = gathering.schedule()
    drain(app)
    assert app.cancel_workflow(job.id, actor="ops") is Cancellation.CANCELLED
    assert job.refresh().status is JobStatus.CANCELLED
    [child] = app.get_jobs(task="slow", limit=0)
    assert child.status is JobStatus.CANCELLED
    cancels = [(e.action, e.job, e.actor) for e in app.audit.entries()]
    assert ("cancel", job.id, "ops") in cancels and ("cancel", child.id, "ops") in cancels


def test_is_workflow_tells_a_workflow_from_a_task(wf_app: App) -> None:
    app = wf_app

    @app.task(name="plain")
    def plain() -> None: ...

    @app.workflow(name="flow")
    def flow() -> None: ...

    assert app.is_workflow("flow") and not app.is_workflow("plain")
    assert not app.is_workflow("nothing")
    with pytest.raises(JobNotFound, match="cancel_workflow: workflow .* does not exist"):
        app.cancel_workflow(plain.schedule().id)


def test_a_fork_is_in_the_audit_trail_and_its_position_checked(wf_app: App) -> None:
    app, calls = wf_app, Counter[str]()
    once = two_steps(app, "once", calls, {"yes": False})
    job = once.schedule()
    drain(app)
    fork = app.fork_workflow(job.id, 1, actor="ops")
    [entry] = [e for e in app.audit.entries() if e.action == "fork"]
    assert (entry.actor, entry.job, entry.count) == ("ops", job.id, 1)
    assert entry.target == f"workflow {job.id} (once)"
    assert entry.detail == f"from position 1: job {fork.id}"
    for bad in (-1, "1", True):
        with pytest.raises(
            ConfigurationError, match=r"fork_workflow of workflow .*\(once\): position"
        ):
            app.fork_workflow(job.id, bad)  # type: ignore[arg-type]
