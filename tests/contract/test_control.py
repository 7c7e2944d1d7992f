"""What users do to jobs: cancel_pending, request_cancel, update_pending,
retry_finished, purge."""

from __future__ import annotations

import pytest

from mongosched._core.records import JobQuery, JobStatus, PendingChanges
from mongosched.errors import JobStateError, SerializationError
from mongosched.store import Store

from .helpers import (
    LATER,
    RETENTION,
    T0,
    add,
    cancelled,
    claim,
    claimed,
    ids,
    job,
    raised,
    sec,
    succeeded,
    token,
)

PENDING, RUNNING = JobStatus.PENDING, JobStatus.RUNNING
CANCELLED, COMPLETED, FAILED = JobStatus.CANCELLED, JobStatus.COMPLETED, JobStatus.FAILED


# Cancel ---------------------------------------------------------------------------------------------
def test_cancel_pending_ends_a_waiting_job_and_frees_its_key(store: Store) -> None:
    queued = add(store, job(dedupe_key="k"))[0]
    ended = store.jobs.cancel_pending(queued.id, cancelled(LATER))
    assert ended is not None and ended == store.jobs.get(queued.id)
    assert ended.status is CANCELLED and ended.finished_at == ended.updated_at == LATER
    assert ended.delete_at == LATER + RETENTION.failed  # type: ignore[operator]
    assert ended.lease is None and ended.attempts == 0
    assert store.jobs.cancel_pending(queued.id, cancelled(LATER + sec(1))) is None  # once
    assert store.jobs.get(queued.id) == ended
    assert claim(store) is None
    assert store.jobs.insert([job(dedupe_key="k")])[0][1] is True
    assert store.jobs.cancel_pending("schedule:nothing", cancelled()) is None
    waiting = add(store, job(dedupe_key="p", dedupe_scope="pending"))[0]
    assert store.jobs.cancel_pending(waiting.id, cancelled()) is not None
    assert store.jobs.insert([job(dedupe_key="p", dedupe_scope="pending")])[0][1] is True


def test_cancel_pending_leaves_a_running_job_alone(store: Store) -> None:
    add(store, job())
    running = claimed(store)
    assert store.jobs.cancel_pending(running.id, cancelled()) is None
    assert store.jobs.get(running.id) == running


def test_request_cancel_marks_only_a_running_job(store: Store) -> None:
    queued, other = add(store, job(priority=1), job())
    assert store.jobs.request_cancel(other.id, LATER) is None  # pending: not marked
    running = claimed(store)
    assert running.id == queued.id
    marked = store.jobs.request_cancel(running.id, LATER + sec(1))
    assert marked is not None and marked == store.jobs.get(running.id)
    assert marked.cancel_requested is True and marked.status is RUNNING
    assert marked.updated_at == LATER + sec(1) and marked.lease == running.lease
    again = store.jobs.request_cancel(running.id, LATER + sec(2))  # repeated: still marked
    assert again is not None and again.cancel_requested
    renewal = store.leases.renew(running.id, token(running), LATER + sec(3), LATER + sec(33))
    assert renewal.held and renewal.cancel_requested
    ended = store.leases.settle(running, cancelled(LATER + sec(4)))
    assert ended is not None and ended.status is CANCELLED
    assert store.jobs.request_cancel(running.id, LATER + sec(5)) is None
    assert store.jobs.request_cancel("schedule:nothing", LATER) is None
    other_now = store.jobs.get(other.id)
    assert other_now is not None and other_now.cancel_requested is False


# update_pending --------------------------------------------------------------------------------------
def test_update_pending_changes_a_waiting_job(store: Store) -> None:
    first, second, third = add(store, job(args=(1,), kwargs={"a": 1}), job(), job())
    changed = store.jobs.update_pending(second, PendingChanges(priority=1), LATER)
    assert changed is not None and changed == store.jobs.get(second.id)
    assert changed.priority == 1 and changed.updated_at == LATER and changed.status is PENDING
    moved = store.jobs.update_pending(first, PendingChanges(run_at=LATER + sec(60)), LATER)
    assert moved is not None and moved.run_at == LATER + sec(60)
    assert moved.args == (1,) and moved.kwargs == {"a": 1}  # unchanged
    redone = store.jobs.update_pending(third, PendingChanges(queue="q2", args=("new",)), LATER)
    assert redone is not None and redone.queue == "q2" and redone.args == ("new",)
    got = claim(store, queues=("default",))
    assert got is not None and got.id == second.id
    assert claim(store, queues=("default",)) is None  # the first is not due any more
    got = claim(store, queues=("q2",))
    assert got is not None and got.id == third.id and got.args == ("new",)
    got = claim(store, now=LATER + sec(60))
    assert got is not None and got.id == first.id


