"""The holder's writes (renew, record_slot, write_progress, settle), all fenced on the
lease token, and the reaper's (expired, reap)."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

import pytest

from mongosched._core.records import (
    ERRORS_KEPT,
    ErrorInfo,
    JobQuery,
    JobRecord,
    JobStatus,
    MissedSlots,
)
from mongosched.errors import SerializationError
from mongosched.store import Store
from tests.support.tasks import Unreadable

from .helpers import (
    LATER,
    LEASE,
    RETENTION,
    T0,
    add,
    claim,
    claimed,
    given_back,
    ids,
    job,
    lapsed,
    raised,
    sec,
    succeeded,
    token,
)

PENDING, RUNNING = JobStatus.PENDING, JobStatus.RUNNING


# renew, record_slot, write_progress --------------------------------------------------------------
def test_renew_extends_a_held_lease(store: Store) -> None:
    add(store, job())
    running = claimed(store)
    renewal = store.leases.renew(running.id, token(running), LATER + sec(10), LATER + sec(70))
    assert renewal.held is True and renewal.cancel_requested is False
    got = store.jobs.get(running.id)
    assert got is not None and got.lease is not None and got.status is RUNNING
    assert got.lease.until == LATER + sec(70) and got.lease.heartbeat_at == LATER + sec(10)
    assert got.lease.token == token(running) and got.lease.owner == running.lease.owner  # type: ignore[union-attr]


def test_renew_reports_a_cancel_request(store: Store) -> None:
    add(store, job())
    running = claimed(store)
    assert store.jobs.request_cancel(running.id, LATER) is not None
    renewal = store.leases.renew(running.id, token(running), LATER, LATER + sec(60))
    assert renewal.held and renewal.cancel_requested


def test_record_slot_and_write_progress_land_for_the_holder(store: Store) -> None:
    add(store, job())
    running = claimed(store)
    assert store.leases.record_slot(running.id, token(running), T0 + sec(5), LATER + sec(1)) is True
    assert (
        store.leases.write_progress(running.id, token(running), 0.25, None, LATER + sec(2)) is True
    )
    got = store.jobs.get(running.id)
    assert got is not None and got.scheduled_for == T0 + sec(5)
    assert got.progress is not None and got.progress.value == 0.25
    assert got.progress.message is None and got.progress.at == LATER + sec(2)
    assert store.leases.write_progress(running.id, token(running), None, "almost", LATER + sec(3))
    got = store.jobs.get(running.id)
    assert got is not None and got.progress is not None
    assert (got.progress.value, got.progress.message) == (None, "almost")
    assert got.status is RUNNING and got.lease == running.lease


def test_writes_with_a_wrong_or_old_token_change_nothing(store: Store) -> None:
    add(store, job(max_attempts=3))
    old = claimed(store)
    # The lease runs out; the reaper puts the job back and another runner takes it.
    assert store.leases.reap(old, LATER + sec(31), lapsed(old, LATER + sec(31))) is not None
    new = claimed(store, now=LATER + sec(32), owner="other")
    assert new.attempts == 2 and new.lease is not None
    for stale in (old, replace(new, lease=replace(new.lease, token="not-mine"))):
        at = LATER + sec(33)
        assert store.leases.settle(stale, succeeded(stale, at, result="stale")) is None
        assert store.leases.settle(stale, raised(stale, at)) is None
        assert store.leases.renew(stale.id, token(stale), at, at + sec(30)).held is False
        assert store.leases.write_progress(stale.id, token(stale), 0.5, "half", at) is False
        assert store.leases.record_slot(stale.id, token(stale), at, at) is False
        assert store.jobs.get(new.id) == new
    settled = store.leases.settle(new, succeeded(new, LATER + sec(34), result={"ok": True}))
    assert settled is not None and settled.status is JobStatus.COMPLETED
    # Once settled, the token holds nothing.
    at = LATER + sec(35)
    assert store.leases.settle(new, succeeded(new, at)) is None
    assert store.leases.renew(new.id, token(new), at, at + sec(30)).held is False
    assert store.leases.write_progress(new.id, token(new), 1.0, "done", at) is False
    assert store.leases.record_slot(new.id, token(new), at, at) is False
    assert store.jobs.get(new.id) == settled


def test_fenced_writes_to_a_missing_job_report_not_held(store: Store) -> None:
    _, other = add(store, job(priority=1), job())
    running = claimed(store)
    assert store.leases.settle(other, succeeded(other)) is None  # never claimed: no lease to hold
    assert store.leases.reap(other, LATER + sec(60), lapsed(other, LATER + sec(60))) is None
    assert store.jobs.get(other.id) == other
    missing = replace(running, id="schedule:nothing")
    assert store.leases.renew(missing.id, token(running), LATER, LATER + sec(30)).held is False
    assert store.leases.write_progress(missing.id, token(running), 0.5, None, LATER) is False
    assert store.leases.record_slot(missing.id, token(running), LATER, LATER) is False
    assert store.leases.settle(missing, succeeded(missing)) is None
    assert store.jobs.get(running.id) == running


# settle ------------------------------------------------------------------------------------------
def test_settle_final_records_the_end_and_frees_the_keys(store: Store) -> None:
    add(store, job(dedupe_key="k"), job(dedupe_key="p", dedupe_scope="pending"))
    first = claimed(store)
    done = store.leases.settle(first, succeeded(first, LATER + sec(5), result={"rows": 3}))
    assert done is not None and done == store.jobs.get(first.id)  # the job after the write
    assert done.status is JobStatus.COMPLETED and done.lease is None
    assert done.result == {"rows": 3} and done.error is None and done.attempts == 1
    assert done.finished_at == done.updated_at == LATER + sec(5)
    assert done.delete_at == LATER + sec(5) + RETENTION.completed  # type: ignore[operator]
    assert done.started_at == first.started_at and done.dedupe_key == "k"
    second = claimed(store)
    failed = store.leases.settle(second, raised(second, LATER + sec(6), ValueError("bad input")))
    assert failed is not None and failed == store.jobs.get(second.id)
    assert failed.status is JobStatus.FAILED and failed.finished_at == LATER + sec(6)
    assert failed.delete_at == LATER + sec(6) + RETENTION.failed  # type: ignore[operator]
    assert failed.error is not None and failed.error.type == "ValueError"
    assert failed.error.message == "bad input" and failed.error.module == "builtins"
    assert failed.error.traceback is not None and failed.result is None
    # Both keys are free again.
    added = store.jobs.insert([job(dedupe_key="k"), job(dedupe_key="p", dedupe_scope="pending")])
    assert [created for _, created in added] == [True, True]
    assert claim(store, now=LATER + sec(7)) is not None


def test_settle_back_to_pending_re_enters_the_claims(store: Store) -> None:
    queued = add(store, job(max_attempts=3, dedupe_key="k"))[0]
    running = claimed(store)
    back = store.leases.settle(running, raised(running, LATER + sec(1), KeyError("x")))
    assert back is not None and back == store.jobs.get(queued.id)
    assert back.status is PENDING and back.lease is None and back.attempts == 1
    assert back.run_at == back.updated_at == LATER + sec(1) and back.finished_at is None
    assert back.error is not None and back.error.type == "KeyError"
    assert claim(store, now=LATER) is None  # not due before its new due time
    [(holder, created)] = store.jobs.insert([job(dedupe_key="k")])
    assert holder.id == queued.id and not created
    again = claimed(store, now=LATER + sec(1))
    assert again.id == queued.id and again.attempts == 2 and again.error == back.error


def test_given_back_keeps_its_place_in_line(store: Store) -> None:
    first, second = add(store, job(at=T0 - sec(1)), job(at=T0))
    running = claimed(store)
    assert running.id == first.id
    back = store.leases.settle(running, given_back(running, LATER + sec(1)))
    assert back is not None and back.run_at == T0 - sec(1) and back.attempts == 0
    assert ids([claim(store), claim(store)]) == [first.id, second.id]


def test_back_to_pending_the_job_holds_its_pending_scope_key_again(store: Store) -> None:
    queued = add(store, job(max_attempts=3, dedupe_key="k", dedupe_scope="pending"))[0]
    running = claimed(store)
    back = store.leases.settle(running, raised(running))
    assert back is not None and back.status is PENDING
    assert back.dedupe_key == "k" and back.dedupe_scope == "pending"
    [(holder, created)] = store.jobs.insert([job(dedupe_key="k", dedupe_scope="pending")])
    assert holder.id == queued.id and not created


def test_back_to_pending_without_the_key_another_job_took_meanwhile(store: Store) -> None:
    first = add(store, job(max_attempts=3, dedupe_key="k", dedupe_scope="pending"))[0]
    running = claimed(store)
    [(second, created)] = store.jobs.insert([job(dedupe_key="k", dedupe_scope="pending")])
    assert created
    # The first goes back to pending while the second holds the key: no error, and
    # the second still holds it.
    back = store.leases.settle(running, raised(running))
    assert back is not None and back.status is PENDING and back.id == first.id
    assert back == store.jobs.get(first.id)
    [(holder, created)] = store.jobs.insert([job(dedupe_key="k", dedupe_scope="pending")])
    assert holder.id == second.id and not created
    assert store.jobs.count(JobQuery(statuses=(PENDING,))) == 2
    # Both run; once the second is claimed, the key is free (the first never took it).
    assert {claimed(store).id, claimed(store).id} == {first.id, second.id}
    [(third, created)] = store.jobs.insert([job(dedupe_key="k", dedupe_scope="pending")])
    assert created and third.id not in (first.id, second.id)


def test_a_result_bson_cannot_hold_raises_and_writes_nothing(store: Store) -> None:
    add(store, job())
    running = claimed(store)
    with pytest.raises(SerializationError, match="return value"):
        store.leases.settle(running, succeeded(running, result=object()))
    with pytest.raises(SerializationError, match="return value"):
        store.leases.settle(running, succeeded(running, result={"rows": {1, 2}}))
    # Encoding a value runs its own code: whatever that raises is the value's fault.
    with pytest.raises(SerializationError, match="task 't': return value"):
        store.leases.settle(running, succeeded(running, result=Unreadable()))
    assert store.jobs.get(running.id) == running
    error = ErrorInfo("TypeError", "bad result")
    failed = store.leases.settle(
        running, replace(succeeded(running), status=JobStatus.FAILED, error=error)
    )
    assert failed is not None and failed.error == error and failed.status is JobStatus.FAILED


def test_a_repeating_job_goes_on_to_its_next_slot(store: Store) -> None:
    assert store.jobs.upsert_schedule(
        job(id="schedule:t", repeat={"every": 60.0}, scheduled_for=T0), T0
    )
    running = claimed(store)
    assert store.leases.record_slot(running.id, token(running), T0, LATER)
    nxt = store.leases.settle(running, succeeded(running, LATER + sec(1), result=7))
    assert nxt is not None and nxt == store.jobs.get("schedule:t")
    assert nxt.status is PENDING and nxt.attempts == 0 and nxt.result == 7
    assert nxt.run_at == nxt.scheduled_for == T0 + sec(60)
    assert nxt.last_run is not None and nxt.last_run.slot == T0
    assert nxt.last_run.status is JobStatus.COMPLETED
    assert nxt.last_run.finished_at == LATER + sec(1) and nxt.last_run.error is None
    assert nxt.finished_at is None and nxt.delete_at is None
    again = claimed(store, now=T0 + sec(60))
    assert again.id == "schedule:t" and again.attempts == 1 and again.last_run == nxt.last_run


def test_a_repeating_job_keeps_its_failures_in_a_row_and_its_missed_slots(store: Store) -> None:
    rule = {"every": 60.0}
    assert store.jobs.upsert_schedule(job(id="schedule:t", repeat=rule, scheduled_for=T0), T0)
    running = claimed(store, now=T0)
    ended = T0 + sec(150.0005)  # two slots came due while it ran: dropped (overlap: skip)
    settlement = raised(running, ended, RuntimeError("down"))
    assert settlement.missed is not None and settlement.last_run is not None
    nxt = store.leases.settle(running, settlement)
    assert nxt is not None and nxt == store.jobs.get("schedule:t")
    assert nxt.last_run is not None and nxt.last_run.failures == 1
    assert nxt.last_run.status is JobStatus.FAILED
    assert nxt.missed == MissedSlots(
        count=2, last_slot=T0 + sec(120), reason="overlap", at=T0 + sec(150)
    )
    assert nxt.scheduled_for == T0 + sec(180)
    again = claimed(store, now=T0 + sec(180))
    later = store.leases.settle(again, raised(again, T0 + sec(181), RuntimeError("down")))
    assert later is not None and later == store.jobs.get("schedule:t")
    assert later.last_run is not None and later.last_run.failures == 2
    assert later.missed == nxt.missed  # none more: kept as it was


def test_a_run_of_a_slot_keeps_its_slot(store: Store) -> None:
    [stored] = add(store, job(scheduled_for=T0 - sec(3600)))
    assert stored.scheduled_for == T0 - sec(3600) and stored.repeat is None
    running = claimed(store)
    assert running.id == stored.id and running.scheduled_for == T0 - sec(3600)
    assert store.jobs.get(stored.id) == running


# expired and reap --------------------------------------------------------------------------------
def test_reap_only_after_expiry_and_a_renewal_that_lands_first_wins(store: Store) -> None:
    add(store, job(max_attempts=2))
    running = claimed(store)
    assert running.lease is not None
    until = running.lease.until
    assert store.leases.leases_expired(until) == []  # until < now, strictly
    assert store.leases.reap(running, until, lapsed(running, until)) is None
    [seen] = store.leases.leases_expired(until + sec(1))
    assert seen == running
    # A heartbeat lands between the reaper's read and its write.
    renewed = store.leases.renew(running.id, token(running), until, until + sec(60))
    assert renewed.held is True
    assert store.leases.reap(seen, until + sec(1), lapsed(seen, until + sec(1))) is None
    assert store.leases.leases_expired(until + sec(1)) == []
    got = store.jobs.get(running.id)
    assert got is not None and got.status is RUNNING and got.lease is not None
    assert got.lease.until == until + sec(60)
    [seen] = store.leases.leases_expired(until + sec(61))
    decision = lapsed(seen, until + sec(61))
    reaped = store.leases.reap(seen, until + sec(61), decision)
    assert reaped is not None and reaped == store.jobs.get(running.id)
    assert reaped.status is PENDING and reaped.lease is None and reaped.attempts == 1
    assert reaped.error is not None and reaped.error == decision.error
    assert store.leases.leases_expired(until + sec(61)) == []
    assert store.leases.reap(seen, until + sec(62), lapsed(seen, until + sec(62))) is None  # done
    assert store.leases.renew(running.id, token(running), until, until + sec(60)).held is False


def test_a_late_heartbeat_before_the_reaper_keeps_the_lease(store: Store) -> None:
    add(store, job())
    running = claimed(store)
    late = LATER + sec(40)  # the lease ran out at LATER + 30 s; nobody reaped it yet
    assert [r.id for r in store.leases.leases_expired(late)] == [running.id]
    assert store.leases.renew(running.id, token(running), late, late + sec(30)).held is True
    assert store.leases.leases_expired(late) == []
    assert store.leases.reap(running, late, lapsed(running, late)) is None
    done = store.leases.settle(running, succeeded(running, late + sec(1)))
    assert done is not None and done.status is JobStatus.COMPLETED


def test_reaping_the_last_attempt_fails_the_job(store: Store) -> None:
    add(store, job(dedupe_key="k"))
    running = claimed(store)
    at = LATER + sec(31)
    decision = lapsed(running, at)
    reaped = store.leases.reap(running, at, decision)
    assert reaped is not None and reaped.status is JobStatus.FAILED
    assert reaped.finished_at == at and reaped.delete_at == at + RETENTION.failed  # type: ignore[operator]
    assert reaped.error is not None and reaped.error == decision.error
    assert store.jobs.insert([job(dedupe_key="k")])[0][1] is True  # the key is free


def test_reap_after_the_holder_settled_does_nothing(store: Store) -> None:
    add(store, job())
    running = claimed(store)
    [seen] = store.leases.leases_expired(LATER + sec(31))
    done = store.leases.settle(running, succeeded(running, LATER + sec(31)))
    assert done is not None
    assert store.leases.reap(seen, LATER + sec(32), lapsed(seen, LATER + sec(32))) is None
    assert store.jobs.get(running.id) == done


def test_expired_lists_oldest_lease_first_up_to_the_limit(store: Store) -> None:
    add(store, *[job() for _ in range(6)])
    leases = [claimed(store, lease=n) for n in (30, 10, 20, 50, 40)]
    expired = store.leases.leases_expired(LATER + sec(35), limit=2)
    assert [r.lease and r.lease.until for r in expired] == [LATER + sec(10), LATER + sec(20)]
    assert ids(store.leases.leases_expired(LATER + sec(35))) == [
        leases[1].id,
        leases[2].id,
        leases[0].id,
    ]
    assert len(store.leases.leases_expired(LATER + sec(60), limit=0)) == 5
    done = store.leases.settle(leases[1], succeeded(leases[1]))  # settled: no longer running
    assert done is not None
    assert ids(store.leases.leases_expired(LATER + sec(35))) == [leases[2].id, leases[0].id]
    assert all(r.status is RUNNING for r in store.leases.leases_expired(LATER + sec(60)))


def test_times_are_compared_as_stored_in_whole_milliseconds(store: Store) -> None:
    add(store, job(at=T0 + timedelta(microseconds=1900)))  # due at T0 + 1 ms
    assert claim(store, now=T0 + timedelta(microseconds=999)) is None
    running = claimed(store, now=T0 + timedelta(microseconds=1000))
    assert running.lease is not None
    until = running.lease.until
    within = until + timedelta(microseconds=500)  # the same millisecond as until
    assert store.leases.leases_expired(within) == []
    assert store.leases.reap(running, within, lapsed(running, within)) is None
    store.permits.ensure_permits("t", 1)
    assert store.permits.take_permit("t", 1, "a", running.id, "me", T0, until)
    assert store.permits.permit_holders("t", within) == 1
    assert not store.permits.take_permit("t", 1, "b", running.id, "me", within, until + sec(30))
    after = until + timedelta(milliseconds=1)
    assert ids(store.leases.leases_expired(after)) == [running.id]
    assert store.permits.permit_holders("t", after) == 0
    assert store.permits.take_permit("t", 1, "b", running.id, "me", after, until + sec(30))


# the errors of each attempt ----------------------------------------------------------------------
def test_each_failed_attempt_keeps_its_error_the_last_few_only(store: Store) -> None:
    """A job keeps the error of each attempt that failed (raised, or lost its lease), in
    order, up to ERRORS_KEPT; a claim given back unrun or a success adds none. What
    settle returns is what is stored, on each write path (settle, reap, settle_many)."""
    attempts = ERRORS_KEPT + 2
    queued = add(store, job(max_attempts=attempts))[0]
    assert queued.errors == ()
    at = LATER
    for n in range(1, attempts + 1):
        running = claimed(store, now=at)
        if n == 2:  # given back unrun: no error of its own
            back = store.leases.settle(running, given_back(running, at))
            assert back is not None and back.errors == store.jobs.get(queued.id).errors  # type: ignore[union-attr]
            running = claimed(store, now=at)
        if n == 3:
            at += sec(LEASE + 1)
            done = store.leases.reap(running, at, lapsed(running, at))
        elif n == 4:
            (done,) = store.claims.settle_many([(running, raised(running, at, KeyError(n)))])
        else:
            done = store.leases.settle(running, raised(running, at, ValueError(f"attempt {n}")))
        assert isinstance(done, JobRecord) and done == store.jobs.get(queued.id)
        at += sec(1)
    errors = done.errors
    assert len(errors) == ERRORS_KEPT and done.status is JobStatus.FAILED
    assert [e.attempt for e in errors] == list(range(3, attempts + 1))
    assert errors[0].error.type == "LeaseLost" and errors[1].error.type == "KeyError"
    assert errors[-1].error.message == f"attempt {attempts}" and errors[-1].error == done.error
    assert errors[-1].at == done.finished_at and errors[-1].error.traceback
    assert all(a.at < b.at for a, b in zip(errors, errors[1:], strict=False))
