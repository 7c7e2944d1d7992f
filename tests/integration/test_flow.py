"""Flow control through the public API: rate limits (global and keyed), keyed
concurrency, expiry, per-job timeouts, dependencies (see docs/flow-control.rst).

Time moves with the fake clock and ``drain``; the runner tests use short real
intervals."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

import pytest

from mongosched import App, JobStatus, Task
from mongosched.errors import ConfigurationError, JobNotFound
from mongosched.events import Event
from mongosched.limits import RateLimit
from mongosched.testing import FakeClock, drain
from tests.support.waiting import wait_for


@pytest.fixture
def flow(make_app: Callable[..., App], clock: FakeClock) -> App:
    return make_app(clock=clock)


def events(app: App, name: str) -> list[Event]:
    seen: list[Event] = []
    app.on(name, seen.append)
    return seen


def failing_steps(app: App, ran: list[str]) -> Task[..., None]:
    """Task ``step`` (no retries): records its ``name`` in ``ran``, then raises if told to."""

    @app.task(name="step", retry=0)
    def step(name: str, fail: bool = False) -> None:
        ran.append(name)
        if fail:
            raise ValueError(name)

    return step


# Spelling of the options -------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("spec", "count", "seconds"),
    [
        ("100/m", 100, 60),
        ("5/s", 5, 1),
        (" 7 / h ", 7, 3600),
        ("2/d", 2, 86400),
        ("10/30s", 10, 30),
        ((3, timedelta(seconds=2)), 3, 2),
        ((3, 0.5), 3, 0.5),
        (timedelta(minutes=5), 1, 300),
    ],
)
def test_rate_limit_spellings(flow: App, spec: Any, count: int, seconds: float) -> None:
    task = flow.task(name=f"t{count}{seconds}", rate_limit=spec)(lambda: None)
    assert task.rate_limit == RateLimit(count, timedelta(seconds=seconds))


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"rate_limit": "100"}, "rate_limit '100' is not a rate"),
        ({"rate_limit": "0/s"}, "rate_limit count must be an int from 1 to 1000"),
        ({"rate_limit": "5000/s"}, "rate_limit count must be an int from 1 to 1000"),
        ({"rate_limit": "5/w"}, "is not a rate"),
        ({"rate_limit": (5, -1)}, "rate_limit window must be"),
        ({"rate_limit": timedelta(0)}, "rate_limit window must be > 0"),
        ({"rate_limit": 5}, "rate_limit must be a str such as '100/m'"),
        ({"rate_key": "customer"}, "rate_key needs a rate_limit"),
        ({"rate_limit": "1/s", "rate_key": "not an identifier"}, "rate_key must be the name"),
        ({"concurrency_key": "c"}, "concurrency_key needs a concurrency"),
        ({"rate_limit": "1/s", "rate_key": "c", "every": 60}, "a repeating task has no per-job"),
    ],
)
def test_bad_flow_options_name_the_task_and_field(
    flow: App, options: dict[str, Any], message: str
) -> None:
    with pytest.raises(ConfigurationError, match="task 'bad'") as raised:
        flow.task(name="bad", **options)(lambda customer=None, c=None: None)
    assert message in str(raised.value)


def test_bad_scheduling_options_name_the_task_and_field(flow: App, clock: FakeClock) -> None:
    task = flow.task(name="t")(lambda: None)
    keyed = flow.task(name="k", rate_limit="1/s", rate_key="customer")(lambda **kw: None)
    cases: list[tuple[Callable[[], Any], str]] = [
        (lambda: task.configure(expires=timedelta(0)).schedule(), "expires must be > 0"),
        (lambda: task.configure(expires=5).schedule(), "expires must be a timedelta"),
        (
            lambda: task.configure(expires=datetime(2020, 1, 1)).schedule(),
            "expires must be timezone-aware",
        ),
        (
            lambda: task.configure(delay=60, expires=timedelta(seconds=30)).schedule(),
            "must be after the job is due",
        ),
        (lambda: task.configure(timeout=0).schedule(), "timeout must be > 0"),
        (lambda: task.configure(depends_on=[]).schedule(), "depends_on is empty"),
        (lambda: task.configure(depends_on=5).schedule(), "depends_on takes jobs or job ids"),
        (
            lambda: task.configure(on_dependency_failure="ignore").schedule(),
            "on_dependency_failure must be 'cancel' or 'run'",
        ),
        (lambda: keyed.schedule(), "names the argument 'customer', which this job does not"),
        (lambda: keyed.schedule(customer=""), "a job's key must be a non-empty str"),
    ]
    for call, message in cases:
        with pytest.raises(ConfigurationError, match="task '[tk]'") as raised:
            call()
        assert message in str(raised.value)
    with pytest.raises(JobNotFound, match="depends_on: no job with id"):
        task.configure(depends_on="6b0440d0f2b4b8a2c1a2b3c4").schedule()
    assert flow.count_jobs() == 0


# Rate limits ----------------------------------------------------------------------------------------
def test_a_rate_limit_holds_jobs_back_uncounted_until_the_window_frees(
    flow: App, clock: FakeClock
) -> None:
    ran: list[int] = []
    task = flow.task(name="limited", rate_limit="3/s")(ran.append)
    jobs = [task.schedule(n) for n in range(8)]
    assert drain(flow) == 3
    assert ran == [0, 1, 2]
    held = [job.refresh() for job in jobs[3:]]
    assert all(j.status is JobStatus.PENDING and j.attempts == 0 for j in held)
    clock.advance(seconds=0.5)
    assert drain(flow) == 0  # the window has not moved on
    clock.advance(seconds=0.6)
    assert drain(flow) == 3 and ran == [0, 1, 2, 3, 4, 5]  # in order, FIFO
    clock.advance(seconds=1.1)
    assert drain(flow) == 2
    assert all(job.refresh().status is JobStatus.COMPLETED for job in jobs)
    assert all(job.attempts == 1 for job in jobs)


def test_a_saturated_task_costs_no_claim_until_its_window_frees(
    flow: App, clock: FakeClock
) -> None:
    task = flow.task(name="limited", rate_limit="1/m")(lambda: None)
    other = flow.task(name="free")(lambda: None)
    for _ in range(3):
        task.schedule()
    runner = flow.runner(workers=1)
    assert runner.run_until_idle() == 1
    assert runner.claimer.gate.held_back == 1  # one claim found the window full
    for _ in range(5):
        other.schedule()
        clock.advance(seconds=1)
        assert runner.run_until_idle() == 1
    assert runner.claimer.gate.held_back == 1  # the saturated task was left out of every claim
    clock.advance(seconds=60)
    assert runner.run_until_idle() == 1


def test_a_keyed_rate_limit_lets_other_keys_run(flow: App, clock: FakeClock) -> None:
    ran: list[tuple[str, int]] = []

    @flow.task(name="call", rate_limit="2/m", rate_key="customer")
    def call(n: int, customer: str) -> None:
        ran.append((customer, n))

    noisy = [call.schedule(n, customer="noisy") for n in range(6)]
    quiet = [call.schedule(n, customer=f"quiet{n}") for n in range(3)]
    assert noisy[0].record.rate_key == "noisy"
    drain(flow)
    assert [c for c, _ in ran].count("noisy") == 2
    assert all(j.refresh().status is JobStatus.COMPLETED for j in quiet)
    held = [j.refresh() for j in noisy[2:]]
    assert all(j.status is JobStatus.PENDING and j.attempts == 0 for j in held)
    # Due when the key frees, spaced at its rate (not all at once at the next window).
    assert all(j.run_at > clock() for j in held)
    assert len({j.run_at for j in held}) == len(held)
    for _ in range(10):
        clock.advance(seconds=31)
        drain(flow)
    assert all(j.refresh().status is JobStatus.COMPLETED for j in noisy)
    starts = sorted(j.started_at for j in noisy if j.started_at)
    assert all(b - a > timedelta(seconds=60) for a, b in zip(starts, starts[2:], strict=False))


def test_a_key_named_by_its_parameter_is_found_whatever_the_call_form(
    flow: App, clock: FakeClock
) -> None:
    """A key names a parameter: its value is found passed by position, by keyword, or
    as its default; one through ``**kwargs`` by keyword."""

    @flow.task(name="call", rate_limit="1/m", rate_key="customer")
    def call(customer: str, i: int) -> None: ...

    @flow.task(name="regional", concurrency=1, concurrency_key="region")
    def regional(customer: str, region: str = "eu", **extra: Any) -> None: ...

    @flow.task(name="open", rate_limit="1/m", rate_key="tenant")
    def open_(*args: Any, **kwargs: Any) -> None: ...

    positional, keyword = call.schedule("acme", 1), call.schedule(i=2, customer="acme")
    assert positional.record.rate_key == keyword.record.rate_key == "acme"
    assert call.schedule("other", 3).record.rate_key == "other"
    assert regional.schedule("x").record.concurrency_key == "eu"
    assert regional.schedule("x", "us").record.concurrency_key == "us"
    assert regional.schedule("x", region="ap", more=1).record.concurrency_key == "ap"
    assert open_.schedule(1, tenant="t1").record.rate_key == "t1"
    with pytest.raises(ConfigurationError, match="task 'open': rate_key names the argument"):
        open_.schedule("t1")
    drain(flow)  # one start a minute per customer, however its jobs were scheduled
    statuses = [j.refresh().status for j in (positional, keyword)]
    assert sorted(statuses) == [JobStatus.COMPLETED, JobStatus.PENDING]


@pytest.mark.parametrize("option", ["rate_key", "concurrency_key"])
def test_a_key_naming_no_parameter_is_refused_at_decoration(flow: App, option: str) -> None:
    limits = {"rate_limit": "1/s", "concurrency": 1}
    with pytest.raises(ConfigurationError) as raised:
        flow.task(name="bad", **limits, **{option: "customer"})(lambda client, *rest: None)
    message = str(raised.value)
    assert message.startswith(f"task 'bad': {option} names 'customer', which is not a parameter")
    assert "(client, *rest)" in message
    # A function taking **kwargs may be given the key by keyword.
    task = flow.task(name="open", **limits, **{option: "customer"})(lambda **kw: None)
    assert getattr(task.schedule(customer="c").record, option) == "c"


def test_a_key_function_over_the_arguments(flow: App, clock: FakeClock) -> None:
    task = flow.task(name="k", rate_limit="1/h", rate_key=lambda account, **_: account["id"])(
        lambda account, n=0: None
    )
    a = task.schedule({"id": 7})
    b = task.schedule({"id": 7}, n=1)
    c = task.schedule({"id": 8})
    assert (a.record.rate_key, c.record.rate_key) == ("7", "8")
    drain(flow)
    assert a.refresh().status is c.refresh().status is JobStatus.COMPLETED
    assert b.refresh().status is JobStatus.PENDING


def test_a_keyed_concurrency_limit_holds_per_key(make_app: Callable[..., App]) -> None:
    app = make_app()
    gate = threading.Event()
    running: dict[str, int] = {}
    peak: dict[str, int] = {}
    lock = threading.Lock()

    @app.task(name="work", concurrency=1, concurrency_key="tenant")
    def work(tenant: str) -> None:
        with lock:
            running[tenant] = running.get(tenant, 0) + 1
            peak[tenant] = max(peak.get(tenant, 0), running[tenant])
        gate.wait(5)
        time.sleep(0.02)
        with lock:
            running[tenant] -= 1

    jobs = [work.schedule(tenant=t) for t in ("a", "a", "a", "b", "c")]
    due = {j.id: j.run_at for j in jobs}

    def held_back(job: Any) -> bool:  # claimed, then given back due later, unrun
        job.refresh()
        return job.status is JobStatus.PENDING and job.run_at > due[job.id] and not job.attempts

    runner = app.runner(workers=4).start()
    wait_for(lambda: sum(running.values()) == 3, timeout=10, message="one per tenant running")
    # A free worker claimed each of the other two of tenant a and gave it back unrun.
    wait_for(lambda: sum(map(held_back, jobs[:3])) == 2, timeout=10, message="a's others held")
    assert running == {"a": 1, "b": 1, "c": 1}
    gate.set()
    wait_for(lambda: all(j.refresh().is_finished for j in jobs), timeout=20, message="all done")
    runner.stop()
    assert peak == {"a": 1, "b": 1, "c": 1}
    assert all(j.status is JobStatus.COMPLETED and j.attempts == 1 for j in jobs)


# Expiry ---------------------------------------------------------------------------------------------
def test_a_job_not_started_by_its_expiry_ends_expired_and_never_runs(
    flow: App, clock: FakeClock
) -> None:
    ran: list[int] = []
    task = flow.task(name="t")(ran.append)
    expired = events(flow, "job:expired")
    at = clock() + timedelta(seconds=30)
    late = task.configure(expires=at).schedule(1)
    soon = task.configure(expires=timedelta(seconds=60)).schedule(2)
    assert late.expires_at == at and soon.expires_at == clock() + timedelta(seconds=60)
    clock.advance(seconds=45)
    assert drain(flow) == 1 and ran == [2]
    job = late.refresh()
    assert job.status is JobStatus.EXPIRED and job.is_finished and job.attempts == 0
    assert job.error is not None and job.error.type == "JobExpired"
    assert at.isoformat() in job.error.message
    assert [e.job.id for e in expired if e.job] == [late.id]
    assert flow.count_jobs(status="expired") == 1
    assert flow.stats()["totals"]["expired"] == 1
    retried = flow.retry_job(late)  # run it anyway
    assert retried.status is JobStatus.PENDING and retried.expires_at is None
    drain(flow)
    assert ran == [2, 1]


def test_a_claimed_job_past_its_expiry_is_settled_expired_not_run(
    flow: App, clock: FakeClock
) -> None:
    ran: list[int] = []
    task = flow.task(name="t")(ran.append)
    job = task.configure(expires=timedelta(seconds=5)).schedule(1)
    clock.advance(seconds=10)
    runner = flow.runner(workers=1)
    assert runner.claim_next() is None  # found at claim, before the sweep
    assert ran == [] and job.refresh().status is JobStatus.EXPIRED
    assert job.attempts == 0


def test_the_reaper_sweeps_expired_waiting_jobs(flow: App, clock: FakeClock) -> None:
    task = flow.task(name="t")(lambda: None)
    gate = task.configure(delay=3600).schedule()
    waiting = task.configure(depends_on=gate, expires=timedelta(seconds=10)).schedule()
    assert waiting.status is JobStatus.WAITING
    clock.advance(seconds=11)
    assert flow.runner(workers=1).sweep() == 1
    assert waiting.refresh().status is JobStatus.EXPIRED


# Per-job timeout ------------------------------------------------------------------------------------
def test_a_jobs_own_timeout_overrides_its_tasks(make_app: Callable[..., App]) -> None:
    app = make_app(lease_duration=3.0)

    def work(seconds: float) -> str:
        for _ in range(int(seconds / 0.05)):  # short sleeps: the interrupt lands between
            time.sleep(0.05)
        return "done"

    slow = app.task(name="slow", timeout=30, retry=0)(work)

    untimed = app.task(name="untimed", retry=0)(work)

    short = slow.configure(timeout=0.3).schedule(5.0)
    normal = slow.schedule(0.5)
    own = untimed.configure(timeout=0.3).schedule(5.0)  # the task has none
    assert short.record.timeout == 0.3 and normal.record.timeout is None
    runner = app.runner(workers=3, heartbeat_interval=0.1).start()
    jobs = (short, normal, own)
    wait_for(lambda: all(j.refresh().is_finished for j in jobs), timeout=15)
    runner.stop()
    for job in (short, own):
        assert job.status is JobStatus.FAILED
        assert job.error is not None and job.error.type == "JobTimeout"
        assert "0.3" in job.error.message
        assert job.finished_at is not None and job.started_at is not None
        assert job.finished_at - job.started_at < timedelta(seconds=3)
    assert normal.status is JobStatus.COMPLETED and normal.result == "done"


# Dependencies ---------------------------------------------------------------------------------------
def test_a_job_waits_for_all_its_dependencies(flow: App, clock: FakeClock) -> None:
    order: list[str] = []
    step = flow.task(name="step")(order.append)
    a = step.configure(delay=10).schedule("a")
    b = step.schedule("b")
    joined = step.configure(depends_on=[a, b.id]).schedule("joined")
    then = step.configure(depends_on=str(joined.id)).schedule("then")
    assert joined.status is JobStatus.WAITING and joined.depends_on == [a.id, b.id]
    ready = events(flow, "job:ready")
    drain(flow)
    assert order == ["b"] and joined.refresh().status is JobStatus.WAITING
    clock.advance(seconds=10)
    drain(flow)
    assert order == ["b", "a", "joined", "then"]
    assert [e.job.id for e in ready if e.job] == [joined.id, then.id]
    assert then.refresh().status is JobStatus.COMPLETED


def test_a_failed_dependency_cancels_its_dependents_down_the_line(
    flow: App, clock: FakeClock
) -> None:
    ran: list[str] = []

    step = failing_steps(flow, ran)

    root = step.schedule("root", fail=True)
    child = step.configure(depends_on=root).schedule("child")
    grandchild = step.configure(depends_on=child).schedule("grandchild")
    anyway = step.configure(depends_on=root, on_dependency_failure="run").schedule("anyway")
    cancels = events(flow, "job:cancel")
    drain(flow)
    assert ran == ["root", "anyway"]
    c, g = child.refresh(), grandchild.refresh()
    assert c.status is g.status is JobStatus.CANCELLED
    assert c.error is not None and c.error.type == "DependencyFailed"
    assert f"dependency {root.id} ended failed" in c.error.message
    assert g.error is not None and f"dependency {child.id} ended cancelled" in g.error.message
    assert {e.job.id for e in cancels if e.job} == {child.id, grandchild.id}
    assert anyway.refresh().status is JobStatus.COMPLETED


def test_dependencies_final_at_schedule_time_resolve_at_once(flow: App) -> None:
    step = flow.task(name="step")(lambda: None)
    done = step.schedule()
    drain(flow)
    cancelled = step.configure(delay=60).schedule()
    flow.cancel(cancelled)
    ready = step.configure(depends_on=done).schedule()
    assert ready.status is JobStatus.PENDING
    doomed = step.configure(depends_on=[done, cancelled]).schedule()
    assert doomed.status is JobStatus.CANCELLED
    assert doomed.error is not None and "ended cancelled" in doomed.error.message


def test_cancelling_a_waiting_job_or_its_dependency(flow: App) -> None:
    step = flow.task(name="step")(lambda: None)
    first = step.configure(delay=60).schedule()
    second = step.configure(depends_on=first).schedule()
    third = step.configure(depends_on=second).schedule()
    assert flow.cancel(second) == "cancelled"
    assert second.refresh().status is JobStatus.CANCELLED
    assert third.refresh().status is JobStatus.CANCELLED  # its dependency was cancelled
    assert first.refresh().status is JobStatus.PENDING


def test_eager_mode_runs_a_dependent_once_its_dependencies_completed(
    make_app: Callable[..., App],
) -> None:
    app = make_app(eager=True)
    step = app.task(name="step")(lambda x: x * 2)
    a = step.schedule(1)
    b = step.configure(depends_on=a).schedule(2)
    assert a.status is b.status is JobStatus.COMPLETED and b.result == 4


def test_eager_mode_follows_the_apps_eager_attribute(make_app: Callable[..., App]) -> None:
    """``app.eager`` is read at each call, not when the app was made."""
    app = make_app()
    step = app.task(name="step")(lambda x: x * 2)
    assert step.schedule(1).status is JobStatus.PENDING
    app.eager = True
    done = step.schedule(2)
    assert done.status is JobStatus.COMPLETED and done.result == 4
    app.eager = False
    assert step.schedule(3).status is JobStatus.PENDING


def test_a_crash_between_a_settle_and_its_release_is_repaired(flow: App, clock: FakeClock) -> None:
    """The runner settled the dependency, then died before releasing its dependents:
    the reaper's sweep finishes the release."""
    step = flow.task(name="step")(lambda: None)
    first = step.schedule()
    second = step.configure(depends_on=first).schedule()
    runner = flow.runner(workers=1, lease_duration=5)
    claim = runner.claim_next()
    assert claim is not None
    from mongosched._core import outcome
    from mongosched._core.outcome import Ending

    decision = outcome.decide(claim.record, Ending.SUCCESS, now=clock(), retention=flow.retention)
    stored = flow.store.leases.settle(claim.record, decision.settlement)  # ... and no release
    claim.finish()
    assert stored is not None and stored.has_dependents
    assert second.refresh().status is JobStatus.WAITING
    assert runner.sweep() == 0  # not before a lease's time has passed
    clock.advance(seconds=6)
    assert runner.sweep() == 1
    assert second.refresh().status is JobStatus.PENDING
    assert not first.refresh().record.has_dependents


