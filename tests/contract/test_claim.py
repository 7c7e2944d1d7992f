"""claim: which job, under which lease, and what it does to dedupe keys."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any

import pytest

from mongosched._core.records import JobStatus, PendingChanges
from mongosched.store import Store

from .helpers import LATER, T0, add, claim, claimed, given_back, ids, job, sec, succeeded


def test_claim_order_is_priority_then_due_time_then_first_in(store: Store) -> None:
    late_low = add(store, job(priority=5, at=T0 - sec(10)))[0]
    high_now = add(store, job(priority=1, at=T0))[0]
    high_early_1, high_early_2, high_early_3 = add(
        store,
        job(priority=1, at=T0 - sec(5)),
        job(priority=1, at=T0 - sec(5)),
        job(priority=1, at=T0 - sec(5)),
    )
    add(store, job(priority=0, at=LATER + sec(1)))  # not due
    order = [claim(store) for _ in range(6)]
    assert ids(order) == [
        high_early_1.id,
        high_early_2.id,
        high_early_3.id,
        high_now.id,
        late_low.id,
        None,
    ]


def test_a_fractional_priority_sorts_between_whole_ones_one_by_one_and_in_batches(
    store: Store,
) -> None:
    """What the Django tasks backend writes: each of Django's priorities in its place."""
    priorities = [5, 4.96, 1.04, 9.95, 4, 1, 5.05, 1.8]
    made = add(store, *[job(priority=p, at=T0) for p in priorities])
    first_two = [claim(store), claim(store)]
    rest = store.claims.claim_batch(
        owner="w", tasks=["t"], queues=None, now=LATER, lease_duration=30.0, limit=10
    )
    by_id = {j.id: p for j, p in zip(made, priorities, strict=True)}
    order = [by_id[c.id] for c in [*first_two, *rest] if c is not None]
    assert order == sorted(priorities)


def test_the_order_holds_across_the_listed_tasks_and_queues(store: Store) -> None:
    late, early, urgent = add(
        store, job("a", queue="x", at=T0), job("b", queue="y", at=T0 - sec(5)), job("c", priority=1)
    )
    order = [claim(store, tasks=("a", "b", "c"), queues=("x", "y", "default")) for _ in range(4)]
    assert ids(order) == [urgent.id, early.id, late.id, None]


def test_first_in_first_out_within_the_listed_queues(store: Store) -> None:
    first, _, second, third = add(
        store, job(queue="a"), job(queue="c"), job(queue="a"), job(queue="a")
    )
    order = [claim(store, queues=("a", "b")) for _ in range(4)]
    assert ids(order) == [first.id, second.id, third.id, None]


def test_claim_takes_only_due_jobs_of_the_listed_tasks_and_queues(store: Store) -> None:
    other_task, other_queue, mine = add(
        store, job("other", priority=1), job(queue="q2", priority=1), job(queue="q1")
    )
    future = add(store, job(at=LATER + sec(60)))[0]
    assert claim(store, tasks=()) is None
    assert claim(store, tasks=("nothing",)) is None
    assert claim(store, queues=()) is None
    assert claim(store, queues=("nowhere",)) is None
    got = claim(store, queues=("q1",))
    assert got is not None and got.id == mine.id
    assert claim(store, queues=("q1",)) is None
    got = claim(store, queues=None)  # every queue
    assert got is not None and got.id == other_queue.id
    assert claim(store) is None
    assert claim(store, now=LATER + sec(59)) is None
    got = claim(store, tasks=("nothing", "other"), queues=("default",))
    assert got is not None and got.id == other_task.id
    got = claim(store, now=LATER + sec(60))  # due at exactly now counts
    assert got is not None and got.id == future.id


def test_claim_by_id_takes_that_pending_job_due_or_not(store: Store) -> None:
    future, other_task = add(store, job(queue="q", at=LATER + sec(3600)), job("other"))
    assert claim(store, job_id=other_task.id) is None  # not one of the listed tasks
    got = claim(store, queues=("nowhere",), job_id=future.id)  # queues do not matter
    assert got is not None and got.id == future.id and got.status is JobStatus.RUNNING
    assert claim(store, job_id=future.id) is None  # no longer pending
    assert claim(store, tasks=("other",), job_id="schedule:nothing") is None
    got = claim(store, tasks=("other",), job_id=other_task.id)
    assert got is not None and got.id == other_task.id


