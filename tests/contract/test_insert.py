"""insert and upsert_schedule: ids, dedupe keys on insert, batches, what can be stored."""

from __future__ import annotations

import re
import uuid
from dataclasses import replace
from datetime import date, datetime, timedelta, timezone
from decimal import Decimal
from typing import Any

import pytest

from mongosched._core import outcome
from mongosched._core.outcome import Ending, Retention
from mongosched._core.records import JobQuery, JobRecord, JobStatus
from mongosched.errors import SerializationError
from mongosched.store import Store

from .helpers import LATER, T0, add, claim, claimed, job, sec, succeeded


# Ids and what is stored --------------------------------------------------------------------------
def test_insert_makes_the_ids_and_stores_the_job(store: Store) -> None:
    first, second = add(
        store,
        job(args=(1, "two"), kwargs={"k": [3]}, queue="q", priority=2, max_attempts=4),
        job("other"),
    )
    assert first.id is not None and second.id is not None and first.id != second.id
    assert store.parse_id(str(first.id)) == first.id  # its string form names it
    got = store.jobs.get(first.id)
    assert got is not None and got.id == first.id
    assert (got.task, got.args, got.kwargs) == ("t", (1, "two"), {"k": [3]})
    assert (got.queue, got.priority, got.max_attempts) == ("q", 2, 4)
    assert got.status is JobStatus.PENDING and got.attempts == 0 and got.lease is None
    assert got.run_at == got.created_at == got.updated_at == T0
    assert got.dedupe_key is None and got.dedupe_scope is None and got.repeat is None
    assert got.result is None and got.error is None and got.finished_at is None
    assert store.jobs.count(JobQuery()) == 2


def test_insert_returns_the_job_as_stored(store: Store) -> None:
    plus_two = timezone(timedelta(hours=2))
    at = datetime(2099, 3, 1, 14, 0, 0, 123_987, tzinfo=plus_two)
    [(inserted, created)] = store.jobs.insert(
        [replace(job(at=at, args=([1, 2], at), kwargs={"t": [3]}), created_at=at, updated_at=at)]
    )
    assert created
    assert inserted == store.jobs.get(inserted.id)
    batch = store.jobs.insert([job(at=at, args=[[4]]), job("other", kwargs={"at": at})])
    for stored, created in batch:
        assert created and stored == store.jobs.get(stored.id)


def test_a_repeated_insert_finds_its_own_job(store: Store) -> None:
    original = job(args=(1,))
    first = add(store, original)[0]
    assert store.jobs.insert([replace(original, id=first.id)]) == [(first, True)]
    assert store.jobs.count(JobQuery()) == 1
    [again, (new, created)] = store.jobs.insert([replace(original, id=first.id), job("new")])
    assert again == (first, True) and created and new.id != first.id
    assert store.jobs.count(JobQuery()) == 2


def test_a_batch_is_inserted_in_order(store: Store) -> None:
    assert store.jobs.insert([]) == []
    results = store.jobs.insert(
        [job("a"), job("b", dedupe_key="k"), job("c"), job("b", dedupe_key="k"), job("d")]
    )
    assert [created for _, created in results] == [True, True, True, False, True]
    assert [r.task for r, _ in results] == ["a", "b", "c", "b", "d"]
    assert results[3][0].id == results[1][0].id  # the holder of the key
    assert len({r.id for r, _ in results}) == 4
    assert store.jobs.count(JobQuery()) == 4
    for stored, _ in results:
        got = store.jobs.get(stored.id)
        assert got is not None and got.task == stored.task


