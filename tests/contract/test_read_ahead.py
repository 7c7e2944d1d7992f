"""Batched claims that read ahead (:class:`~mongosched.store.parts.ReadAhead`): under a
backlog, one read serves several claims, and what it kept never claims a job it should
not. On MongoDB (the wire stand-in and the server); memory:// takes ``ahead`` and reads
as it always does."""

from __future__ import annotations

from typing import Any

import pytest
from pymongo.errors import NetworkTimeout

from mongosched._core.records import JobQuery, JobStatus
from mongosched.store import Store
from mongosched.store.mongo import MongoStore
from mongosched.store.parts import ReadAhead

from .helpers import LATER, LEASE, add, as_stored, batch, cancelled, job, sec, succeeded
from .test_mongo_only import _watch


def claim(store: Store, ahead: ReadAhead | None, limit: int = 3, **options: Any) -> list[Any]:
    """A batched claim of task ``t`` (as a runner's dispatcher makes it): the args of
    the jobs claimed, each checked to be as stored."""
    got = claimed(store, ahead, limit, **options)
    as_stored(store, got)
    return [record.args[0] for record in got]


def claimed(store: Store, ahead: ReadAhead | None, limit: int = 3, **options: Any) -> list[Any]:
    options.setdefault("now", LATER)
    _, got = store.claims.settle_and_claim(
        [],
        owner="me",
        tasks=options.pop("tasks", ("t",)),
        queues=None,
        lease_duration=LEASE,
        limit=limit,
        ahead=ahead,
        **options,
    )
    return got


