"""Bad input fails at the call, naming the task and the field; good input is stored."""

from __future__ import annotations

import dataclasses
import inspect
import logging
import sys
import types
from collections.abc import Callable
from datetime import datetime, timedelta, timezone

import pytest

from mongosched import App, ArgumentError, JobStatus, MongoschedError, chain, group
from mongosched.errors import ConfigurationError, SerializationError, TaskNotRegistered
from mongosched.task import (
    SCHEDULE_OPTIONS,
    BoundOptions,
    JobSpec,
    ScheduleOptions,
    Task,
    TaskOptions,
)


def test_bare_decorator_names_the_task_after_module_and_function(app: App) -> None:
    @app.task
    def ping() -> str:
        return "pong"

    assert (
        ping.name
        == f"{__name__}.test_bare_decorator_names_the_task_after_module_and_function.<locals>.ping"
    )
    assert app.get_task(ping.name) is ping
    assert ping() == "pong"  # a plain call runs inline
    assert app.count_jobs() == 0  # and makes no job


def test_schedule_stores_a_pending_job_with_defaults_and_overrides(app: App) -> None:
    @app.task(name="emails.send", queue="emails", priority=3)
    def send(user_id: int, template: str = "welcome") -> None: ...

    before = app.now()
    job = send.schedule(123, template="reset")
    assert (job.task, job.args, job.kwargs) == ("emails.send", [123], {"template": "reset"})
    assert (job.queue, job.priority, job.status, job.attempts) == (
        "emails",
        3,
        JobStatus.PENDING,
        0,
    )
    assert before <= job.run_at <= app.now()
    later = send.configure(delay=60, priority=1).schedule(1)
    assert later.priority == 1
    between = send.configure(priority=2.5).schedule(2)  # a fraction sorts between
    assert app.get_job(between.id).priority == 2.5  # type: ignore[union-attr]
    assert timedelta(seconds=59) < later.run_at - job.run_at < timedelta(seconds=61)
    when = datetime(2030, 5, 1, 12, tzinfo=timezone(timedelta(hours=2)))
    assert send.configure(run_at=when).schedule(1).run_at == when
    bulk = send.configure(queue="bulk", delay=timedelta(seconds=5)).schedule(7, template="x")
    assert bulk.queue == "bulk" and bulk.kwargs == {"template": "x"}
    stored = app.get_job(job.id)
    assert stored is not None and stored.kwargs == {"template": "reset"}
    assert app.get_job(str(job.id)) == stored  # hex string ids work too


def test_after_and_at_set_when_a_job_runs(app: App) -> None:
    """``task.after(delay)`` and ``task.at(when)``: the short form of ``configure``'s
    ``delay`` and ``run_at``; the later one wins, and bad values fail at schedule."""

    @app.task(name="emails.later")
    def send(user_id: int) -> None: ...

    start = app.now()
    soon = send.after(30).schedule(1)
    assert timedelta(seconds=29) < soon.run_at - start < timedelta(seconds=31)
    assert soon.args == [1]
    hour = send.after(timedelta(hours=1)).schedule(2)
    assert timedelta(minutes=59) < hour.run_at - start < timedelta(minutes=61)
    when = datetime(2030, 5, 1, 12, tzinfo=timezone.utc)
    assert send.at(when).schedule(3).run_at == when
    assert send.configure(priority=2).after(5).at(when).schedule(4).run_at == when
    moved = send.at(when).after(10).schedule(5)
    assert moved.priority == 5 and moved.run_at < when
    with pytest.raises(ConfigurationError, match="emails.later.*delay"):
        send.after(-1).schedule(6)
    with pytest.raises(ConfigurationError, match="emails.later"):
        send.at(datetime(2030, 5, 1)).schedule(7)  # naive


def test_unknown_task_name_is_refused(app: App) -> None:
    @app.task(name="known")
    def known() -> None: ...

    with pytest.raises(TaskNotRegistered, match="'nope'.*registered: known"):
        app.schedule("nope")
    assert app.schedule("known").task == "known"