# Dedupe keys -----------------------------------------------------------------------------------------
def test_active_scope_holds_the_key_while_pending_or_running(store: Store) -> None:
    first = add(store, job(dedupe_key="k"))[0]
    assert first.dedupe_key == "k" and first.dedupe_scope == "active"
    [(holder, created)] = store.jobs.insert([job(dedupe_key="k", args=(2,))])
    assert holder.id == first.id and holder.args == () and not created
    running = claimed(store)
    [(holder, created)] = store.jobs.insert([job(dedupe_key="k")])
    assert holder.id == first.id and holder.status is JobStatus.RUNNING and not created
    [(other, created)] = store.jobs.insert([job("other", dedupe_key="k")])  # keys are per task
    assert created and other.id != first.id
    assert store.leases.settle(running, succeeded(running)) is not None
    [(second, created)] = store.jobs.insert([job(dedupe_key="k")])
    assert created and second.id != first.id
    assert store.jobs.count(JobQuery(task="t")) == 2


def test_pending_scope_lets_one_wait_behind_one_running(store: Store) -> None:
    first = add(store, job(dedupe_key="k", dedupe_scope="pending"))[0]
    assert first.dedupe_scope == "pending"
    [(holder, created)] = store.jobs.insert([job(dedupe_key="k", dedupe_scope="pending")])
    assert holder.id == first.id and not created
    running = claimed(store)
    assert running.id == first.id
    [(second, created)] = store.jobs.insert([job(dedupe_key="k", dedupe_scope="pending")])
    assert created and second.id != first.id
    [(holder, created)] = store.jobs.insert([job(dedupe_key="k", dedupe_scope="pending")])
    assert holder.id == second.id and not created


def windowed(at: datetime, window: float = 300, **fields: Any) -> JobRecord:
    """A new job of task ``t`` with dedupe key ``k`` and a throttle window, scheduled at ``at``."""
    made = job(at=at, dedupe_key="k", dedupe_scope="active", dedupe_until=at + sec(window))
    return replace(made, created_at=at, updated_at=at, **fields)


def test_a_throttle_window_holds_the_key_after_its_job_finished(store: Store) -> None:
    first = add(store, windowed(T0))[0]
    assert first.dedupe_until == T0 + sec(300)
    running = claimed(store)
    assert store.leases.settle(running, succeeded(running)) is not None
    # Finished, but its window is open: the finished job is returned, none is made.
    [(holder, created)] = store.jobs.insert([windowed(T0 + sec(299), args=(2,))])
    assert holder.id == first.id and not created and holder.status is JobStatus.COMPLETED
    assert store.jobs.count(JobQuery(task="t")) == 1
    # Keys are per task, and a job without a window is not held by one.
    [(_, created)] = store.jobs.insert([replace(windowed(T0 + sec(1)), task="other")])
    assert created
    [(plain, created)] = store.jobs.insert([job(dedupe_key="k")])
    assert created
    running = claimed(store)
    assert running.id == plain.id and store.leases.settle(running, succeeded(running)) is not None
    # Once the window ended, the next call makes a job, which opens a window of its own.
    [(second, created)] = store.jobs.insert([windowed(T0 + sec(300), args=(3,))])
    assert created and second.id != first.id and second.args == (3,)
    [(holder, created)] = store.jobs.insert([windowed(T0 + sec(301))])
    assert holder.id == second.id and not created


def test_retention_never_ends_a_throttle_window_before_it_closes(store: Store) -> None:
    # Kept one second after they end (keep_completed=1 s), but each holds its key for
    # an hour: the job, which holds the window, is kept until the window closes.
    brief = Retention(completed=sec(1), failed=sec(1))
    hour = 3600.0
    first = add(store, windowed(T0, window=hour))[0]
    running = claimed(store)
    settled = store.leases.settle(
        running, outcome.decide(running, Ending.SUCCESS, now=LATER, retention=brief).settlement
    )
    assert settled is not None and settled.delete_at == T0 + sec(hour)
    # Cancelled before it ran, alone or in a bulk cancel: the same.
    one = add(store, replace(windowed(T0, window=hour), task="one"))[0]
    cancelled = store.jobs.cancel_pending(one.id, outcome.cancelled(LATER, brief))
    assert cancelled is not None and cancelled.delete_at == T0 + sec(hour)
    many = add(store, replace(windowed(T0, window=hour), task="many"))[0]
    plain = add(store, job(task="many"))[0]
    assert store.admin.cancel_many([many.id, plain.id], outcome.cancelled(LATER, brief)) == (2, 0)
    assert store.jobs.get(many.id).delete_at == T0 + sec(hour)  # type: ignore[union-attr]
    assert store.jobs.get(plain.id).delete_at == LATER + sec(1)  # type: ignore[union-attr]
    # A window shorter than the retention changes nothing.
    short = add(store, replace(windowed(T0, window=1), task="short"))[0]
    done = store.jobs.cancel_pending(short.id, outcome.cancelled(LATER, brief))
    assert done is not None and done.delete_at == LATER + sec(1)
    assert first.id != one.id