def test_update_pending_of_kwargs_alone_keeps_the_args(store: Store) -> None:
    queued = add(store, job(args=(1, 2), kwargs={"a": 1}))[0]
    changed = store.jobs.update_pending(queued, PendingChanges(kwargs={"b": [2]}), LATER)
    assert changed is not None and changed.args == (1, 2) and changed.kwargs == {"b": [2]}


def test_update_pending_changes_only_pending_jobs(store: Store) -> None:
    queued = add(store, job())[0]
    running = claimed(store)
    assert store.jobs.update_pending(queued, PendingChanges(priority=2), LATER) is None
    assert store.jobs.get(queued.id) == running
    store.leases.settle(running, succeeded(running))
    done = store.jobs.get(queued.id)
    assert store.jobs.update_pending(queued, PendingChanges(priority=2), LATER) is None
    assert store.jobs.get(queued.id) == done


def test_update_pending_checks_the_payload_and_writes_nothing(store: Store) -> None:
    queued = add(store, job(args=(1,)))[0]
    with pytest.raises(SerializationError, match="argument 0"):
        store.jobs.update_pending(queued, PendingChanges(args=(object(),), priority=1), LATER)
    with pytest.raises(SerializationError, match="keyword argument 'x'"):
        store.jobs.update_pending(queued, PendingChanges(kwargs={"x": {1}}, priority=1), LATER)
    assert store.jobs.get(queued.id) == queued


# retry_finished ------------------------------------------------------------------------------------
def test_retry_finished_takes_an_ended_job_back_to_pending(store: Store) -> None:
    queued = add(store, job(max_attempts=1, dedupe_key="k"))[0]
    running = claimed(store)
    failed = store.leases.settle(running, raised(running))
    assert failed is not None and failed.status is FAILED
    assert (
        store.jobs.retry_finished(queued.id, COMPLETED, LATER + sec(1)) is None
    )  # not that status
    assert store.jobs.retry_finished(queued.id, CANCELLED, LATER + sec(1)) is None
    assert store.jobs.get(queued.id) == failed
    retried = store.jobs.retry_finished(queued.id, FAILED, LATER + sec(1))
    assert retried is not None and retried == store.jobs.get(queued.id)
    assert retried.status is PENDING and retried.attempts == 0
    assert retried.run_at == retried.updated_at == LATER + sec(1)
    assert retried.finished_at is None and retried.delete_at is None and retried.lease is None
    assert retried.result is None and retried.cancel_requested is False
    assert store.jobs.retry_finished(queued.id, FAILED, LATER + sec(2)) is None  # once
    [(holder, created)] = store.jobs.insert([job(dedupe_key="k")])  # the key is held again
    assert holder.id == queued.id and not created
    again = claimed(store, now=LATER + sec(1))
    assert again.id == queued.id and again.attempts == 1


def test_retry_finished_of_a_completed_or_cancelled_job(store: Store) -> None:
    done, dropped = add(store, job(), job())
    running = claimed(store)
    assert store.leases.settle(running, succeeded(running, result=3)) is not None
    assert store.jobs.cancel_pending(dropped.id, cancelled()) is not None
    marked = store.jobs.request_cancel(running.id, LATER)
    assert marked is None  # settled already
    retried = store.jobs.retry_finished(done.id, COMPLETED, LATER + sec(1))
    assert retried is not None and retried.status is PENDING and retried.result is None
    retried = store.jobs.retry_finished(dropped.id, CANCELLED, LATER + sec(1))
    assert retried is not None and retried.status is PENDING
    assert store.jobs.retry_finished("schedule:nothing", CANCELLED, LATER) is None
    assert sorted(ids([claim(store, now=LATER + sec(1)), claim(store, now=LATER + sec(1))])) == (
        sorted([done.id, dropped.id])
    )