def test_one_read_serves_as_many_claims_as_it_read_batches(
    mongo_store: MongoStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    add(mongo_store, *[job(args=(n,)) for n in range(17)])
    ahead = ReadAhead()
    watched = _watch(monkeypatch, mongo_store)
    records = [claimed(mongo_store, ahead, now=LATER + sec(n / 100)) for n in range(6)]
    monkeypatch.undo()
    for got in records:
        as_stored(mongo_store, got)
    args = [[r.args[0] for r in got] for got in records]
    assert args == [[0, 1, 2], [3, 4, 5], [6, 7, 8], [9, 10, 11], [12, 13, 14], [15, 16]]
    # The first claim of a backlog reads its own batch; the next, coming soon after,
    # reads four batches; three claims spend what it kept; then a read again.
    assert watched.calls == [
        *["find", "update"],
        *["find", "update"],
        *["update"] * 3,
        *["find", "update"],
    ]


def test_claims_further_apart_than_the_kept_ones_last_do_not_read_ahead(
    mongo_store: MongoStore,
) -> None:
    add(mongo_store, *[job(args=(n,)) for n in range(12)])
    ahead = ReadAhead()
    for n in range(3):
        claim(mongo_store, ahead, now=LATER + n * ReadAhead.FOR)
        assert ahead.docs == []


def test_the_outcomes_ride_with_a_claim_from_kept_candidates(
    mongo_store: MongoStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    add(mongo_store, *[job(args=(n,)) for n in range(12)])
    ahead = ReadAhead()
    finished = claimed(mongo_store, ahead)
    assert claim(mongo_store, ahead, now=LATER + sec(0.01)) == [3, 4, 5]
    watched = _watch(monkeypatch, mongo_store)
    at = LATER + sec(0.02)
    settled, got = mongo_store.claims.settle_and_claim(
        [(r, succeeded(r, at)) for r in finished],
        owner="me",
        tasks=("t",),
        queues=None,
        now=at,
        lease_duration=LEASE,
        limit=3,
        ahead=ahead,
    )
    monkeypatch.undo()
    assert watched.calls == ["update"]
    assert [r.args[0] for r in got] == [6, 7, 8]
    for record in [*settled, *got]:
        assert record == mongo_store.jobs.get(record.id)  # type: ignore[union-attr]


def test_kept_candidates_another_runner_took_are_not_claimed_and_reading_ahead_pauses(
    mongo_store: MongoStore,
) -> None:
    add(mongo_store, *[job(args=(n,)) for n in range(24)])
    ahead = ReadAhead()
    assert claim(mongo_store, ahead) == [0, 1, 2]
    assert claim(mongo_store, ahead, now=LATER + sec(0.01)) == [3, 4, 5]  # keeps 6 on
    others = batch(mongo_store, 3, owner="other", now=LATER + sec(0.01))
    assert [r.args[0] for r in others] == [6, 7, 8]
    # The kept 6, 7 and 8 are the other runner's now: none is claimed twice.
    assert claim(mongo_store, ahead, now=LATER + sec(0.02)) == []
    for record in others:
        stored = mongo_store.jobs.get(record.id)
        assert stored is not None and stored.lease is not None
        assert stored.lease.owner == "other"
    assert ahead.docs == [] and ahead.paused_until == LATER + sec(0.02) + ReadAhead.PAUSE
    # Paused: each claim reads its own batch, and keeps nothing.
    assert claim(mongo_store, ahead, now=LATER + sec(0.03)) == [9, 10, 11]
    assert ahead.docs == []
    # Once the pause is over, claims read ahead again.
    resumed = LATER + sec(0.03) + ReadAhead.PAUSE
    assert claim(mongo_store, ahead, now=resumed) == [12, 13, 14]
    assert claim(mongo_store, ahead, now=resumed + sec(0.01)) == [15, 16, 17]
    assert [doc["args"][0] for doc in ahead.docs] == [18, 19, 20, 21, 22, 23]


def test_a_kept_candidate_changed_since_the_read_is_claimed_as_it_is_now(
    mongo_store: MongoStore,
) -> None:
    from mongosched._core.records import PendingChanges

    jobs = add(mongo_store, *[job(args=(n,)) for n in range(9)])
    ahead = ReadAhead()
    assert claim(mongo_store, ahead) == [0, 1, 2]
    assert claim(mongo_store, ahead, now=LATER + sec(0.01)) == [3, 4, 5]  # keeps 6, 7, 8
    assert mongo_store.jobs.update_pending(jobs[7], PendingChanges(priority=9), LATER)
    assert mongo_store.jobs.cancel_pending(jobs[8].id, cancelled(LATER)) is not None
    # The edited job is not claimed from what was read (it would run as it was): the
    # claim takes the rest, and the edited job waits for a read that sees it.
    assert claim(mongo_store, ahead, now=LATER + sec(0.02)) == [6]
    assert claim(mongo_store, ahead, now=LATER + sec(0.03)) == [7]
    assert mongo_store.jobs.get(jobs[8].id).status == "cancelled"  # type: ignore[union-attr]


@pytest.mark.parametrize("why", ["woken", "expired", "other tasks", "dropped"])
def test_a_job_ahead_in_line_since_the_read_is_claimed_once_the_kept_ones_lapse(
    mongo_store: MongoStore, why: str
) -> None:
    add(mongo_store, *[job(args=(n,)) for n in range(12)])
    ahead = ReadAhead()
    assert claim(mongo_store, ahead) == [0, 1, 2]
    read = LATER + sec(0.01)
    assert claim(mongo_store, ahead, now=read) == [3, 4, 5]  # keeps 6 to 11
    add(mongo_store, job(args=(100,), priority=1))  # ahead of every job kept
    now = read + sec(0.01)
    assert claim(mongo_store, ahead, now=now) == [6, 7, 8]  # within FOR: what was kept
    tasks: tuple[str, ...] = ("t",)
    if why == "woken":
        ahead.wake()
    elif why == "expired":
        now = read + ReadAhead.FOR
    elif why == "other tasks":
        tasks = ("t", "u")
    else:
        ahead.drop()
    assert claim(mongo_store, ahead, now=now, tasks=tasks) == [100, 9, 10]


def test_every_store_claims_the_same_with_a_read_ahead_it_is_told_of(store: Store) -> None:
    """Within the rules (a wake after each new job), a store that reads ahead claims
    what one that reads every time claims: memory:// (which ignores ``ahead``) and
    MongoDB."""
    add(store, *[job(args=(n,), priority=5 + n % 3) for n in range(10)])
    ahead = ReadAhead()
    got = [claim(store, ahead, now=LATER + sec(n / 100)) for n in range(2)]
    add(store, job(args=(100,), priority=1))
    ahead.wake()
    got += [claim(store, ahead, now=LATER + sec(n / 100)) for n in range(2, 5)]
    assert got == [[0, 3, 6], [9, 1, 4], [100, 7, 2], [5, 8], []]


class _LosesAnUpdateReply:
    """The job collection, but the next ``update`` command's reply is lost after the
    server applied it (a network error, as a dropped connection gives)."""

    def __init__(self, collection: Any) -> None:
        self.collection = collection
        self.lost = 0

    @property
    def database(self) -> Any:
        outer, database = self, self.collection.database

        class Commands:
            def command(self, command: Any, *args: Any, **kwargs: Any) -> Any:
                reply = database.command(command, *args, **kwargs)
                if isinstance(command, dict) and "update" in command and not outer.lost:
                    outer.lost += 1
                    raise NetworkTimeout("the reply was lost after the update applied")
                return reply

            def __getattr__(self, name: str) -> Any:
                return getattr(database, name)

        return Commands()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.collection, name)


def test_a_claim_from_kept_candidates_whose_reply_is_lost_claims_each_job_once(
    mongo_store: MongoStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    add(mongo_store, *[job(args=(n,)) for n in range(12)])
    ahead = ReadAhead()
    assert claim(mongo_store, ahead) == [0, 1, 2]
    assert claim(mongo_store, ahead, now=LATER + sec(0.01)) == [3, 4, 5]  # keeps 6 on
    losing = _LosesAnUpdateReply(mongo_store.connection.jobs)
    monkeypatch.setattr(type(mongo_store.connection), "jobs", property(lambda self: losing))
    got = claimed(mongo_store, ahead, now=LATER + sec(0.02))
    monkeypatch.undo()
    assert losing.lost == 1
    # The repeated write found them claimed already: read back by their tokens, each
    # is this claim's, once, and reading ahead goes on (nobody else took one).
    as_stored(mongo_store, got)
    assert [r.args[0] for r in got] == [6, 7, 8]
    assert ahead.paused_until is None
    assert claim(mongo_store, ahead, now=LATER + sec(0.03)) == [9, 10, 11]
    pending = mongo_store.jobs.find(JobQuery(statuses=(JobStatus.PENDING,)))
    assert pending == []