def test_claim_starts_a_lease_and_counts_the_attempt(store: Store) -> None:
    queued = add(store, job(attempts=2, max_attempts=5, args=(1,), kwargs={"a": [2]}))[0]
    now = LATER + timedelta(microseconds=1500)
    got = claim(store, now=now, owner="worker-1", lease=30)
    assert got is not None and got.id == queued.id
    assert got.status is JobStatus.RUNNING and got.attempts == 3 and got.max_attempts == 5
    assert got.args == (1,) and got.kwargs == {"a": [2]}
    assert got.lease is not None and got.lease.owner == "worker-1"
    assert isinstance(got.lease.token, str) and len(got.lease.token) >= 16
    assert got.lease.until == LATER + sec(30.001)
    assert got.started_at == got.updated_at == got.lease.heartbeat_at == LATER + sec(0.001)
    assert got.cancel_requested is False and got.finished_at is None
    assert store.jobs.get(queued.id) == got


def test_each_claim_gets_a_fresh_token_and_attempts_add_up(store: Store) -> None:
    add(store, job(max_attempts=5))
    first = claimed(store)
    back = store.leases.settle(first, given_back(first))  # uncounted
    assert back is not None and back.status is JobStatus.PENDING and back.attempts == 0
    second = claimed(store)
    assert second.attempts == 1 and second.lease != first.lease
    assert first.lease is not None and second.lease is not None
    assert second.lease.token != first.lease.token


def test_claim_frees_a_pending_scope_key_and_keeps_an_active_one(store: Store) -> None:
    waiting, active = add(
        store,
        job(dedupe_key="k", dedupe_scope="pending", priority=1),
        job(dedupe_key="k", dedupe_scope="active", priority=2),
    )
    running = claimed(store)
    assert running.id == waiting.id
    assert running.dedupe_key == "k" and running.dedupe_scope == "pending"
    [(new, created)] = store.jobs.insert([job(dedupe_key="k", dedupe_scope="pending")])
    assert created and new.id != waiting.id
    running = claimed(store)
    assert running.id == active.id
    [(holder, created)] = store.jobs.insert([job(dedupe_key="k", dedupe_scope="active")])
    assert holder.id == active.id and not created


def test_a_settled_job_is_not_claimed_again(store: Store) -> None:
    add(store, job())
    running = claimed(store)
    assert store.leases.settle(running, succeeded(running)) is not None
    assert claim(store, now=LATER + sec(3600)) is None
    assert claim(store, job_id=running.id) is None


# Ranked jobs: aging and fair shares (mongosched._core.ranks) -----------------------------------
def claim_ranked(store: Store, now: datetime, ranked: tuple[str, ...] = ("aged", "fair")) -> Any:
    """Claim one job of tasks ``t``, ``aged`` and ``fair`` (the last two ranked)."""
    return store.claims.claim(
        owner="me",
        tasks=("t", *ranked),
        queues=None,
        now=now,
        lease_duration=30,
        ranked=ranked,
    )


def test_an_aging_job_rises_one_level_per_interval(store: Store) -> None:
    """A priority-9 job aging a level a minute, against priority-1 and -3 work."""
    minutes = [T0 + timedelta(minutes=n) for n in range(10)]
    old = add(store, job("aged", priority=9, aging=60.0))[0]
    assert old.rank is not None and old.aging == 60.0
    # At 7 minutes it is at level 2: after a priority-1 job, before a priority-3 one.
    urgent, normal = add(store, job(priority=1, at=minutes[7]), job(priority=3, at=minutes[7]))
    assert ids([claim_ranked(store, minutes[7])]) == [urgent.id]
    assert ids([claim_ranked(store, minutes[7])]) == [old.id]
    # At level 1 it comes before priority-1 work due after it reached level 1 ... and
    # a priority-9 job of the same task waits as it did.
    waiting, newer = add(
        store, job("aged", priority=9, at=minutes[1], aging=60.0), job(priority=1, at=minutes[9])
    )
    assert ids([claim_ranked(store, minutes[9])]) == [waiting.id]  # at level 1 since minute 9
    assert ids([claim_ranked(store, minutes[9])]) == [newer.id]
    assert ids([claim_ranked(store, minutes[9])]) == [normal.id]


def test_an_aging_job_not_yet_due_is_not_claimed(store: Store) -> None:
    add(store, job("aged", priority=1, at=LATER + sec(1), aging=60.0))
    plain = add(store, job(priority=9))[0]
    assert ids([claim_ranked(store, LATER), claim_ranked(store, LATER)]) == [plain.id, None]