def test_a_batch_holds_a_window_once(store: Store) -> None:
    results = store.jobs.insert([windowed(T0), windowed(T0, args=(2,))])
    assert [created for _, created in results] == [True, False]
    assert results[1][0].id == results[0][0].id


def test_replace_takes_the_arguments_and_due_time_of_the_last_call(store: Store) -> None:
    first = add(store, job(dedupe_key="k", dedupe_scope="pending", dedupe_replace=True))[0]
    assert first.dedupe_replace
    later = job(
        at=T0 + sec(30),
        args=(2,),
        kwargs={"x": 1},
        dedupe_key="k",
        dedupe_scope="pending",
        dedupe_replace=True,
        rate_key="r",
    )
    [(replaced, created)] = store.jobs.insert([replace(later, updated_at=T0 + sec(5))])
    assert not created and replaced.id == first.id
    assert (replaced.args, replaced.kwargs, replaced.run_at) == ((2,), {"x": 1}, T0 + sec(30))
    assert replaced.rate_key == "r" and replaced.updated_at == T0 + sec(5)
    assert replaced == store.jobs.get(first.id)
    assert claim(store, now=T0 + sec(29)) is None  # its due time moved
    # A running job is not touched: a new one waits behind it.
    running = claim(store, now=T0 + sec(30))
    assert running is not None and running.id == first.id
    [(second, created)] = store.jobs.insert([replace(later, args=(3,))])
    assert created and second.id != first.id
    got = store.jobs.get(first.id)
    assert got is not None and got.args == (2,) and got.status is JobStatus.RUNNING
    [(third, created)] = store.jobs.insert([replace(later, args=(4,))])
    assert not created and third.id == second.id and third.args == (4,)
    assert store.jobs.count(JobQuery(task="t")) == 2


# What can be stored ------------------------------------------------------------------------------
def test_a_payload_bson_cannot_hold_raises_naming_the_argument(store: Store) -> None:
    with pytest.raises(SerializationError, match="argument 1"):
        store.jobs.insert([job(args=(1, object()))])
    with pytest.raises(SerializationError, match="keyword argument 'x'"):
        store.jobs.insert([job(kwargs={"x": {1, 2}})])
    with pytest.raises(SerializationError, match="must be str"):
        store.jobs.insert([job(kwargs={1: "one"})])
    with pytest.raises(SerializationError, match="argument 0"):
        store.jobs.insert([job(), job("other", args=(object(),))])  # one bad job: none written
    assert store.jobs.count(JobQuery()) == 0


def test_a_tuple_in_a_payload_is_refused_a_result_keeps_it_as_a_list(store: Store) -> None:
    """BSON has no tuples: a payload holding one would reach the task as a list, so it
    is refused, naming where it is; a result is only read back (as a list)."""
    for args, kwargs, where in [
        (((4, 5),), {}, "argument 0 holds a tuple;"),
        (([6, (7,)],), {}, "argument 0 holds a tuple[1]"),
        ((), {"d": {"k": (8, 9)}}, "keyword argument 'd' holds a tuple['k']"),
    ]:
        with pytest.raises(SerializationError, match=re.escape(where)):
            store.jobs.insert([job(args=args, kwargs=kwargs)])
    stored = add(store, job(args=([4, 5],)))[0]
    running = claimed(store)
    settled = store.leases.settle(running, succeeded(running, result={"rows": [1, (2, 3)]}))
    assert settled is not None and settled.result == {"rows": [1, [2, 3]]}
    final = store.jobs.get(stored.id)
    assert final is not None and final.result == {"rows": [1, [2, 3]]}


