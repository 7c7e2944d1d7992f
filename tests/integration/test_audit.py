"""The audit trail (mongosched.operations.audit): every operator action of the API kept
with who, through what, on how many jobs and when, for ``keep_audit``."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta

import pytest

from mongosched import App
from mongosched.errors import ConfigurationError, StoreError
from mongosched.operations.audit import local_actor
from mongosched.testing import FakeClock, drain


def busy(make_app: Callable[..., App], clock: FakeClock, **options: object) -> App:
    app = make_app(clock=clock, **options)
    app.task(name="boom", retry=0)(lambda: 1 / 0)
    app.task(name="ok")(lambda: None)
    app.task(name="tick", every=60)(lambda: None)
    return app


def test_every_operator_action_is_kept_with_who_what_and_how_many(
    make_app: Callable[..., App], clock: FakeClock
) -> None:
    app = busy(make_app, clock)
    failed = [app.schedule("boom") for _ in range(3)]
    drain(app)
    pending = app.get_task("ok").configure(delay=60).schedule()
    app.ensure_schedules()

    app.retry_job(failed[0], actor="alice")
    app.retry_jobs(task="boom", actor="bob")  # the two still failed
    app.cancel_jobs(task="boom")  # this process's user@host
    app.cancel(pending, actor="alice")
    app.purge_jobs(status="cancelled", task="boom", actor="carol")
    app.update_job(app.get_task("ok").configure(delay=60).schedule(), priority=2, actor="dave")
    app.pause(queue="reports", actor="erin")
    app.resume(queue="reports", actor="erin")
    app.update_schedule("tick", every=120, actor="frank")
    app.purge(status="cancelled", actor="gina")
    app.retry_jobs(task="boom", dry_run=True, actor="nobody")  # a count only: not kept

    got = [(e.actor, e.via, e.action, e.count) for e in reversed(app.audit.entries())]
    assert got == [
        ("alice", "api", "retry", 1),
        ("bob", "api", "retry", 2),
        (local_actor(), "api", "cancel", 3),
        ("alice", "api", "cancel", 1),
        ("carol", "api", "purge", 3),
        ("dave", "api", "update", 1),
        ("erin", "api", "pause", None),
        ("erin", "api", "resume", None),
        ("frank", "api", "schedule_edit", None),
        ("gina", "api", "purge", 1),
    ]
    entries = list(reversed(app.audit.entries()))
    assert entries[0].target == f"job {failed[0].id} (boom)"
    assert entries[1].target == "task=boom, statuses=failed/cancelled/expired"
    assert entries[3].target == f"job {pending.id}" and entries[3].detail == "cancelled"
    assert entries[5].detail == "priority"
    assert entries[6].target == "queue reports"
    assert entries[8].target == "schedule schedule:tick (tick)"
    assert entries[8].detail is not None and "every 120" in entries[8].detail
    assert all(e.at == clock() for e in entries)


def test_front_ends_say_who_acts_unless_an_actor_is_given(
    make_app: Callable[..., App], clock: FakeClock
) -> None:
    app = busy(make_app, clock)
    with app.audit.acting("alice", "dashboard"):
        app.pause(task="ok")
        app.resume(task="ok", actor="bob")
    app.pause(task="ok")
    got = [(e.actor, e.via, e.detail) for e in reversed(app.audit.entries())]
    assert got == [
        ("alice", "dashboard", None),
        ("bob", "dashboard", None),
        (local_actor(), "api", None),
    ]
    with pytest.raises(ConfigurationError, match="audit: actor must be a non-empty str"):
        with app.audit.acting("", "cli"):
            pass
    with pytest.raises(ConfigurationError, match=r"audit: via '\\ud800' cannot be stored"):
        with app.audit.acting("alice", "\ud800"):  # UTF-8 cannot encode it: never stored
            pass


@pytest.mark.parametrize(
    ("bad", "why"),
    [
        ("", "must be a non-empty str"),
        (42, "must be a non-empty str"),
        ("\ud800", r"'\\ud800' cannot be stored"),  # a lone surrogate: UTF-8 cannot encode it
    ],
)
def test_a_bad_actor_is_refused_before_anything_is_done(
    make_app: Callable[..., App], clock: FakeClock, bad: object, why: str
) -> None:
    app = busy(make_app, clock)
    job = app.get_task("ok").configure(delay=60).schedule()
    with pytest.raises(ConfigurationError, match=f"cancel: actor {why}"):
        app.cancel(job, actor=bad)  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match=f"pause: actor {why}"):
        app.pause(queue="q", actor=bad)  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match=f"purge_jobs: actor {why}"):
        app.purge_jobs(task="ok", actor=bad)  # type: ignore[arg-type]
    assert job.refresh().status.value == "pending" and app.pauses() == []
    assert app.audit.entries() == []


def test_entries_are_kept_for_keep_audit(make_app: Callable[..., App], clock: FakeClock) -> None:
    app = busy(make_app, clock, keep_audit=timedelta(days=1))
    app.pause(queue="q", actor="early")
    clock.advance(hours=12)
    app.resume(queue="q", actor="later")
    assert [e.actor for e in app.audit.entries()] == ["later", "early"]
    clock.advance(hours=12)  # the first is a day old: gone
    assert [e.actor for e in app.audit.entries()] == ["later"]
    forever = busy(make_app, clock, keep_audit=None)
    forever.pause(queue="q", actor="kept")
    clock.advance(days=3650)
    assert [e.actor for e in forever.audit.entries()] == ["kept"]
    with pytest.raises(ConfigurationError, match="keep_audit"):
        make_app(keep_audit="a week")


def test_a_schedule_triggered_or_backfilled_is_recorded(
    make_app: Callable[..., App], clock: FakeClock
) -> None:
    app = busy(make_app, clock)
    app.ensure_schedules()
    run = app.trigger_schedule("tick", actor="alice")
    lanes = app.backfill("tick", clock() - timedelta(hours=1), clock(), at_once=2, actor="bob")
    with pytest.raises(ConfigurationError, match="backfill: actor must be a non-empty str"):
        app.backfill("tick", clock() - timedelta(hours=1), clock(), actor="")
    entries = list(reversed(app.audit.entries()))
    assert [(e.actor, e.action, e.target, e.count) for e in entries] == [
        ("alice", "trigger", "schedule schedule:tick (tick)", 1),
        ("bob", "backfill", "schedule schedule:tick (tick)", len(lanes)),
    ]
    assert entries[0].detail == f"job {run.id}" and len(lanes) == 2
    assert entries[1].detail is not None and entries[1].detail.endswith(", 2 at once")


def test_a_bulk_action_that_fails_half_way_is_kept_with_what_it_did(
    make_app: Callable[..., App], clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    app = busy(make_app, clock)
    for _ in range(3):
        app.schedule("boom")
    drain(app)
    purge_many = app.store.admin.purge_many
    calls = []

    def fails_on_the_second_batch(ids: object, final: object) -> int:
        calls.append(ids)
        if len(calls) == 2:
            raise StoreError("the server went away")
        return purge_many(ids, final)  # type: ignore[arg-type]

    monkeypatch.setattr(app.store.admin, "purge_many", fails_on_the_second_batch)
    with pytest.raises(StoreError, match="went away"):
        app.purge_jobs(task="boom", batch_size=2, actor="carol")

    assert app.count_jobs(task="boom") == 1  # the first batch was purged
    (entry,) = app.audit.entries()
    assert (entry.actor, entry.action, entry.count) == ("carol", "purge", 2)
    assert entry.detail == "stopped after 1 batch(es): StoreError: the server went away"