@pytest.mark.parametrize("how", ["one by one", "in a batch"])
def test_aging_jobs_of_one_rank_are_claimed_by_due_time_on_every_store(
    store: Store, how: str
) -> None:
    """Two jobs of an aging task made together at priority 5 share a rank, which an
    edit of one's priority does not move (it keeps its place in line): equal ranks are
    taken by due time, on every store. MongoDB took them in the order of its read (no
    due time in the ranked sort), and its merge reordered them by the rounding of
    their effective priorities, computed from each one's priority (found by the
    model's batched claims)."""
    early, late = add(
        store,
        job("aged", priority=5, at=T0, aging=60.0),
        job("aged", priority=5, at=T0, aging=60.0),
    )
    edited = store.jobs.update_pending(early, PendingChanges(priority=1, run_at=T0 + sec(60)), T0)
    assert edited is not None and edited.rank == late.rank
    now = T0 + sec(1190)  # where the two priorities round their effective ones apart
    if how == "one by one":
        got = [claim_ranked(store, now, ("aged",)), claim_ranked(store, now, ("aged",))]
    else:
        got = store.claims.claim_batch(
            owner="me",
            tasks=("t", "aged"),
            queues=None,
            now=now,
            lease_duration=30,
            limit=3,
            ranked=("aged",),
        )
    assert ids(got) == [late.id, early.id]


def test_fair_keys_take_turns_whatever_the_backlog(store: Store) -> None:
    """Tenant A's 100 jobs, then tenant B's 5: B's are taken every other claim."""
    a = add(store, *[job("fair", fair_key="A") for _ in range(100)])
    b = add(store, *[job("fair", fair_key="B") for _ in range(5)])
    assert all(r.rank is not None for r in a + b)
    order = [claim_ranked(store, LATER).fair_key for _ in range(12)]
    assert order == ["A", "B"] * 5 + ["A", "A"]


def test_fair_weights_set_the_share_in_batches_too(store: Store) -> None:
    add(store, *[job("fair", fair_key="A", fair_weight=3.0) for _ in range(60)])
    add(store, *[job("fair", fair_key="B") for _ in range(60)])
    keys = [
        r.fair_key
        for r in store.claims.claim_batch(
            owner="me",
            tasks=("fair",),
            queues=None,
            now=LATER,
            lease_duration=30,
            limit=40,
            ranked=("fair",),
        )
    ]
    assert (keys.count("A"), keys.count("B")) == (30, 10)


def test_a_new_fair_key_comes_next_after_part_of_the_backlog_ran(store: Store) -> None:
    add(store, *[job("fair", fair_key="A") for _ in range(50)])
    for _ in range(20):
        assert claim_ranked(store, LATER).fair_key == "A"
    late = LATER + sec(60)
    b = [replace(job("fair", at=late, fair_key="B"), created_at=late) for _ in range(3)]
    add(store, *b)
    order = [claim_ranked(store, late).fair_key for _ in range(6)]
    assert order == ["A", "B", "A", "B", "A", "B"] or order == ["B", "A", "B", "A", "B", "A"]


def claim_fair(store: Store, now: datetime, queues: tuple[str, ...] | None = None) -> Any:
    return store.claims.claim(
        owner="me", tasks=("fair",), queues=queues, now=now, lease_duration=30, ranked=("fair",)
    )


def test_a_delayed_fair_job_takes_its_turn_when_it_comes_due(store: Store) -> None:
    """Issue 32 #9: tenant B's job scheduled 3 s ahead came after A's whole backlog
    (its delay counted as 3,000 turns); when due it comes next."""
    add(store, *[job("fair", fair_key="A") for _ in range(300)])
    add(store, job("fair", at=T0 + sec(3), fair_key="B"))
    assert [claim_fair(store, T0).fair_key for _ in range(3)] == ["A"] * 3  # B not due
    order = [claim_fair(store, T0 + sec(3)).fair_key for _ in range(2)]
    assert "B" in order, order


def test_a_job_nobody_claims_does_not_hold_the_fair_clock_back(store: Store) -> None:
    """Issue 32 #10: a pending job in a queue no runner serves (or held back by a long
    retry delay) stayed the fair head: keys that ran since were placed by their own
    past starts, and B, back after its 20 jobs ran, came after A's 20 new ones."""
    add(store, job("fair", queue="unserved", fair_key="X"))
    add(store, *[job("fair", fair_key="B") for _ in range(20)])
    for _ in range(20):
        assert claim_fair(store, LATER, ("default",)).fair_key == "B"
    late = LATER + sec(60)
    add(store, *[replace(job("fair", at=late, fair_key="A"), created_at=late) for _ in range(20)])
    add(store, replace(job("fair", at=late, fair_key="B"), created_at=late))
    order = [claim_fair(store, late, ("default",)).fair_key for _ in range(3)]
    assert "B" in order, order  # A's first shares the turn of B's last claimed start


def test_aged_and_fair_jobs_are_merged_by_effective_priority(store: Store) -> None:
    """Issue 32 #11: a fair job at priority 1 against an aged job at effective
    priority -3 (priority 5, waited 8 minutes aging a level a minute): the aged one
    first, on every store (MongoDB merged them by raw rank)."""
    fair, aged = add(
        store,
        job("fair", priority=1, at=T0 - timedelta(minutes=10), fair_key="A"),
        job("aged", priority=5, at=T0 - timedelta(minutes=8), aging=60.0),
    )
    assert ids([claim_ranked(store, T0), claim_ranked(store, T0)]) == [aged.id, fair.id]