def test_retry_finished_of_a_cancelled_schedule_restarts_it_now(store: Store) -> None:
    assert store.jobs.upsert_schedule(
        job(id="schedule:t", repeat={"every": 60.0}, scheduled_for=T0), T0
    )
    assert store.jobs.cancel_pending("schedule:t", cancelled()) is not None
    retried = store.jobs.retry_finished("schedule:t", CANCELLED, LATER + sec(1))
    assert retried is not None and retried.status is PENDING
    assert retried.run_at == retried.scheduled_for == LATER + sec(1)
    assert retried.repeat == {"every": 60.0}


def test_retry_finished_refuses_when_another_job_holds_the_key(store: Store) -> None:
    first = add(store, job(dedupe_key="k"))[0]
    ended = store.jobs.cancel_pending(first.id, cancelled())
    assert ended is not None and ended.status is CANCELLED
    second = add(store, job(dedupe_key="k"))[0]
    assert second.id != first.id
    with pytest.raises(JobStateError, match="held by another job"):
        store.jobs.retry_finished(first.id, CANCELLED, LATER)
    assert store.jobs.get(first.id) == ended
    assert store.jobs.cancel_pending(second.id, cancelled()) is not None
    retried = store.jobs.retry_finished(first.id, CANCELLED, LATER + sec(1))
    assert retried is not None and retried.status is PENDING
    [(holder, created)] = store.jobs.insert([job(dedupe_key="k")])
    assert holder.id == first.id and not created


def test_retry_finished_of_a_pending_scope_key(store: Store) -> None:
    first = add(store, job(dedupe_key="k", dedupe_scope="pending"))[0]
    running = claimed(store)
    second = add(store, job(dedupe_key="k", dedupe_scope="pending"))[0]  # waits behind it
    assert store.leases.settle(running, raised(running)) is not None
    with pytest.raises(JobStateError):
        store.jobs.retry_finished(first.id, FAILED, LATER)
    assert claimed(store).id == second.id  # the key is free once the second runs
    retried = store.jobs.retry_finished(first.id, FAILED, LATER + sec(1))
    assert retried is not None and retried.status is PENDING
    [(holder, created)] = store.jobs.insert([job(dedupe_key="k", dedupe_scope="pending")])
    assert holder.id == first.id and not created


# purge ------------------------------------------------------------------------------------------------
def test_purge_deletes_ended_jobs_by_status_age_and_task(store: Store) -> None:
    done, dropped, failed, other, waiting = add(
        store, job(priority=1), job(), job(priority=2, dedupe_key="k"), job("x"), job()
    )
    running = claimed(store)
    assert running.id == done.id
    assert store.leases.settle(running, succeeded(running, LATER + sec(10))) is not None
    assert store.jobs.cancel_pending(dropped.id, cancelled(LATER)) is not None
    running = claimed(store)
    assert running.id == failed.id
    assert store.leases.settle(running, raised(running, LATER + sec(20))) is not None
    running = claimed(store, tasks=("x",))
    assert store.leases.settle(running, succeeded(running, LATER + sec(5))) is not None
    still_running = claimed(store)
    assert still_running.id == waiting.id
    everything = [CANCELLED, COMPLETED, FAILED]

    assert store.jobs.purge([CANCELLED], LATER - sec(1), None) == 0  # not that old
    assert store.jobs.purge([PENDING, RUNNING], LATER + sec(60), None) == 0  # not ended
    assert store.jobs.purge(everything, LATER + sec(60), "nothing") == 0
    assert store.jobs.purge([COMPLETED], LATER + sec(9), "t") == 0
    assert store.jobs.purge([COMPLETED], LATER + sec(10), "t") == 1  # finished at the cutoff
    assert store.jobs.get(done.id) is None and store.jobs.get(other.id) is not None
    assert store.jobs.purge(everything, LATER + sec(60), "t") == 2
    assert store.jobs.purge(everything, LATER + sec(60), None) == 1
    assert ids(store.jobs.find(JobQuery(), limit=0)) == [waiting.id]
    assert store.jobs.counts() == {("t", RUNNING): 1}
    # The ids may be used again: nothing of the purged jobs is left.
    assert store.jobs.insert([job(dedupe_key="k")])[0][1] is True
    again = store.jobs.insert([job(id=done.id, priority=1)])
    assert again[0][1] is True and again[0][0].priority == 1
    got = claim(store)
    assert got is not None and got.id == done.id and got.priority == 1