@pytest.mark.parametrize(
    "options, message",
    [
        ({"priority": 0}, "task 'emails.send': priority must be a number from 1"),
        ({"priority": 11}, "priority"),
        ({"priority": 10.5}, "priority"),
        ({"priority": float("nan")}, "priority"),
        ({"priority": True}, "priority"),
        ({"priority": "1"}, "priority"),
        ({"delay": -1}, "task 'emails.send': delay must be >= 0"),
        ({"delay": "soon"}, "delay must be a number of seconds"),
        ({"run_at": datetime(2030, 1, 1)}, "run_at must be timezone-aware"),
        ({"run_at": "2030-01-01"}, "run_at must be a datetime"),
        (
            {"run_at": datetime(2030, 1, 1, tzinfo=timezone.utc), "delay": 5},
            "either delay or run_at",
        ),
        ({"queue": ""}, "queue must be a non-empty str"),
        ({"dedupe_key": 5}, "dedupe_key"),
        ({"dedupe_key": "k", "dedupe_scope": "forever"}, "dedupe_scope"),
        ({"dedupe_key": "k", "dedupe_window": -5}, "dedupe_window must be > 0"),
        ({"dedupe_window": 60}, "dedupe_window needs a dedupe_key"),
        ({"dedupe_key": "k", "dedupe": "merge"}, "dedupe must be 'keep' or 'replace'"),
        ({"dedupe": "replace"}, "dedupe='replace' needs a dedupe_key"),
        ({"dedupe_key": "k", "dedupe": "replace", "dedupe_scope": "active"}, "'pending' scope"),
    ],
)
def test_bad_options_are_refused_naming_task_and_field(
    app: App, options: dict, message: str
) -> None:
    @app.task(name="emails.send")
    def send(user_id: int) -> None: ...

    with pytest.raises(ConfigurationError, match=message):
        send.configure(**options).schedule(1)
    assert app.count_jobs() == 0  # nothing half-written


@pytest.mark.parametrize(
    "args, kwargs, message",
    [
        ((object(),), {}, "argument 0 is not BSON-encodable"),
        ((1, {1, 2}), {}, "argument 1 is not BSON-encodable"),
        ((), {"amount": 1.5j}, "keyword argument 'amount'"),
        ((2**70,), {}, "argument 0"),
    ],
)
def test_payload_that_is_not_bson_is_refused(
    app: App, args: tuple, kwargs: dict, message: str
) -> None:
    @app.task(name="pay")
    def pay(*args: object, **kwargs: object) -> None: ...

    with pytest.raises(SerializationError, match=f"task 'pay': {message}"):
        pay.schedule(*args, **kwargs)
    assert app.count_jobs() == 0


def test_parameters_named_like_options_are_payload(app: App) -> None:
    @app.task(name="mail")
    def mail(to: str, delay: int, queue: str = "q", *, priority: int = 0) -> str:
        return f"{to} {delay} {queue} {priority}"

    job = mail.schedule("ann", 5, queue="vip", priority=9)
    assert (job.args, job.kwargs) == (["ann", 5], {"queue": "vip", "priority": 9})
    assert (job.queue, job.priority) == ("default", 5)  # the task's, not the payload's
    assert app.get_task("mail").configure(queue="other").schedule("bo", delay=1).queue == "other"
    bulk = app.schedule_bulk([mail.job("cy", 2, queue="x"), mail.configure(delay=60).job("di", 1)])
    assert bulk[0].kwargs == {"queue": "x"} and bulk[0].queue == "default"
    assert bulk[1].run_at > bulk[0].run_at
    by_name = app.schedule("mail", "ed", delay=0, queue="k")
    assert by_name.kwargs == {"delay": 0, "queue": "k"} and by_name.queue == "default"