def test_a_schedule_that_failed_after_its_insert_is_linked_by_the_reaper(
    flow: App, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The dependency ends and is released while the dependent is being scheduled, and
    the link after the insert fails: the reaper links the job, so it never waits
    forever."""
    from mongosched.errors import StoreError

    step = flow.task(name="step")(lambda: None)
    first = step.schedule()
    store = flow.store
    real_link = store.dependents.link_dependencies
    calls = []

    def link(ids: Any, now: Any, dependent: Any = None) -> Any:
        calls.append(dependent)
        if dependent is None:  # the check before the insert: then the dependency ends
            found = real_link(ids, now, dependent)
            drain(flow)  # completes first and releases its (no) dependents
            return found
        raise StoreError("injected: connection lost")

    monkeypatch.setattr(store.dependents, "link_dependencies", link)
    with pytest.raises(StoreError):
        step.configure(depends_on=first).schedule()
    monkeypatch.undo()
    assert first.refresh().status is JobStatus.COMPLETED
    [waiting] = flow.get_jobs(status="waiting")
    runner = flow.runner(workers=1)
    assert runner.sweep() == 0  # not before a lease's time has passed
    clock.advance(seconds=6)
    assert runner.sweep() == 1
    assert waiting.refresh().status is JobStatus.PENDING


def settle_unreleased(app: App, clock: FakeClock, job: Any, fail: bool = False) -> None:
    """A runner claims ``job`` and writes its outcome (completed, or failed), then dies
    before releasing its dependents."""
    from mongosched._core import outcome
    from mongosched._core.outcome import Ending

    claim = app.runner(workers=1, lease_duration=5).claim_next()
    assert claim is not None and claim.job_id == job.id
    ending, error = (Ending.ERROR, ValueError("boom")) if fail else (Ending.SUCCESS, None)
    decision = outcome.decide(
        claim.record, ending, now=clock(), retention=app.retention, error=error
    )
    stored = app.store.leases.settle(claim.record, decision.settlement)  # ... and no release
    claim.finish()
    assert stored is not None and stored.status.is_final and stored.has_dependents


@pytest.mark.parametrize("how", ["purge", "purge_jobs", "delete_job"])
@pytest.mark.parametrize("fail", [False, True], ids=["completed", "failed"])
def test_deleting_a_job_first_releases_the_dependents_a_crash_left_waiting(
    flow: App, clock: FakeClock, how: str, fail: bool
) -> None:
    """The runner died between the job's final write and the release of its
    dependents, and an operator deletes the job before the reaper's repair: the delete
    releases them first, as the job's outcome says (run, or cancelled naming it)."""
    ran: list[str] = []
    step = failing_steps(flow, ran)
    parent = step.schedule("parent", fail)
    child = step.configure(depends_on=parent).schedule("child")
    settle_unreleased(flow, clock, parent, fail)
    assert child.refresh().status is JobStatus.WAITING
    status = "failed" if fail else "completed"
    if how == "purge":
        assert flow.purge(status=status) == 1
    elif how == "purge_jobs":
        assert flow.purge_jobs(status=status) == 1
    else:
        flow.delete_job(parent.id)
    assert flow.get_job(parent.id) is None
    released = child.refresh()
    if fail:
        assert released.status is JobStatus.CANCELLED and released.error is not None
        assert released.error.type == "DependencyFailed"
        assert f"its dependency {parent.id} ended failed" in released.error.message
    else:
        assert released.status is JobStatus.PENDING
    drain(flow)
    assert ran == ([] if fail else ["child"])


@pytest.mark.parametrize("on_failure", ["cancel", "run"])
def test_the_dependents_of_a_job_deleted_before_their_release_end_by_the_repair(
    database: Any, clock: FakeClock, on_failure: str
) -> None:
    """The runner died before releasing the job's dependents, and the server's TTL
    deleted the job (a retention shorter than the repair's wait): the reaper's repair
    walks the waiting jobs, a page per pass, and ends those waiting for a job that no
    longer exists as for any missing dependency."""
    from mongosched.runner.dependencies import BATCH

    app = App(database=database, clock=clock)
    ran: list[str] = []
    step = failing_steps(app, ran)
    blocker = step.configure(delay=3600).schedule("blocker")  # its dependents wait on
    app.schedule_bulk([step.configure(depends_on=blocker).job(f"w{n}") for n in range(BATCH + 50)])
    parent = step.schedule("parent")
    child = step.configure(depends_on=parent, on_dependency_failure=on_failure).schedule("c")
    settle_unreleased(app, clock, parent)
    app.store.connection.jobs.delete_one(
        {"_id": parent.id}
    )  # as the TTL monitor does, if it is short
    runner = app.runner(workers=1, lease_duration=5)
    runner.sweep()  # the first page: jobs waiting for the blocker, which exists
    assert child.refresh().status is JobStatus.WAITING
    runner.sweep()
    ended = child.refresh()
    if on_failure == "run":
        assert ended.status is JobStatus.PENDING
    else:
        assert ended.status is JobStatus.CANCELLED and ended.error is not None
        assert ended.error.type == "DependencyFailed"
        assert f"its dependency {parent.id} no longer exists" in ended.error.message
    assert app.count_jobs(status="waiting") == BATCH + 50
    assert ran == []


# chain and group ------------------------------------------------------------------------------
def test_chain_runs_steps_in_order_and_stops_at_a_failure(flow: App, clock: FakeClock) -> None:
    from mongosched import chain, group

    order: list[str] = []

    step = failing_steps(flow, order)

    first, middle, last = chain(
        step.job("fetch"), [step.job("a"), step.job("b")], step.job("publish")
    )
    assert [j.status for j in middle] == [JobStatus.WAITING] * 2
    assert last[0].depends_on == [j.id for j in middle]
    drain(flow)
    assert order[0] == "fetch" and sorted(order[1:3]) == ["a", "b"] and order[3] == "publish"
    broken = chain(step.job("x", fail=True), step.job("y"), step.job("z"))
    drain(flow)
    assert order[4:] == ["x"]
    assert [j[0].refresh().status for j in broken] == [
        JobStatus.FAILED, JobStatus.CANCELLED, JobStatus.CANCELLED,
    ]  # fmt: skip
    cleanup = chain(step.job("p", fail=True), step.job("q"), on_dependency_failure="run")
    drain(flow)
    assert cleanup[1][0].refresh().status is JobStatus.COMPLETED
    together = group(step.job("g1"), step.job("g2"))
    assert len(together) == 2 and all(j.status is JobStatus.PENDING for j in together)
    with pytest.raises(ConfigurationError, match="chain takes task.job"):
        chain(step)  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="give no depends_on"):
        chain(step.job("a"), step.configure(depends_on=first[0]).job("b"))
    assert first[0].refresh().status is JobStatus.COMPLETED