def test_a_priority_edit_of_the_fair_head_does_not_move_a_new_key(store: Store) -> None:
    """Issue 32 #12: memory:// derived the head's fair start from its edited
    priority (four levels down: a new key's jobs then started four levels early and
    took every turn); the start is stored, and the keys take turns."""
    backlog = add(store, *[job("fair", priority=5, fair_key="A") for _ in range(30)])
    assert store.jobs.update_pending(backlog[0], PendingChanges(priority=9), T0) is not None
    add(store, *[job("fair", priority=5, fair_key="B") for _ in range(5)])
    order = [claim_fair(store, LATER).fair_key for _ in range(6)]
    assert order.count("B") == 3, order


def test_delayed_fair_jobs_take_turns_when_they_come_due(store: Store) -> None:
    """A key's batch due later takes its start when it comes due: it takes turns with
    the backlog then (a start from its scheduling would have let it take every turn
    it missed), and while not due it sorts after the due jobs."""
    add(store, *[job("fair", fair_key="A") for _ in range(100)])
    add(store, *[job("fair", at=T0 + sec(9), fair_key="C") for _ in range(3)])
    for _ in range(20):
        assert claim_fair(store, T0 + sec(5)).fair_key == "A"
    order = "".join(claim_fair(store, T0 + sec(9)).fair_key for _ in range(6))
    assert order.count("C") == 3 and "CC" not in order, order


def test_an_unplaced_job_moved_later_takes_its_start_at_its_new_due_time(store: Store) -> None:
    add(store, *[job("fair", fair_key="A") for _ in range(60)])
    (c,) = add(store, job("fair", at=T0 + sec(9), fair_key="C"))
    assert store.jobs.update_pending(c, PendingChanges(run_at=T0 + sec(20)), T0) is not None
    for _ in range(20):  # C's old due time passed: it is not due
        assert claim_fair(store, T0 + sec(10)).fair_key == "A"
    order = [claim_fair(store, T0 + sec(20)).fair_key for _ in range(2)]
    assert "C" in order, order


def test_a_priority_edit_of_a_fair_job_counts_among_its_task_s_jobs(store: Store) -> None:
    """Model soak, seed 1111: the edited job kept the rank of its old priority, so its
    task's claims took A (the earlier start) first; priority decides first."""
    a, b = add(store, job("fair", fair_key="A"), job("fair", fair_key="B"))  # A starts first
    assert store.jobs.update_pending(b, PendingChanges(priority=1), T0) is not None
    assert store.jobs.update_pending(a, PendingChanges(priority=9), T0) is not None
    assert [claim_fair(store, LATER).fair_key for _ in range(2)] == ["B", "A"]


def test_a_debounce_that_changes_a_fair_job_s_priority_counts_among_its_task_s_jobs(
    store: Store,
) -> None:
    """As a priority edit (above): a debounce (``dedupe="replace"``) that gives a
    placed fair job another priority ranks it from its start and the new priority."""
    debounced = dict(dedupe_key="k", dedupe_scope="pending", dedupe_replace=True)
    a, _ = add(store, job("fair", fair_key="A", **debounced), job("fair", fair_key="B"))
    ((held, created),) = store.jobs.insert([job("fair", fair_key="A", priority=9, **debounced)])
    assert (held.id, held.priority, created) == (a.id, 9, False)
    assert [claim_fair(store, LATER).fair_key for _ in range(2)] == ["B", "A"]


def test_an_unplaced_job_moved_earlier_takes_its_start_at_its_new_due_time(
    store: Store,
) -> None:
    """An edit, or a debounce, that makes an unplaced fair job due sooner: it takes
    its start when due then (it kept the old due time's unplaced rank, and came after
    the backlog till that time passed)."""
    debounced = dict(dedupe_key="k", dedupe_scope="pending", dedupe_replace=True)
    add(store, *[job("fair", fair_key="A") for _ in range(5)])
    c, d = add(
        store,
        job("fair", at=T0 + sec(90), fair_key="C"),
        job("fair", at=T0 + sec(90), fair_key="D", **debounced),
    )
    assert store.jobs.update_pending(c, PendingChanges(run_at=T0 + sec(5)), T0) is not None
    ((held, created),) = store.jobs.insert([job("fair", at=T0 + sec(5), fair_key="D", **debounced)])
    assert (held.id, created) == (d.id, False)
    order = [claim_fair(store, T0 + sec(10)).fair_key for _ in range(5)]
    assert {"C", "D"} <= set(order), order