def test_arguments_the_function_cannot_take_are_refused_at_schedule(app: App) -> None:
    """Arguments are bound to the function's parameters where the job is made, by
    every way of making one: a job that could only fail at run time is never stored."""

    @app.task(name="t")
    def t(x: int | None = None) -> None: ...

    @app.task(name="kw")
    def kw(a: int, /, b: int = 0, *, c: int) -> None: ...

    cases: list[tuple[Callable[[], object], str]] = [
        (lambda: t.schedule(1, 2), "task 't': too many positional arguments"),
        (lambda: t.schedule(y=1), "task 't': got an unexpected keyword argument 'y'"),
        (lambda: t.schedule(1, x=2), "task 't': multiple values for argument 'x'"),
        (lambda: kw.schedule(1), "task 'kw': missing a required argument: 'c'"),
        (lambda: kw.schedule(a=1, c=2), "task 'kw': 'a' parameter is positional only"),
        (lambda: app.schedule("t", 1, 2), "task 't': too many positional arguments"),
        (lambda: t.configure(delay=5).schedule(z=1), "task 't': got an unexpected keyword"),
        (lambda: t.job(1, 2), "task 't': too many positional arguments"),
        (lambda: t.configure(priority=1).job(y=1), "task 't': got an unexpected keyword"),
        (lambda: JobSpec(t, (1, 2)), "task 't': too many positional arguments"),
    ]
    for call, message in cases:
        with pytest.raises(ArgumentError) as raised:
            call()
        assert isinstance(raised.value, TypeError) and isinstance(raised.value, MongoschedError)
        assert str(raised.value).startswith(message), str(raised.value)
    assert "(x: 'int | None' = None)" in str(raised.value)  # what the function takes
    assert app.count_jobs() == 0
    assert t.schedule(1).args == [1] and t.schedule(x=2).kwargs == {"x": 2}
    assert kw.schedule(1, c=3).kwargs == {"c": 3}


def test_a_declared_schedule_needs_a_function_that_takes_no_arguments(app: App) -> None:
    """Its jobs pass none: a function that requires one is refused at decoration."""
    with pytest.raises(ArgumentError, match="task 'c': missing a required argument: 'x'"):
        app.task(name="c", every=60)(lambda x: None)
    assert app.task(name="d", cron="0 * * * *")(lambda x=1, *a, **k: None).rule is not None


def test_a_workflow_with_a_bad_step_schedules_nothing(app: App) -> None:
    @app.task(name="t")
    def t(x: int) -> None: ...

    with pytest.raises(ArgumentError, match="task 't': too many positional"):
        chain(t.job(1), [t.job(2), t.job(3, 4)])
    with pytest.raises(ArgumentError, match="task 't': missing a required argument"):
        group(t.job(1), t.job())
    with pytest.raises(ArgumentError, match="task 't': missing a required argument"):
        app.schedule_bulk([t.job(1), t.job()])
    assert app.count_jobs() == 0


def test_functions_that_take_anything_or_hide_their_signature_take_any_arguments(
    app: App,
) -> None:
    anything = app.task(name="anything")(lambda *args, **kwargs: None)
    opaque = app.task(name="opaque")([].append)  # a builtin: its signature is (object, /)
    assert anything.schedule(1, 2, y=3).kwargs == {"y": 3}
    with pytest.raises(ArgumentError, match="task 'opaque': too many positional"):
        opaque.schedule(1, 2)
    assert opaque.schedule(1).args == [1]


def test_update_job_binds_new_arguments_when_the_task_is_known(
    make_app: Callable[..., App],
) -> None:
    app = make_app()

    @app.task(name="t")
    def t(x: int, y: int = 0) -> None: ...

    job = t.schedule(1)
    with pytest.raises(ArgumentError, match="task 't': too many positional arguments"):
        app.update_job(job.id, args=[1, 2, 3])
    with pytest.raises(ArgumentError, match="task 't': got an unexpected keyword argument 'z'"):
        app.update_job(job.id, kwargs={"z": 1})
    assert app.update_job(job.id, args=[5], kwargs={"y": 6}).kwargs == {"y": 6}
    # A process that does not know the task (no function) cannot check: it passes.
    other = make_app()
    assert other.update_job(job.id, args=[1, 2, 3]).args == [1, 2, 3]


def test_unknown_scheduling_options_are_refused_naming_them(app: App) -> None:
    @app.task(name="t")
    def t() -> None: ...

    with pytest.raises(ConfigurationError, match="unknown scheduling option.*delai.*known: "):
        t.configure(delai=5)  # type: ignore[call-arg]
    with pytest.raises(ConfigurationError, match="prio"):
        t.configure(delay=5).configure(prio=1)  # type: ignore[call-arg]
    assert app.count_jobs() == 0


