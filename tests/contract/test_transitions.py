"""Every kind of write leaves the job as its transition in
:mod:`mongosched._core.transitions` says: the job read back after the store's write
equals the transition of the job read before it, on every substrate. On MongoDB that
is ``to_record`` of the document the update left, so the update documents of
``store/mongo/updates.py`` and the transitions cannot drift apart; the memory store
applies the transitions themselves."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest

from mongosched._core import outcome, transitions
from mongosched._core.records import (
    AttemptRecord,
    ErrorInfo,
    JobRecord,
    JobStatus,
    Pause,
    PendingChanges,
    ScheduleChanges,
    ScheduleEdit,
    evolved,
)
from mongosched._core.transitions import ms
from mongosched.store import Store
from mongosched.store.claimant import here

from .helpers import (
    LATER,
    LEASE,
    RETENTION,
    T0,
    add,
    batch,
    cancelled,
    claimed,
    given_back,
    job,
    lapsed,
    raised,
    sec,
    settle_and_claim,
    succeeded,
    token,
)

NOW = LATER + timedelta(seconds=1, microseconds=123_456)  # rounded to milliseconds
EVERY = {"every": 60.0}


def lands_as(
    store: Store,
    job_id: Any,
    write: Callable[[], Any],
    transition: Callable[[JobRecord], JobRecord],
) -> JobRecord:
    """Run ``write``; the job as stored after it is ``transition`` of the job as stored
    before it, and so is the record the write returned, if any."""
    before = store.jobs.get(job_id)
    assert before is not None
    returned = write()
    after = store.jobs.get(job_id)
    assert after == transition(before)
    if isinstance(returned, JobRecord):
        assert returned == after
    elif isinstance(returned, list) and returned and isinstance(returned[0], JobRecord):
        assert returned[0] == after
    return after


def test_a_claim(store: Store) -> None:
    stored = add(store, job(attempts=1, max_attempts=3, dedupe_key="k", dedupe_scope="pending"))[0]
    got: list[JobRecord] = []

    def write() -> JobRecord:
        got.append(claimed(store, now=NOW))
        return got[0]

    lands_as(
        store,
        stored.id,
        write,
        lambda before: transitions.claimed(before, "me", token(got[0]), NOW, LEASE, here()),
    )


def test_a_batched_claim(store: Store) -> None:
    stored = add(store, *[job(args=(n,)) for n in range(3)])
    got: list[JobRecord] = []

    def write() -> list[JobRecord]:
        got.extend(batch(store, 3, now=NOW))
        return got

    lands_as(
        store,
        stored[0].id,
        write,
        lambda before: transitions.claimed(before, "me", token(got[0]), NOW, LEASE, here()),
    )


def test_a_renewal_a_slot_recorded_and_progress(store: Store) -> None:
    add(store, job(repeat=EVERY, scheduled_for=T0))
    running = claimed(store)
    held, tok = running.id, token(running)
    until = NOW + sec(LEASE)
    lands_as(
        store,
        held,
        lambda: store.leases.renew(held, tok, NOW, until),
        lambda before: transitions.renewed(before, NOW, until),
    )
    slot = T0 + sec(60)
    lands_as(
        store,
        held,
        lambda: store.leases.record_slot(held, tok, slot, NOW),
        lambda before: transitions.slot_recorded(before, slot, NOW),
    )
    lands_as(
        store,
        held,
        lambda: store.leases.write_progress(held, tok, 0.5, "half", NOW),
        lambda before: transitions.progressed(before, 0.5, "half", NOW),
    )


SETTLEMENTS = {
    "completed": lambda r: succeeded(r, NOW, result={"n": [1, "two"]}),
    "failed": lambda r: raised(r, NOW),
    "retried": lambda r: raised(r, NOW) if r.max_attempts > 1 else None,
    "given back": lambda r: given_back(r, NOW),
    "cancelled": lambda r: cancelled(NOW),
}


@pytest.mark.parametrize("kind", list(SETTLEMENTS))
@pytest.mark.parametrize("how", ["settle", "settle_many", "settle_and_claim"])
def test_a_settlement(store: Store, kind: str, how: str) -> None:
    attempts = 3 if kind == "retried" else 1
    add(store, job(max_attempts=attempts, dedupe_key="k", progress=None))
    running = claimed(store)
    settlement = SETTLEMENTS[kind](running)
    assert settlement is not None
    if kind == "retried":
        assert settlement.status is JobStatus.PENDING

    def write() -> Any:
        if how == "settle":
            return store.leases.settle(running, settlement)
        if how == "settle_many":
            return store.claims.settle_many([(running, settlement)])
        return settle_and_claim(store, [(running, settlement)], limit=0, now=NOW)[0]

    lands_as(
        store,
        running.id,
        write,
        lambda before: transitions.settled(before, settlement, settlement.result),
    )


@pytest.mark.parametrize("declared", [False, True])
def test_the_next_slot_of_a_repeating_job_and_its_end(store: Store, declared: bool) -> None:
    fields: dict[str, Any] = {"id": "schedule:t"} if declared else {}
    add(store, job(repeat=EVERY, scheduled_for=T0, **fields))
    running = claimed(store)
    nxt = succeeded(running, NOW)
    assert nxt.status is JobStatus.PENDING and nxt.last_run is not None
    lands_as(
        store,
        running.id,
        lambda: store.leases.settle(running, nxt),
        lambda before: transitions.settled(before, nxt),
    )
    # Cancelled for good: a declared schedule is kept (its tombstone), no delete_at.
    again = claimed(store, now=NOW + sec(120))
    store.jobs.request_cancel(again.id, NOW + sec(121))
    ended = succeeded(again, NOW + sec(122))
    assert ended.on_cancel is not None
    after = lands_as(
        store,
        again.id,
        lambda: store.leases.settle(again, ended),
        lambda before: transitions.settled(before, ended.on_cancel or ended),
    )
    assert after.status is JobStatus.CANCELLED
    assert (after.delete_at is None) is declared


def test_a_reap(store: Store) -> None:
    add(store, job(max_attempts=1))
    running = claimed(store, lease=1)
    when = LATER + sec(5)
    settlement = lapsed(running, when)
    lands_as(
        store,
        running.id,
        lambda: store.leases.reap(running, when, settlement),
        lambda before: transitions.settled(before, settlement),
    )


def test_a_cancel_of_an_unstarted_job_and_of_a_running_one(store: Store) -> None:
    pending, other, one, two = add(store, job(dedupe_key="p"), job(), job(task="r"), job(task="r"))
    settlement = cancelled(NOW)
    lands_as(
        store,
        pending.id,
        lambda: store.jobs.cancel_pending(pending.id, settlement),
        lambda before: transitions.settled(before, settlement),
    )
    lands_as(
        store,
        other.id,
        lambda: store.admin.cancel_many([other.id], settlement),
        lambda before: transitions.settled(before, settlement),
    )
    for n, (stored, ask) in enumerate(((one, store.jobs.request_cancel), (two, None))):
        running = claimed(store, tasks=("r",), job_id=stored.id)
        at = NOW + sec(n)

        def write(held: JobRecord = running, ask: Any = ask, at: Any = at) -> Any:
            if ask is not None:
                return ask(held.id, at)
            return store.admin.cancel_many([held.id], outcome.cancelled(at, RETENTION))

        lands_as(
            store, running.id, write, lambda before, at=at: transitions.cancel_requested(before, at)
        )


def test_an_edit_of_a_pending_job(store: Store) -> None:
    stored = add(store, job(args=(1,), kwargs={"a": 1}))[0]
    changes = PendingChanges(
        priority=2, queue="q", run_at=NOW + sec(5), args=(2, "x"), kwargs={"b": [1]}
    )
    lands_as(
        store,
        stored.id,
        lambda: store.jobs.update_pending(stored, changes, NOW),
        lambda before: transitions.edited(before, changes, NOW),
    )
    only = PendingChanges(priority=7)
    lands_as(
        store,
        stored.id,
        lambda: store.jobs.update_pending(stored, only, NOW + sec(1)),
        lambda before: transitions.edited(before, only, NOW + sec(1)),
    )


def test_a_schedule_paused_edited_resumed_and_redeclared(store: Store) -> None:
    declared = job(id="schedule:t", repeat=EVERY, scheduled_for=T0)
    assert store.jobs.upsert_schedule(declared, T0)
    sid = declared.id
    store.admin.add_pause(Pause("schedule", sid, NOW))
    lands_as(
        store,
        sid,
        lambda: store.admin.pause_schedules([sid], NOW),
        lambda before: transitions.paused(before, NOW),
    )
    current = store.jobs.get(sid)
    assert current is not None
    changes = ScheduleChanges(
        repeat={"every": 30.0},
        run_at=NOW + sec(30),
        priority=1,
        queue="q",
        edit=ScheduleEdit(at=NOW, declared="abc"),
    )
    lands_as(
        store,
        sid,
        lambda: store.admin.update_schedule(current, changes, NOW),
        lambda before: transitions.schedule_edited(before, changes, NOW),
    )
    lands_as(
        store,
        sid,
        lambda: store.admin.resume_schedule(sid, NOW + sec(1)),
        lambda before: transitions.resumed(before, NOW + sec(1)),
    )
    code = job(id=sid, repeat={"every": 90.0}, scheduled_for=T0 + sec(90), at=T0 + sec(90))
    lands_as(
        store,
        sid,
        lambda: store.jobs.upsert_schedule(code, NOW + sec(2)),
        lambda before: transitions.redeclared(before, code, NOW + sec(2)),
    )
    lands_as(
        store,
        sid,
        lambda: store.jobs.upsert_schedule(code, NOW + sec(3)),
        lambda before: transitions.redeclared(before, code, NOW + sec(3)),
    )


@pytest.mark.parametrize("repeating", [False, True])
@pytest.mark.parametrize("many", [False, True])
def test_a_retry_of_a_finished_job(store: Store, repeating: bool, many: bool) -> None:
    extra: dict[str, Any] = {"repeat": EVERY, "scheduled_for": T0} if repeating else {}
    add(store, job(max_attempts=1, expires_at=NOW + sec(600), **extra))
    running = claimed(store)
    error = ErrorInfo("ValueError", "boom", None, "builtins")
    failed = outcome.finished(JobStatus.FAILED, LATER, RETENTION, result=3, error=error)
    assert store.leases.settle(running, failed) is not None

    def write() -> Any:
        if many:
            return store.admin.retry_many([running.id], [JobStatus.FAILED], NOW)
        return store.jobs.retry_finished(running.id, JobStatus.FAILED, NOW)

    lands_as(store, running.id, write, lambda before: transitions.retried(before, NOW))


def test_dependencies_linked_crossed_off_released(store: Store) -> None:
    first, second = add(store, job(task="a"), job(task="b"))
    waiting = add(
        store,
        job(
            task="w",
            status=JobStatus.WAITING,
            depends_on=(first.id, second.id),
            waiting_for=(first.id, second.id),
        ),
    )[0]
    lands_as(
        store,
        first.id,
        lambda: store.dependents.link_dependencies(
            [first.id, second.id], NOW, dependent=waiting.id
        ),
        lambda before: transitions.linked(before, NOW),
    )
    lands_as(
        store,
        first.id,
        lambda: store.dependents.link_dependencies([first.id], NOW + sec(1)),
        lambda before: transitions.linked(before, NOW + sec(1)),
    )
    ready = outcome.after_dependency(waiting, first.id, JobStatus.COMPLETED, NOW, RETENTION)
    lands_as(
        store,
        waiting.id,
        lambda: store.dependents.release_dependent(waiting, first.id, ready.settlement),
        lambda before: transitions.crossed_off(before, first.id),
    )
    lands_as(
        store,
        waiting.id,
        lambda: store.dependents.release_dependent(waiting, second.id, ready.settlement),
        lambda before: transitions.settled(
            transitions.crossed_off(before, second.id), ready.settlement
        ),
    )
    running = claimed(store, tasks=("a",))
    assert store.leases.settle(running, succeeded(running, NOW)) is not None
    lands_as(
        store,
        first.id,
        lambda: store.dependents.dependents_released(first.id),
        transitions.dependents_released,
    )


def test_a_waiting_job_cancelled_by_its_dependency(store: Store) -> None:
    first = add(store, job(task="a"))[0]
    waiting = add(
        store,
        job(task="w", status=JobStatus.WAITING, depends_on=(first.id,), waiting_for=(first.id,)),
    )[0]
    gone = outcome.after_dependency(waiting, first.id, JobStatus.FAILED, NOW, RETENTION)
    lands_as(
        store,
        waiting.id,
        lambda: store.dependents.release_dependent(waiting, first.id, gone.settlement),
        lambda before: transitions.settled(before, gone.settlement),
    )


def test_a_label_paused_and_resumed(store: Store) -> None:
    stored = add(store, job(label="app.send"))[0]
    store.admin.add_pause(Pause("task", "app.send", NOW))
    lands_as(
        store,
        stored.id,
        lambda: store.admin.pause_label("app.send", NOW),
        lambda before: transitions.paused(before, NOW),
    )
    lands_as(
        store,
        stored.id,
        lambda: store.admin.resume_label("app.send", NOW + sec(1)),
        lambda before: transitions.resumed(before, NOW + sec(1)),
    )


def test_failed_attempts_keep_their_errors(store: Store) -> None:
    add(store, job(max_attempts=3))
    for n in range(3):
        running = claimed(store, now=NOW + sec(n))
        settlement = raised(running, NOW + sec(n), ValueError(f"boom {n}"))
        assert settlement.attempt_error is not None
        after = lands_as(
            store,
            running.id,
            lambda running=running, settlement=settlement: store.leases.settle(running, settlement),
            lambda before, settlement=settlement: transitions.settled(before, settlement),
        )
    assert [e.attempt for e in after.errors] == [1, 2, 3]


def test_a_debounce_replaces_the_pending_job(store: Store) -> None:
    pending = dict(dedupe_key="k", dedupe_scope="pending", dedupe_replace=True)
    stored = add(store, job(args=(1,), rate_key="a", **pending))[0]
    later = evolved(job(at=NOW + sec(30), args=(2,), kwargs={"x": [1]}, **pending), updated_at=NOW)
    lands_as(
        store,
        stored.id,
        lambda: store.jobs.insert([later])[0][0],
        lambda before: transitions.replaced(before, later),
    )


def test_each_ended_attempt_keeps_who_ran_it_and_when(store: Store) -> None:
    """A claim keeps the runner's host and process id in the lease; each attempt that
    ends (retried, reaped, completed) joins the job's history with its runner, host,
    pid, start, end and the status it left; a claim given back unrun adds none."""
    host, pid = here()
    add(store, job(max_attempts=3))
    first = claimed(store, now=NOW)
    assert first.lease is not None and (first.lease.host, first.lease.pid) == (host, pid)
    store.leases.settle(first, raised(first, NOW + sec(1)))
    second = claimed(store, now=NOW + sec(2))
    store.leases.settle(second, given_back(second, NOW + sec(3)))
    second = claimed(store, now=NOW + sec(4))
    store.leases.reap(second, NOW + sec(4 + LEASE + 1), lapsed(second, NOW + sec(4 + LEASE + 1)))
    third = claimed(store, now=NOW + sec(60))
    done = store.leases.settle(third, succeeded(third, NOW + sec(61)))
    assert done is not None and done == store.jobs.get(first.id)
    started = [ms(NOW), ms(NOW + sec(4)), ms(NOW + sec(60))]
    ended = [ms(NOW + sec(1)), ms(NOW + sec(4 + LEASE + 1)), ms(NOW + sec(61))]
    assert done.history == tuple(
        AttemptRecord(n, "me", host, pid, s, e, status)
        for n, s, e, status in zip(
            (1, 2, 3),
            started,
            ended,
            (JobStatus.PENDING, JobStatus.PENDING, JobStatus.COMPLETED),
            strict=True,
        )
    )