def test_datetimes_are_kept_in_whole_milliseconds_utc(store: Store) -> None:
    plus_two = timezone(timedelta(hours=2))
    at = datetime(2099, 3, 1, 14, 0, 0, 123_987, tzinfo=plus_two)
    expected = datetime(2099, 3, 1, 12, 0, 0, 123_000, tzinfo=timezone.utc)
    stored = add(store, replace(job(at=at, args=(at,), kwargs={"at": at}), created_at=at))[0]
    got = store.jobs.get(stored.id)
    assert got is not None
    for value in (got.run_at, got.created_at, got.args[0], got.kwargs["at"]):
        assert value == expected and value.utcoffset() == timedelta(0)
    running = claimed(store, now=LATER + timedelta(microseconds=1999))
    assert running.lease is not None
    assert running.started_at == running.lease.heartbeat_at == LATER + sec(0.001)
    assert running.lease.until == LATER + sec(30.001)
    assert store.leases.write_progress(
        running.id, running.lease.token, 0.5, "half", LATER + sec(0.0029)
    )
    got = store.jobs.get(running.id)
    assert got is not None and got.progress is not None
    assert got.progress.at == LATER + sec(0.002)


# Declared schedules ----------------------------------------------------------------------------------
def test_a_schedule_is_created_once(store: Store) -> None:
    declared = job(id="schedule:t", repeat={"every": 60.0}, scheduled_for=T0, max_attempts=2)
    assert store.jobs.upsert_schedule(declared, T0) is True
    assert store.jobs.upsert_schedule(declared, LATER) is False
    assert (
        store.jobs.upsert_schedule(replace(declared, run_at=LATER, scheduled_for=LATER), LATER)
        is False
    )
    got = store.jobs.get("schedule:t")
    assert got is not None and got.status is JobStatus.PENDING
    assert got.repeat == {"every": 60.0} and got.max_attempts == 2
    assert got.run_at == got.scheduled_for == T0 and got.updated_at == T0  # unchanged
    assert store.jobs.count(JobQuery()) == 1
    assert [r.id for r in store.jobs.schedules()] == ["schedule:t"]


def test_a_rule_change_recomputes_the_next_slot_while_pending(store: Store) -> None:
    declared = job(id="schedule:t", repeat={"every": 60.0}, scheduled_for=T0)
    assert store.jobs.upsert_schedule(declared, T0)
    changed = replace(
        declared,
        repeat={"every": 30.0},
        run_at=T0 + sec(30),
        scheduled_for=T0 + sec(30),
        queue="q",
        priority=2,
        max_attempts=3,
    )
    assert store.jobs.upsert_schedule(changed, LATER) is False
    got = store.jobs.get("schedule:t")
    assert got is not None and got.repeat == {"every": 30.0}
    assert (got.queue, got.priority, got.max_attempts) == ("q", 2, 3)
    assert got.run_at == got.scheduled_for == T0 + sec(30) and got.updated_at == LATER
    assert got.status is JobStatus.PENDING
    running = claimed(store, queues=("q",))
    assert running.id == "schedule:t" and running.priority == 2


def test_queue_priority_and_attempts_change_without_moving_the_slot(store: Store) -> None:
    declared = job(id="schedule:t", repeat={"every": 60.0}, scheduled_for=T0)
    assert store.jobs.upsert_schedule(declared, T0)
    moved = replace(declared, run_at=LATER, scheduled_for=LATER, priority=1, max_attempts=5)
    assert store.jobs.upsert_schedule(moved, LATER) is False
    got = store.jobs.get("schedule:t")
    assert got is not None and (got.priority, got.max_attempts) == (1, 5)
    assert got.run_at == got.scheduled_for == T0 and got.updated_at == LATER


