"""Flow control: rate logs (take_rate, return_rate), keyed concurrency slots
(take_slot, renew_slot, release_slot), expiry (expiring, cancel_pending of unstarted
jobs) and dependencies (link_dependencies, dependents, release_dependent,
dependents_released, unreleased, stranded, orphaned); a purge keeps a job whose
dependents were not released."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from mongosched._core import outcome
from mongosched._core.records import JobRecord, JobStatus, Settlement
from mongosched.store import Store

from .helpers import LATER, RETENTION, T0, add, claim, claimed, job, sec, succeeded

W = timedelta(seconds=1)


# Rate limits --------------------------------------------------------------------------------------
def test_a_rate_admits_count_starts_per_window(store: Store) -> None:
    for n in range(3):
        assert store.limits.take_rate("t", None, 3, W, f"a{n}", T0 + sec(n * 0.1)).taken
    refused = store.limits.take_rate("t", None, 3, W, "b", T0 + sec(0.5))
    assert not refused.taken
    assert refused.free_at is not None and T0 + W < refused.free_at <= T0 + W + sec(0.01)
    # The window slides: the first start leaves it after one second, then the second.
    assert not store.limits.take_rate("t", None, 3, W, "b", T0 + W).taken  # still inside (closed)
    assert store.limits.take_rate("t", None, 3, W, "b", T0 + W + sec(0.001)).taken
    assert not store.limits.take_rate("t", None, 3, W, "c", T0 + W + sec(0.05)).taken
    assert store.limits.take_rate("t", None, 3, W, "c", T0 + W + sec(0.101)).taken


def test_rate_keys_and_tasks_count_apart(store: Store) -> None:
    assert store.limits.take_rate("t", "k1", 1, W, "a", T0).taken
    assert not store.limits.take_rate("t", "k1", 1, W, "b", T0).taken
    assert store.limits.take_rate("t", "k2", 1, W, "c", T0).taken
    assert store.limits.take_rate("t", None, 1, W, "d", T0).taken
    assert store.limits.take_rate("other", "k1", 1, W, "e", T0).taken


def test_taking_a_rate_again_with_its_token_takes_no_second_start(store: Store) -> None:
    assert store.limits.take_rate("t", None, 2, W, "a", T0).taken
    assert store.limits.take_rate("t", None, 2, W, "a", T0).taken  # repeated after a lost reply
    assert store.limits.take_rate("t", None, 2, W, "b", T0).taken
    assert not store.limits.take_rate("t", None, 2, W, "c", T0).taken


def test_a_returned_start_frees_its_place(store: Store) -> None:
    assert store.limits.take_rate("t", "k", 1, W, "a", T0).taken
    store.limits.return_rate("t", "k", "a")
    store.limits.return_rate("t", "k", "a")  # repeated: nothing more
    store.limits.return_rate("t", "nobody", "x")
    assert store.limits.take_rate("t", "k", 1, W, "b", T0).taken


def test_starts_out_of_order_still_bound_every_window(store: Store) -> None:
    """Runners' clocks differ: a start may be logged with an earlier time than one
    before it. The log keeps the latest starts, sorted."""
    assert store.limits.take_rate("t", None, 2, W, "a", T0 + sec(0.5)).taken
    assert store.limits.take_rate("t", None, 2, W, "b", T0).taken  # a slower clock
    assert not store.limits.take_rate("t", None, 2, W, "c", T0 + sec(0.9)).taken
    assert store.limits.take_rate("t", None, 2, W, "c", T0 + sec(1.2)).taken  # b's left
    refused = store.limits.take_rate("t", None, 2, W, "d", T0 + sec(1.3))  # a's and c's inside
    assert not refused.taken and refused.free_at == T0 + sec(1.501)
    assert store.limits.take_rate("t", None, 2, W, "d", T0 + sec(1.501)).taken


# Keyed concurrency ----------------------------------------------------------------------------------
def test_slots_per_key_up_to_the_limit(store: Store) -> None:
    until = LATER + sec(30)
    assert store.limits.take_slot("t", "k", 2, "a", LATER, until).taken
    assert store.limits.take_slot("t", "k", 2, "a", LATER, until).taken  # same token: same slot
    assert store.limits.take_slot("t", "k", 2, "b", LATER, until).taken
    assert not store.limits.take_slot("t", "k", 2, "c", LATER, until).taken
    assert store.limits.take_slot("t", "other", 2, "c", LATER, until).taken
    store.limits.release_slot("t", "k", "a")
    store.limits.release_slot("t", "k", "a")
    assert store.limits.take_slot("t", "k", 2, "d", LATER, until).taken
    assert not store.limits.take_slot("t", "k", 2, "e", LATER, until).taken


def test_a_lapsed_holders_slot_returns_after_its_lease(store: Store) -> None:
    until = LATER + sec(30)
    assert store.limits.take_slot("t", "k", 1, "a", LATER, until).taken
    assert store.limits.renew_slot("t", "k", "a", until + sec(30))
    assert not store.limits.renew_slot("t", "k", "nobody", until)
    assert not store.limits.take_slot("t", "k", 1, "b", until + sec(1), until + sec(31)).taken
    assert store.limits.take_slot("t", "k", 1, "b", until + sec(31), until + sec(61)).taken
    assert not store.limits.renew_slot("t", "k", "a", until + sec(90))  # taken over
    store.limits.release_slot("t", "k", "a")  # the old holder's release frees nothing of b's
    assert not store.limits.take_slot("t", "k", 1, "c", until + sec(32), until + sec(62)).taken


# Expiry ---------------------------------------------------------------------------------------------
def test_flow_fields_are_stored(store: Store) -> None:
    [dep] = add(store, job())
    [stored] = add(
        store,
        job(
            expires_at=LATER + sec(5),
            timeout=2.5,
            rate_key="customer-1",
            concurrency_key="c",
            depends_on=(dep.id,),
            waiting_for=(dep.id,),
            status=JobStatus.WAITING,
            on_dependency_failure="run",
        ),
    )
    got = store.jobs.get(stored.id)
    assert got == stored
    assert got is not None and got.expires_at == LATER + sec(5) and got.timeout == 2.5
    assert (got.rate_key, got.concurrency_key) == ("customer-1", "c")
    assert got.depends_on == (dep.id,) == got.waiting_for
    assert got.status is JobStatus.WAITING and got.on_dependency_failure == "run"


def test_expiring_finds_unstarted_jobs_past_their_expiry(store: Store) -> None:
    soon, late, never, running = add(
        store,
        job(expires_at=LATER),
        job(expires_at=LATER + sec(60)),
        job(),
        job(expires_at=LATER - sec(1)),
    )
    [dep] = add(store, job("other"))
    [waiting] = add(
        store,
        job(
            expires_at=LATER - sec(2),
            status=JobStatus.WAITING,
            depends_on=(dep.id,),
            waiting_for=(dep.id,),
        ),
    )
    taken = claimed(store, job_id=running.id)
    assert [r.id for r in store.dependents.start_deadlines_due(LATER)] == [waiting.id, soon.id]
    assert [r.id for r in store.dependents.start_deadlines_due(LATER, limit=1)] == [waiting.id]
    assert [r.id for r in store.dependents.start_deadlines_due(LATER + sec(60))] == [
        waiting.id,
        soon.id,
        late.id,
    ]
    decision = outcome.expired(soon, LATER, RETENTION)
    gone = store.jobs.cancel_pending(soon.id, decision.settlement)
    assert gone is not None and gone.status is JobStatus.EXPIRED and gone.finished_at == LATER
    assert gone.error is not None and gone.error.type == "JobExpired"
    ended = store.jobs.cancel_pending(
        waiting.id, outcome.expired(waiting, LATER, RETENTION).settlement
    )
    assert ended is not None and ended.status is JobStatus.EXPIRED and ended.waiting_for == ()
    assert store.jobs.cancel_pending(taken.id, decision.settlement) is None  # running
    assert store.dependents.start_deadlines_due(LATER) == []
    assert [r.id for r in store.dependents.of(dep.id)] == []
    assert never.expires_at is None


def test_a_claimed_expired_job_settles_expired_uncounted(store: Store) -> None:
    [stored] = add(store, job(expires_at=LATER))
    running = claimed(store)
    decision = outcome.expired(running, LATER, RETENTION)
    done = store.leases.settle(running, decision.settlement)
    assert done is not None and done.status is JobStatus.EXPIRED and done.attempts == 0
    again = store.jobs.retry_finished(stored.id, JobStatus.EXPIRED, LATER)
    assert again is not None and again.status is JobStatus.PENDING and again.expires_at is None


# Dependencies ---------------------------------------------------------------------------------------
def waiting_on(*deps: Any, **fields: Any) -> JobRecord:
    return job(status=JobStatus.WAITING, depends_on=tuple(deps), waiting_for=tuple(deps), **fields)


def ready() -> Settlement:
    return Settlement(status=JobStatus.PENDING, now=LATER)


def test_a_waiting_job_is_never_claimed(store: Store) -> None:
    [dep] = add(store, job("other"))
    [child] = add(store, waiting_on(dep.id))
    assert claim(store) is None
    assert claim(store, job_id=child.id) is None


def test_link_marks_dependencies_and_reads_their_statuses(store: Store) -> None:
    a, b = add(store, job(), job())
    done = claimed(store, job_id=b.id)
    store.leases.settle(done, succeeded(done))
    statuses = store.dependents.link_dependencies([a.id, b.id, "nosuchjob"], LATER)
    assert statuses == {a.id: JobStatus.PENDING, b.id: JobStatus.COMPLETED}
    for dep in (a, b):
        got = store.jobs.get(dep.id)
        assert got is not None and got.has_dependents


def test_release_crosses_off_then_makes_pending(store: Store) -> None:
    a, b = add(store, job("other"), job("other"))
    [child] = add(store, waiting_on(a.id, b.id, at=T0))
    assert [r.id for r in store.dependents.of(a.id)] == [child.id]
    crossed = store.dependents.release_dependent(child, a.id, ready())
    assert crossed is not None and crossed.status is JobStatus.WAITING
    assert crossed.waiting_for == (b.id,)
    assert store.dependents.release_dependent(child, a.id, ready()) is None  # repeated
    assert store.dependents.of(a.id) == []
    assert claim(store) is None
    promoted = store.dependents.release_dependent(child, b.id, ready())
    assert promoted is not None and promoted.status is JobStatus.PENDING
    assert promoted.waiting_for == () and promoted.depends_on == (a.id, b.id)
    assert store.dependents.of(b.id) == []
    assert claimed(store).id == child.id


def test_release_with_a_final_settlement_ends_the_dependent(store: Store) -> None:
    a, b = add(store, job("other"), job("other"))
    [child] = add(store, waiting_on(a.id, b.id))
    failed = store.jobs.get(a.id)
    assert failed is not None
    decision = outcome.after_dependency(child, a.id, JobStatus.FAILED, LATER, RETENTION)
    ended = store.dependents.release_dependent(child, a.id, decision.settlement)
    assert ended is not None and ended.status is JobStatus.CANCELLED
    assert ended.error is not None and ended.error.type == "DependencyFailed"
    assert str(a.id) in ended.error.message
    assert store.dependents.of(b.id) == []
    assert store.dependents.release_dependent(child, b.id, ready()) is None


def test_released_marks_and_the_reapers_repair_queries(store: Store) -> None:
    a, b = add(store, job(), job("other"))
    store.dependents.link_dependencies([a.id], LATER)
    [child] = add(store, waiting_on(b.id))
    running = claimed(store, job_id=a.id)
    store.leases.settle(running, succeeded(running))
    assert [r.id for r in store.dependents.unreleased(LATER + sec(1))] == [a.id]
    assert store.dependents.unreleased(LATER) == []  # finished at LATER: not before it
    store.dependents.dependents_released(a.id)
    assert store.dependents.unreleased(LATER + sec(1)) == []
    # A job left waiting for nothing (crossed off, not yet made pending) is stranded.
    assert store.dependents.stranded() == []
    assert store.dependents.release_dependent(child, None, ready()) is None  # still waits for b
    crossed = store.dependents.release_dependent(child, b.id, ready())
    assert crossed is not None and crossed.status is JobStatus.PENDING


def test_cancel_pending_ends_a_waiting_job(store: Store) -> None:
    [dep] = add(store, job("other"))
    [child] = add(store, waiting_on(dep.id))
    got = store.jobs.cancel_pending(child.id, outcome.cancelled(LATER, RETENTION))
    assert got is not None and got.status is JobStatus.CANCELLED and got.waiting_for == ()
    assert store.dependents.of(dep.id) == []


def test_unlinked_lists_waiting_jobs_until_their_link(store: Store) -> None:
    [dep] = add(store, job("other"))
    [child] = add(store, waiting_on(dep.id))
    assert store.dependents.unlinked(T0) == []  # created at T0: not before it
    assert [r.id for r in store.dependents.unlinked(T0 + sec(1))] == [child.id]
    assert store.dependents.link_dependencies([dep.id], LATER, child.id) == {
        dep.id: JobStatus.PENDING
    }
    assert store.dependents.unlinked(T0 + sec(1)) == []
    [other] = add(store, waiting_on(dep.id))
    store.jobs.cancel_pending(other.id, outcome.cancelled(LATER, RETENTION))  # ended: not listed
    assert store.dependents.unlinked(T0 + sec(1)) == []


def test_no_purge_deletes_a_job_still_marked_as_having_dependents(store: Store) -> None:
    """Its dependents would wait for it forever: a purge, by age or by id, leaves it
    until its dependents were released (the mark cleared)."""
    parent, other = add(store, job(), job())
    store.dependents.link_dependencies([parent.id], LATER)
    [child] = add(store, waiting_on(parent.id))
    for record in (parent, other):
        running = claimed(store, job_id=record.id)
        store.leases.settle(running, succeeded(running))
    completed = [JobStatus.COMPLETED]
    assert store.admin.purge_many([parent.id, other.id], completed) == 1
    assert store.jobs.purge(completed, LATER + sec(1), None) == 0
    assert store.jobs.get(parent.id) is not None and store.jobs.get(other.id) is None
    assert [r.id for r in store.dependents.of(parent.id)] == [child.id]
    store.dependents.release_dependent(child, parent.id, ready())
    store.dependents.dependents_released(parent.id)
    assert store.jobs.purge(completed, LATER + sec(1), None) == 1
    assert store.jobs.get(parent.id) is None


def walk(store: Store, limit: int) -> list[tuple[Any, tuple[Any, ...]]]:
    """Every page of the walk for waiting jobs whose dependencies no longer exist."""
    found: list[tuple[Any, tuple[Any, ...]]] = []
    after = None
    for _ in range(100):
        page, after = store.dependents.orphaned(after, limit)
        found += [(record.id, missing) for record, missing in page]
        if after is None:
            return found
    raise AssertionError("the walk never ends")


def test_orphaned_walks_to_the_jobs_waiting_for_a_job_that_no_longer_exists(
    store: Store,
) -> None:
    """A dependency deleted before its dependents were released (by retention, by hand,
    or never marked): the jobs waiting for it are found, with what is missing."""
    gone, kept, other = add(store, job(), job(), job())
    nowhere = store.parse_id("0123456789abcdef01234567")
    waiting = add(
        store,
        waiting_on(kept.id),
        waiting_on(gone.id, kept.id),
        waiting_on(nowhere),
        waiting_on(kept.id, gone.id, nowhere),
        waiting_on(other.id),
    )
    for record in (gone, other):
        running = claimed(store, job_id=record.id)
        store.leases.settle(running, succeeded(running))
    assert walk(store, 100) == [(waiting[2].id, (nowhere,)), (waiting[3].id, (nowhere,))]
    assert store.admin.purge_many([gone.id], [JobStatus.COMPLETED]) == 1  # never marked
    expected = [
        (waiting[1].id, (gone.id,)),
        (waiting[2].id, (nowhere,)),
        (waiting[3].id, (gone.id, nowhere)),
    ]
    assert walk(store, 100) == expected
    assert walk(store, 1) == expected  # a page at a time, on from where one ended
    assert walk(store, 2) == expected
    page, after = store.dependents.orphaned(None, 100)
    assert after is None and [r.status for r, _ in page] == [JobStatus.WAITING] * 3
    ended = store.jobs.cancel_pending(waiting[1].id, outcome.cancelled(LATER, RETENTION))
    assert ended is not None
    assert walk(store, 1) == expected[1:]
