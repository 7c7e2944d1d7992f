"""settle_many after another write to a running job: every kind of write that can land
on a running job between its claim and its holder's batched settlement is kept, and the
record settle_many returns is the job as stored.

A store may compute the settled records instead of reading them back (MongoStore does,
fenced on the job being as claimed: ``updates.unchanged_since_claim``). These tests
prove that fence sees each such write, including one made within the millisecond of the
claim (``updated_at`` unchanged), made deterministic by fixed times.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

import pytest

from mongosched._core.records import JobRecord, JobStatus, Settlement
from mongosched.store import Store

from .helpers import LATER, T0, add, batch, cancelled, job, raised, sec, succeeded, token

DECLARED = "schedule:t"


@dataclass(frozen=True)
class Write:
    """A write another party (or the holder, for progress and slots) makes to a running
    job, and what the settled job must still show of it."""

    make: Callable[[Store, JobRecord, datetime], None]
    kept: Callable[[JobRecord], bool]
    repeating: bool = False


def _request_cancel(store: Store, running: JobRecord, now: datetime) -> None:
    assert store.jobs.request_cancel(running.id, now) is not None


def _cancel_many(store: Store, running: JobRecord, now: datetime) -> None:
    assert store.admin.cancel_many([running.id], cancelled(now)) == (0, 1)


def _progress(store: Store, running: JobRecord, now: datetime) -> None:
    assert store.leases.write_progress(running.id, token(running), 0.75, "three quarters", now)


def _link(store: Store, running: JobRecord, now: datetime) -> None:
    assert store.dependents.link_dependencies([running.id], now) == {running.id: JobStatus.RUNNING}


def _slot(store: Store, running: JobRecord, now: datetime) -> None:
    assert store.leases.record_slot(running.id, token(running), T0 + sec(30), now)


def _redeclare(store: Store, running: JobRecord, now: datetime) -> None:
    changed = job(id=DECLARED, repeat={"every": 60.0}, scheduled_for=T0, priority=2)
    assert not store.jobs.upsert_schedule(changed, now)


def _progressed(record: JobRecord) -> bool:
    return record.progress is not None and record.progress.value == 0.75


WRITES: dict[str, Write] = {
    "request_cancel": Write(_request_cancel, lambda r: r.status is JobStatus.CANCELLED),
    "cancel_many": Write(_cancel_many, lambda r: r.status is JobStatus.CANCELLED),
    "progress": Write(_progress, _progressed),
    # The job's previous attempt wrote progress at the same time: only the value differs.
    "progress_again": Write(_progress, _progressed),
    "link_dependencies": Write(_link, lambda r: r.has_dependents),
    "record_slot": Write(_slot, lambda r: r.last_run is not None, repeating=True),
    "upsert_schedule": Write(_redeclare, lambda r: r.priority == 2, repeating=True),
}

# The claim is at LATER (updated_at: LATER, in milliseconds). A write within the same
# millisecond leaves updated_at as claimed; one a second later changes it.
WHEN = {"same_ms": LATER + timedelta(microseconds=400), "later": LATER + sec(1)}
ENDINGS: dict[str, Callable[[JobRecord, datetime], Settlement]] = {
    "succeeded": lambda r, at: succeeded(r, at, result={"n": 1}),
    "raised": lambda r, at: raised(r, at),
}


def claimed_pair(store: Store, name: str) -> tuple[JobRecord, JobRecord]:
    """The job ``name``'s write goes to, and a bystander, both claimed in one batch at
    LATER (the target first)."""
    if WRITES[name].repeating:
        assert store.jobs.upsert_schedule(
            job(id=DECLARED, repeat={"every": 60.0}, scheduled_for=T0, priority=1), T0
        )
        add(store, job(priority=9))
    else:
        add(store, job(max_attempts=3, priority=1), job(priority=9))
    if name == "progress_again":  # a first attempt that wrote progress at WHEN, retried
        [first] = batch(store, 1)
        assert store.leases.write_progress(
            first.id, token(first), 0.25, "a quarter", WHEN["same_ms"]
        )
        retried = store.leases.settle(first, raised(first, LATER))
        assert retried is not None and retried.status is JobStatus.PENDING
    target, bystander = batch(store, 2)
    assert target.updated_at == LATER and bystander.priority == 9
    return target, bystander


@pytest.mark.parametrize("ending", ENDINGS)
@pytest.mark.parametrize("when", WHEN)
@pytest.mark.parametrize("name", WRITES)
def test_settle_many_keeps_a_write_made_since_the_claim(
    store: Store, name: str, when: str, ending: str
) -> None:
    """The write is kept (a cancel honoured, progress, dependents, a slot or a changed
    declaration kept) and each record settle_many returns is the job as stored, the
    bystander's too."""
    target, bystander = claimed_pair(store, name)
    WRITES[name].make(store, target, WHEN[when])
    at = LATER + sec(2)
    settle = ENDINGS[ending]
    results = store.claims.settle_many(
        [(target, settle(target, at)), (bystander, settle(bystander, at))]
    )
    assert all(isinstance(r, JobRecord) for r in results), results
    settled, other = results
    assert isinstance(settled, JobRecord) and isinstance(other, JobRecord)
    assert settled == store.jobs.get(target.id)
    assert other == store.jobs.get(bystander.id)
    assert settled.lease is None and settled.status is not JobStatus.RUNNING
    assert WRITES[name].kept(settled), settled


@pytest.mark.parametrize("when", WHEN)
def test_settle_many_of_a_cancelled_job_ends_it_as_settle_would(store: Store, when: str) -> None:
    """A cancel requested within the claim's millisecond is honoured by a batched
    settlement exactly as by a single one (the same job, claimed twice)."""
    add(store, job(max_attempts=3), job(max_attempts=3))
    one, two = batch(store, 2)
    for running in (one, two):
        assert store.jobs.request_cancel(running.id, WHEN[when]) is not None
    at = LATER + sec(2)
    [batched] = store.claims.settle_many([(one, succeeded(one, at, result="r"))])
    alone = store.leases.settle(two, succeeded(two, at, result="r"))
    assert isinstance(batched, JobRecord) and alone is not None
    assert batched == store.jobs.get(one.id)
    assert batched.status is alone.status is JobStatus.CANCELLED
    ignore = {"id", "args", "created_at"}
    fields = [f for f in JobRecord.__dataclass_fields__ if f not in ignore]
    assert {f: getattr(batched, f) for f in fields} == {f: getattr(alone, f) for f in fields}