def test_a_running_schedule_keeps_its_slot_when_its_rule_changes(store: Store) -> None:
    declared = job(id="schedule:t", repeat={"every": 60.0}, scheduled_for=T0)
    assert store.jobs.upsert_schedule(declared, T0)
    running = claimed(store)
    changed = replace(
        declared,
        repeat={"every": 10.0},
        run_at=T0 + sec(10),
        scheduled_for=T0 + sec(10),
        priority=3,
    )
    assert store.jobs.upsert_schedule(changed, LATER + sec(1)) is False
    got = store.jobs.get("schedule:t")
    assert got is not None and got.status is JobStatus.RUNNING and got.lease == running.lease
    assert got.repeat == {"every": 10.0} and got.priority == 3
    assert got.run_at == got.scheduled_for == T0
    # Its run ends: the next slot follows the new rule.
    settled = store.leases.settle(got, succeeded(got, LATER + sec(2)))
    assert settled is not None and settled.status is JobStatus.PENDING
    assert settled.scheduled_for == settled.run_at == T0 + sec(10)
    assert settled.last_run is not None and settled.last_run.slot == T0
    assert settled.last_run.status is JobStatus.COMPLETED


def test_uuids_and_decimals_come_back_as_themselves(store: Store) -> None:
    ident, amount = uuid.uuid4(), Decimal("12.3400")
    (stored,) = add(store, job(args=(ident,), kwargs={"amount": amount, "ids": [ident]}))
    again = store.jobs.get(stored.id)
    assert again is not None
    assert again.args == (ident,) and isinstance(again.args[0], uuid.UUID)
    assert again.kwargs == {"amount": amount, "ids": [ident]}
    assert isinstance(again.kwargs["amount"], Decimal) and str(again.kwargs["amount"]) == "12.3400"


def test_a_date_is_refused_with_a_hint(store: Store) -> None:
    with pytest.raises(SerializationError, match=r"argument 0 is not BSON-encodable.*isoformat"):
        store.jobs.insert([job(args=(date(2026, 1, 1),))])


def debounced(n: int) -> JobRecord:
    """Call ``n`` of a debounce: its arguments, due time and priority say which."""
    return job(
        at=T0 + sec(n),
        args=(n,),
        priority=n,
        dedupe_key="k",
        dedupe_scope="pending",
        dedupe_replace=True,
    )


def needs_transactions(substrate: str) -> None:
    if substrate == "wire":
        pytest.skip("the wire stand-in has no multi-document transactions")


@pytest.mark.parametrize("in_transaction", [False, True], ids=["alone", "in_transaction"])
def test_a_batch_of_one_debounce_key_keeps_the_last_call(
    store: Store, substrate: str, in_transaction: bool
) -> None:
    if in_transaction:
        needs_transactions(substrate)
    calls = [debounced(n) for n in (1, 2, 3)]
    transaction = store.transactions.begin() if in_transaction else None
    into = store if transaction is None else store.within(transaction)
    results = into.jobs.insert(calls)
    if transaction is not None:
        transaction.commit()
    assert [created for _, created in results] == [True, False, False]
    assert len({stored.id for stored, _ in results}) == 1
    assert results[-1][0].args == (3,)
    kept = store.jobs.get(results[0][0].id)
    assert kept is not None
    assert (kept.args, kept.run_at, kept.priority) == ((3,), T0 + sec(3), 3)
    assert store.jobs.count(JobQuery(task="t")) == 1


def test_a_debounce_in_a_transaction_replaces_a_stored_job_when_it_commits(
    store: Store, substrate: str
) -> None:
    needs_transactions(substrate)
    first = add(store, debounced(1))[0]
    transaction = store.transactions.begin()
    [(seen, created)] = store.within(transaction).jobs.insert([debounced(2)])
    assert not created and seen.id == first.id and seen.args == (2,)
    stored = store.jobs.get(first.id)
    assert stored is not None and stored.args == (1,)  # not before it commits
    transaction.commit()
    kept = store.jobs.get(first.id)
    assert kept is not None
    assert (kept.args, kept.run_at, kept.priority) == ((2,), T0 + sec(2), 2)
    assert store.jobs.count(JobQuery(task="t")) == 1
