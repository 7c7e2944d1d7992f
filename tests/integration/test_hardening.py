"""Hardening: one slow reply, one bad document or one hostile argument never runs a job
twice, stops the scheduler, or reaches a query."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from bson import ObjectId

from mongosched import App, Cancellation, Event, JobStatus, RetryPolicy, current_job
from mongosched._core.records import PendingChanges
from mongosched.errors import ConfigurationError, InvalidJobId, SerializationError
from mongosched.store import schedule_id
from mongosched.testing import FakeClock, drain
from tests.support.server_fixtures import SharedDatabase, mongo_server, shared_db, standin_db
from tests.support.tasks import Unreadable
from tests.support.waiting import wait_for

__all__ = ["mongo_server", "shared_db", "standin_db"]


def test_a_claim_whose_reply_arrives_after_its_lease_is_given_back_not_run(
    standin_db: SharedDatabase,
) -> None:
    """A claim reply held past the lease (after the claim applied: the stand-in's delay,
    which no fail point expresses): the reaper may already have handed the job to
    another runner, so this runner must not start it too."""
    server = standin_db.server
    app = App(standin_db.uri(), lease_duration=1.0)
    ran: list[int] = []
    app.task(name="t")(lambda: ran.append(1))
    job = app.schedule("t")
    runner = app.runner(workers=1)
    runner.prepare()
    server.delay = 1.5  # every reply held 1.5 s: the 1 s lease is over when it arrives
    try:
        late = runner.claim_next()
    finally:
        server.delay = 0.0
    assert late is None and ran == []
    job.refresh()
    assert job.status is JobStatus.PENDING and job.attempts == 0  # given back, uncounted
    claim = runner.claim_next()
    assert claim is not None
    runner.run_claim(claim)
    assert ran == [1] and job.refresh().status is JobStatus.COMPLETED


@pytest.mark.parametrize(
    "hostile",
    [{"$ne": "x"}, {"$gt": ""}, ["a"], 42, None, "", "not-an-id", b"0123456789ab"],
    ids=repr,
)
def test_job_ids_that_cannot_be_ids_never_reach_a_query(
    make_app: Callable[..., App], hostile: object
) -> None:
    app = make_app()
    app.task(name="t")(lambda: None)
    other = app.schedule("t")
    for call in (app.cancel, app.get_job, app.retry_job, app.update_job):
        with pytest.raises(InvalidJobId, match="is not a job id"):
            call(hostile)  # type: ignore[operator]
    assert other.refresh().status is JobStatus.PENDING  # the other job was not touched


def test_a_cancel_during_a_short_run_is_not_lost(make_app: Callable[..., App]) -> None:
    """The run ends before any heartbeat could see the request: the outcome write sees
    it, so the job ends cancelled (keeping what it returned), and a repeating job stops."""
    app = make_app(lease_duration=30)
    inside, release = threading.Event(), threading.Event()
    cancels: list[Event] = []
    app.on("job:cancel", cancels.append)

    def work() -> str:
        inside.set()
        assert release.wait(10)
        return "done"

    app.task(name="once")(work)
    app.task(name="every", every=60)(work)
    for name in ("once", "every"):
        inside.clear()
        release.clear()
        job = app.schedule(name) if name == "once" else app.get_job(schedule_id("every"))
        runner = app.runner(workers=1)
        if name == "every":
            runner.prepare()
            app.store.jobs.update_pending(job.record, PendingChanges(run_at=app.now()), app.now())
        runner.start()
        assert inside.wait(10)
        assert app.cancel(job.id) is Cancellation.REQUESTED
        release.set()
        wait_for(lambda j=job: j.refresh().is_finished, message=f"{name} finished")
        runner.stop()
        assert job.status is JobStatus.CANCELLED, (name, job.status)
        assert job.result == "done"
        assert cancels[-1].job is not None and cancels[-1].job.id == job.id
    assert app.count_jobs(task="every", status="pending") == 0  # the schedule stopped


def test_a_cancelled_declared_schedule_stays_cancelled_across_purge_and_restarts(
    make_app: Callable[..., App], clock: FakeClock
) -> None:
    app = make_app(clock=clock, keep_failed=timedelta(seconds=1))
    app.task(name="tick", every=60)(lambda: None)
    app.runner(workers=1).prepare()
    tick = schedule_id("tick")
    assert app.cancel(tick) is Cancellation.CANCELLED
    job = app.get_job(tick)
    assert job is not None and job.delete_at is None  # no retention deletes it
    clock.advance(days=400)
    assert app.purge(status=["cancelled"]) == 0
    app.runner(workers=1).prepare()  # a runner starts again, a new deploy
    job = app.get_job(tick)
    assert job is not None and job.status is JobStatus.CANCELLED
    assert app.retry_job(tick).status is JobStatus.PENDING  # resumed only when asked


# Poison documents (written by hand or by an older version): the MongoDB store only,
# since the in-memory store cannot hold a malformed job.


def _raw_job(app: App, **fields: object) -> object:
    """Insert a job document as another program might have written it."""
    now = app.now()
    doc: dict[str, object] = {
        "_id": ObjectId(),
        "task": "t",
        "args": [],
        "kwargs": {},
        "queue": "default",
        "priority": 5,
        "status": "pending",
        "run_at": now,
        "attempts": 0,
        "max_attempts": 3,
        "lease": None,
        "created_at": now,
        "updated_at": now,
    }
    doc.update(fields)
    app.store.connection.jobs.insert_one(doc)  # type: ignore[attr-defined]
    return doc["_id"]


def test_one_poison_document_never_stops_the_reaper(database: Any, clock: FakeClock) -> None:
    app = App(database=database, clock=clock, lease_duration=5)
    app.task(name="t", retry=2)(lambda: "ok")
    app.ensure_indexes()
    past = clock() - timedelta(seconds=60)
    gone = {"owner": "dead", "until": past, "heartbeat_at": past}
    poisons = [
        _raw_job(app, status="running", attempts=1, lease=gone),  # a lease without a token
        _raw_job(
            app,
            status="running",
            attempts=3,
            lease={**gone, "token": "a"},
            repeat={"cron": "0 * * * *", "timezone": "Mars/Olympus_Mons"},
            scheduled_for=past,
        ),
        _raw_job(
            app,
            status="running",
            attempts=3,
            lease={**gone, "token": "b"},
            repeat={"every": 1e15},
            scheduled_for=past,
        ),
    ]
    good = app.schedule("t")
    claimed = app.store.claims.claim(
        owner="dead", tasks=["t"], queues=None, now=past, lease_duration=5, job_id=good.id
    )
    assert claimed is not None and claimed.id == good.id
    runner = app.runner(workers=1)
    assert runner.reap() == 3  # the good job and the two rules that no longer compute
    assert good.refresh().status is JobStatus.PENDING  # back for another attempt
    for poison, field in zip(poisons, ["lease.token", "Mars", "every"], strict=True):
        job = app.get_job(poison)
        assert job is not None and job.status is JobStatus.FAILED, field
        assert (
            job.error is not None and job.error.type == "MalformedJob" and field in str(job.error)
        )
    assert runner.reap() == 0  # nothing left to trip over: once is enough
    assert drain(app) == 1 and good.refresh().status is JobStatus.COMPLETED


def test_malformed_pending_documents_never_stop_the_claims(database: Any) -> None:
    app = App(database=database, lease_duration=5, poll_interval=0.05)
    app.task(name="t")(lambda n: n)
    app.ensure_indexes()
    bad_attempts = _raw_job(app, attempts="1")  # $inc on a string would fail every claim
    bad_args = _raw_job(app, args="not a list")
    good = [app.schedule("t", n) for n in range(5)]
    runner = app.runner(workers=2).start()
    try:
        wait_for(lambda: all(j.refresh().status is JobStatus.COMPLETED for j in good))
        wait_for(lambda: app.count_jobs(status="failed") == 2, message="both quarantined")
    finally:
        runner.stop()
    for poison, field in [(bad_attempts, "attempts"), (bad_args, "args")]:
        job = app.get_job(poison)
        assert job is not None and job.error is not None, field
        assert job.error.type == "MalformedJob" and repr(field) in job.error.message


# Dedupe keys follow the job's scope on every way back to pending -----------------------


def _second_is_refused(app: App, first: Any) -> None:
    again = app.get_task("d").configure(dedupe_key="k", dedupe_scope="pending").schedule(2)
    assert again.id == first.id, "a second job took a key its holder should have held"


def test_a_pending_scope_key_is_held_again_after_a_retry(make_app: Callable[..., App]) -> None:
    app = make_app()
    attempts: list[int] = []

    @app.task(name="d", retry=RetryPolicy(retries=2, delay=60))
    def flaky(n: int) -> None:
        attempts.append(n)
        raise RuntimeError("again later")

    first = app.get_task("d").configure(dedupe_key="k", dedupe_scope="pending").schedule(1)
    drain(app)
    assert attempts == [1] and first.refresh().status is JobStatus.PENDING
    _second_is_refused(app, first)


def test_a_pending_scope_key_is_held_again_after_a_reap(
    make_app: Callable[..., App], clock: FakeClock
) -> None:
    app = make_app(clock=clock)
    app.task(name="d", retry=2)(lambda n: n)
    first = app.get_task("d").configure(dedupe_key="k", dedupe_scope="pending").schedule(1)
    assert app.runner(workers=1).claim_next() is not None  # its holder dies
    clock.advance(seconds=60)
    assert app.runner(workers=1).reap() == 1
    _second_is_refused(app, first)


def test_a_pending_scope_key_is_held_again_when_a_stop_gives_the_job_back(
    make_app: Callable[..., App],
) -> None:
    app = make_app()
    inside = threading.Event()

    @app.task(name="d", retry=2)
    def slow(n: int) -> None:
        inside.set()
        while True:  # interrupted by the non-graceful stop
            time.sleep(0.01)

    first = app.get_task("d").configure(dedupe_key="k", dedupe_scope="pending").schedule(1)
    runner = app.runner(workers=1).start()
    assert inside.wait(10)
    assert runner.stop(graceful=False, timeout=10)
    assert first.refresh().status is JobStatus.PENDING and first.attempts == 0
    _second_is_refused(app, first)


def test_a_pending_scope_key_is_held_again_by_retry_job(make_app: Callable[..., App]) -> None:
    app = make_app()
    app.task(name="d", retry=0)(lambda n: 1 / 0)
    first = app.get_task("d").configure(dedupe_key="k", dedupe_scope="pending").schedule(1)
    drain(app)
    assert first.refresh().status is JobStatus.FAILED
    app.retry_job(first.id)
    _second_is_refused(app, first)


# Bad values get a clear error, never a raw one ------------------------------------------

NONSENSE = [-1, 0, float("nan"), float("inf"), -float("inf"), "5", True, 1e300, [1]]


@pytest.mark.parametrize("value", NONSENSE, ids=repr)
def test_nonsense_durations_are_refused_naming_the_option(value: object) -> None:
    refused = 0
    for option in ("lease_duration", "poll_interval"):
        with pytest.raises(ConfigurationError, match=f"App: {option}"):
            App("memory://", **{option: value})  # type: ignore[arg-type]
        refused += 1
    app = App("memory://")
    for option in ("lease_duration", "poll_interval", "heartbeat_interval", "reap_interval"):
        with pytest.raises(ConfigurationError, match=f"Runner: {option}"):
            app.runner(**{option: value})
        refused += 1
    assert refused == 6


def test_a_heartbeat_slower_than_a_third_of_the_lease_is_refused() -> None:
    app = App("memory://", lease_duration=3)
    with pytest.raises(ConfigurationError, match="heartbeat_interval .* at most a third"):
        app.runner(heartbeat_interval=1.5)
    with pytest.raises(ConfigurationError, match="Runner: workers"):
        app.runner(workers=0)


@pytest.mark.parametrize(
    ("options", "field"),
    [
        ({"delay": float("nan")}, "delay"),
        ({"delay": float("inf")}, "delay"),
        ({"delay": 1e300}, "delay"),
        ({"priority": 1e300}, "priority"),
        ({"priority": float("nan")}, "priority"),
    ],
)
def test_scheduling_options_that_make_no_sense_are_refused(
    options: dict[str, object], field: str
) -> None:
    app = App("memory://")
    app.task(name="t")(lambda x: x)
    with pytest.raises(ConfigurationError, match=f"task 't': {field}"):
        app.get_task("t").configure(**options).schedule(1)  # type: ignore[arg-type]
    assert app.count_jobs() == 0


@pytest.mark.parametrize(
    "value",
    ["lone \ud800 surrogate", object(), {1: "int key"}, 2**70],
    ids=["surrogate", "object", "int-key", "huge-int"],
)
def test_payloads_that_cannot_be_stored_raise_serialization_errors(value: object) -> None:
    app = App("memory://")
    app.task(name="t")(lambda x: x)
    with pytest.raises(SerializationError, match="task 't'"):
        app.schedule("t", value)
    assert app.count_jobs() == 0


def nested(depth: int) -> list[Any]:
    """A list nested ``depth`` deep (deeper than Python's recursion limit)."""
    value: list[Any] = []
    for _ in range(depth):
        value = [value]
    return value


HOSTILE = [nested(5000), {"rows": nested(5000)}, Unreadable(), [1, {"m": Unreadable()}]]
HOSTILE_IDS = ["deep", "deep-in-dict", "unreadable-mapping", "unreadable-inside"]


@pytest.mark.parametrize("value", HOSTILE, ids=HOSTILE_IDS)
def test_an_argument_whose_encoding_fails_any_way_is_a_serialization_error(value: object) -> None:
    """Whatever encoding a value raises (a RecursionError, a mapping's own error) is a
    SerializationError naming the task and the argument, and nothing is stored."""
    app = App("memory://")
    t = app.task(name="t")(lambda x=None, y=None: None)
    with pytest.raises(SerializationError, match="task 't': argument 1 "):
        t.schedule(1, value)
    with pytest.raises(SerializationError, match="task 't': keyword argument 'y' "):
        t.schedule(y=value)
    assert app.count_jobs() == 0


@pytest.mark.parametrize("value", HOSTILE, ids=HOSTILE_IDS)
def test_a_result_whose_encoding_fails_any_way_fails_its_job_once(
    make_app: Callable[..., App], value: object
) -> None:
    app = make_app()
    runs: list[int] = []

    @app.task(name="bad", retry=2)
    def bad() -> object:
        runs.append(1)
        return value

    ok = app.task(name="ok")(lambda: "fine")
    job, fine = bad.schedule(), ok.schedule()
    drain(app)
    assert runs == [1] and job.refresh().status is JobStatus.FAILED
    assert job.error is not None and job.error.type == "SerializationError"
    assert "task 'bad': return value" in job.error.message
    assert fine.refresh().status is JobStatus.COMPLETED


SURROGATE = "lone \ud800 surrogate"  # a str that UTF-8, hence BSON, cannot hold


def test_option_values_that_cannot_be_stored_are_refused_naming_the_option(
    make_app: Callable[..., App],
) -> None:
    """A name or key holding a lone surrogate is refused where it is given, naming the
    option, whatever the option (one check, in mongosched._core.validate)."""
    app = make_app()
    t = app.task(name="t")(lambda x=None: None)
    keyed = app.task(
        name="k", rate_limit="5/s", rate_key="customer", concurrency=2, concurrency_key="tenant"
    )(lambda customer="a", tenant="b": None)
    job = t.schedule()
    cases: list[tuple[Callable[[], object], str]] = [
        (lambda: t.configure(dedupe_key=SURROGATE).schedule(), "task 't': dedupe_key"),
        (lambda: t.configure(queue=SURROGATE).schedule(), "task 't': queue"),
        (lambda: app.task(name=SURROGATE)(lambda: None), "task name"),
        (lambda: app.task(name="q", queue=SURROGATE)(lambda: None), "task 'q': queue"),
        (lambda: keyed.schedule(customer=SURROGATE, tenant="t"), "task 'k': rate_key"),
        (lambda: keyed.schedule(customer="c", tenant=SURROGATE), "task 'k': concurrency_key"),
        (lambda: app.update_job(job.id, queue=SURROGATE), "task 't': queue"),
        (lambda: app.pause(queue=SURROGATE), "queue"),
        (lambda: app.pause(task=SURROGATE), "pause: task"),
        (lambda: app.resume(schedule=SURROGATE), "schedule"),
        (lambda: app.get_jobs(task=SURROGATE), "task"),
        (lambda: app.count_jobs(queue=SURROGATE), "queue"),
        (lambda: app.cancel_jobs(error_type=SURROGATE), "error_type"),
        (lambda: app.runner(queues=[SURROGATE]), "queue"),
        (lambda: app.runner(name=SURROGATE), "Runner: name"),
        (lambda: make_app(collection=SURROGATE), "App: collection"),
    ]
    for call, option in cases:
        with pytest.raises(ConfigurationError) as raised:
            call()
        assert option in str(raised.value) and "cannot be stored" in str(raised.value)
    for value in (SURROGATE, f"schedule:{SURROGATE}"):
        with pytest.raises(InvalidJobId):
            app.get_job(value)
    assert [j.id for j in app.get_jobs()] == [job.id]
    assert app.pauses() == []


def test_text_a_task_reports_that_cannot_be_stored(make_app: Callable[..., App]) -> None:
    """A progress message that cannot be stored is refused in the task, naming it; an
    exception's message that cannot be stored is recorded with the character escaped
    (the job fails once, with its error)."""
    app = make_app()
    refused: list[BaseException] = []

    @app.task(name="progress", retry=0)
    def progress() -> None:
        ctx = current_job()
        assert ctx is not None
        try:
            ctx.set_progress(0.5, SURROGATE)
        except ConfigurationError as exc:
            refused.append(exc)

    @app.task(name="boom", retry=2)
    def boom() -> None:
        raise ValueError(SURROGATE)

    reporting, failing = progress.schedule(), boom.schedule()
    drain(app)
    assert reporting.refresh().status is JobStatus.COMPLETED
    assert len(refused) == 1 and "task 'progress': progress message" in str(refused[0])
    assert failing.refresh().status is JobStatus.FAILED and failing.attempts == 3
    assert failing.error is not None and failing.error.message == "lone \\ud800 surrogate"


def test_a_huge_result_fails_the_job_once_without_retrying(make_app: Callable[..., App]) -> None:
    app = make_app()
    runs: list[int] = []

    @app.task(name="big", retry=2)
    def big() -> str:
        runs.append(1)
        return "x" * (2 * 1024 * 1024)

    @app.task(name="loud", retry=0)
    def loud() -> None:
        raise ValueError("y" * (20 * 1024 * 1024))  # a 20 MB message

    job, noisy = app.schedule("big"), app.schedule("loud")
    drain(app)
    assert runs == [1] and job.refresh().status is JobStatus.FAILED
    assert job.error is not None and job.error.type == "ResultTooLarge"
    assert noisy.refresh().status is JobStatus.FAILED and noisy.error is not None
    assert len(noisy.error.message) < 10_000 and "characters cut" in noisy.error.message


def test_a_listener_raising_any_base_exception_breaks_nothing(
    make_app: Callable[..., App], caplog: pytest.LogCaptureFixture
) -> None:
    app = make_app()
    app.task(name="t")(lambda: "ok")

    def hostile(event: Event) -> None:
        raise SystemExit(f"listener of {event.name} exits")

    for name in ("job:created", "job:start", "job:success"):
        app.on(name, hostile)
    jobs = [app.schedule("t") for _ in range(6)]  # schedule() does not raise
    runner = app.runner(workers=2).start()
    try:
        wait_for(lambda: all(j.refresh().status is JobStatus.COMPLETED for j in jobs))
    finally:
        runner.stop()
    assert any("job:success" in r.getMessage() for r in caplog.records)


@pytest.mark.processes
def test_stop_returns_in_time_with_the_database_down(shared_db: SharedDatabase) -> None:
    """A runner that has registered itself, then loses its database: ``stop(timeout=1)``
    returns in about a second (it once waited for the worker entry's removal too: ~6 s)."""
    server = shared_db.server
    if server is None:
        pytest.skip("needs the SecantusDB server to take the database away")
    app = App(shared_db.uri(), lease_duration=3, poll_interval=0.05)
    app.task(name="t")(lambda: None)
    runner = app.runner(workers=1).start()
    assert runner.wait_ready(10)
    wait_for(lambda: len(app.live_runners()) == 1, message="the runner registered")
    server.kill()
    try:
        started = time.monotonic()
        runner.stop(timeout=1)
        assert time.monotonic() - started < 1.5
    finally:
        server.start()
    # Once the database is back, the dispatcher (whose stop was left to it) removes it.
    wait_for(lambda: app.live_runners() == [], timeout=15, message="the worker entry removed")


@pytest.mark.processes
def test_stop_leaves_what_it_cannot_write_by_its_deadline_and_says_so(
    shared_db: SharedDatabase, caplog: pytest.LogCaptureFixture
) -> None:
    """Jobs that finished while the database is gone: their outcomes (handed off to the
    next batched claim, or their workers' own) cannot be written. ``stop(timeout=1)``
    still returns within about a second, leaves them to their leases' expiry, and says
    so in one warning naming how many."""
    server = shared_db.server
    if server is None:
        pytest.skip("needs the SecantusDB server to take the database away")
    app = App(shared_db.uri(), lease_duration=30, poll_interval=0.05)
    gate = threading.Event()
    app.task(name="t")(lambda n: gate.wait(30) and n)
    app.schedule_bulk(app.tasks["t"].job(n) for n in range(40))
    runner = app.runner(workers=4).start()
    wait_for(lambda: runner.in_flight == 4, message="4 jobs running")
    beats = _heartbeat_threads(runner)
    server.kill()
    try:
        gate.set()  # they finish: no outcome can be written now
        wait_for(
            lambda: all(claim.finished for claim in runner.flight.held()),
            message="the 4 runs over",
        )
        started = time.monotonic()
        with caplog.at_level(logging.WARNING, logger="mongosched"):
            assert not runner.stop(timeout=1)
        assert time.monotonic() - started < 1.5
    finally:
        server.start()
    warnings = [r.getMessage() for r in caplog.records if "stopped claiming" in r.getMessage()]
    assert len(warnings) == 1 and "4 outcome(s) not written" in warnings[0], warnings
    # The writes given up, the claims leave; the heartbeat threads end with them.
    wait_for(lambda: runner.in_flight == 0, timeout=15, message="the claims given up")
    wait_for(lambda: not any(t.is_alive() for t in beats), message="heartbeat threads ended")


def _heartbeat_threads(runner: Any) -> list[threading.Thread]:
    assert runner.flight.heartbeats is not None
    return list(runner.flight.heartbeats._threads)


def test_a_stop_that_timed_out_leaves_no_heartbeat_thread_behind(app: App) -> None:
    """A graceful stop whose wait times out: the jobs in flight go on, heartbeating;
    once they finish, the runner's heartbeat threads end (they stayed, idle, forever)."""
    started, gate = threading.Event(), threading.Event()
    app.task(name="t")(lambda: (started.set(), gate.wait(10)))
    app.schedule("t")
    runner = app.runner(workers=2).start()
    beats = _heartbeat_threads(runner)
    assert started.wait(10)
    assert not runner.stop(timeout=0.1)
    gate.set()
    wait_for(lambda: runner.in_flight == 0, message="the job finished")
    wait_for(lambda: not any(t.is_alive() for t in beats), message="heartbeat threads ended")