def test_unknown_task_options_are_refused_naming_them_and_the_known_ones(app: App) -> None:
    with pytest.raises(ConfigurationError, match="unknown task option.*retires.*known: .*retry"):
        app.task(name="t", retires=3)  # type: ignore[call-overload]
    with pytest.raises(
        ConfigurationError, match="every, fair_key, fair_weights, jitter, max_catchup, misfire"
    ):
        app.task(evrey=60)  # type: ignore[call-overload]
    assert app.tasks == {}


def test_option_names_agree_with_what_takes_them() -> None:
    parameters = inspect.signature(Task.__init__).parameters
    keywords = {n for n, p in parameters.items() if p.kind is p.KEYWORD_ONLY}
    assert set(TaskOptions.__optional_keys__) == keywords
    assert set(ScheduleOptions.__optional_keys__) == SCHEDULE_OPTIONS
    assert {f.name for f in dataclasses.fields(BoundOptions)} == SCHEDULE_OPTIONS


@pytest.mark.parametrize(
    "options, message",
    [
        ({"priority": 0}, "task 'x': priority"),
        ({"queue": 3}, "task 'x': queue"),
        ({"retry": "many"}, "task 'x': retry"),
        ({"timeout": 0}, "task 'x': timeout must be > 0"),
        ({"concurrency": 0}, "task 'x': concurrency"),
        ({"cron": "* * * * *", "every": 5}, "task 'x': give either cron or every"),
        ({"timezone": "UTC"}, "task 'x': timezone applies only with cron"),
    ],
)
def test_bad_task_options_are_refused_at_decoration(app: App, options: dict, message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        app.task(name="x", **options)(lambda: None)


def test_a_task_named_after_a_script_run_as_main_is_warned_about(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    script = types.ModuleType("__main__")
    script.__file__ = "/srv/app/hello.py"
    monkeypatch.setitem(sys.modules, "__main__", script)
    app = App("mongodb://127.0.0.1:1/shop")  # nothing is contacted

    def greet() -> None: ...

    greet.__module__, greet.__qualname__ = "__main__", "greet"  # as in python hello.py
    with caplog.at_level(logging.WARNING, logger="mongosched"):
        app.task(greet)
        app.task(name="greet")(greet)  # named: nothing to say
        App("memory://").task(greet)  # one process: the name cannot differ
    [warning] = [r.getMessage() for r in caplog.records]
    assert "task '__main__.greet' is registered from the script run as __main__" in warning
    assert "a runner that imports it knows the task as 'hello.greet'" in warning
    assert "@app.task(name='greet')" in warning


def test_same_name_twice_is_refused(app: App) -> None:
    app.task(name="dup")(lambda: 1)
    with pytest.raises(ConfigurationError, match="'dup' is already registered"):
        app.task(name="dup")(lambda: 2)


def test_app_options_are_checked() -> None:
    with pytest.raises(ConfigurationError, match="exactly one of uri or database"):
        App()
    with pytest.raises(ConfigurationError, match="names no database"):
        App("mongodb://localhost:27017")
    with pytest.raises(ConfigurationError, match="invalid MongoDB URI"):
        App("mongodb://host:notaport/db")
    with pytest.raises(ConfigurationError, match="unknown store URI 'http://example'"):
        App("http://example")
    with pytest.raises(ConfigurationError, match="unknown store URI 'mongomock://'"):
        App("mongomock://")  # a test stand-in, not a store the library offers
    with pytest.raises(ConfigurationError, match="lease_duration must be >= 0.01 seconds"):
        App("memory://", lease_duration=0)
    for nonsense in (float("nan"), float("inf"), -1, "30"):
        with pytest.raises(ConfigurationError, match="App: poll_interval"):
            App("memory://", poll_interval=nonsense)
    with pytest.raises(ConfigurationError, match="clock must return a timezone-aware"):
        App("memory://", clock=lambda: datetime(2026, 1, 1)).now()
