"""Writing outcomes through a Settler, against a small fake of the store's writes of
outcomes (runner.settler.Settlements) and of the runner it writes for (a Crew): no
store, no runner. Which write carries which outcome (alone, together, with a claim, in a
flush), from which thread, and what each caller or deferred outcome learns of it.

The fake records each write and can hold one on an Event, so that outcomes queue behind
it; the tests wait on conditions, never for a fixed time.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

from mongosched._core.records import JobRecord, JobStatus, Settlement
from mongosched.errors import SerializationError, StoreError
from mongosched.runner.settler import Item, Leased, Result, Settler
from mongosched.store import Patience
from tests.support.waiting import wait_for

START = datetime(2031, 3, 3, 8, 0, tzinfo=timezone.utc)
DONE = Settlement(status=JobStatus.COMPLETED, now=START)


def patience() -> float:
    """The crew's patience for every write (the fake store checks it is passed on)."""
    return 0.0


def job(n: int) -> JobRecord:
    return JobRecord(
        task="t", run_at=START, created_at=START, updated_at=START, id=n, status=JobStatus.RUNNING
    )


def until(n: int) -> datetime:
    """Job ``n``'s lease ends ``n`` seconds after the start (so each is told apart)."""
    return START + timedelta(seconds=n)


def stored(n: int) -> JobRecord:
    """Job ``n`` as the fake store writes it."""
    return replace(job(n), status=JobStatus.COMPLETED)


class FakeSettlements:
    """The store's writes of outcomes, recorded: which write (``settle`` alone or
    ``settle_many``), of which jobs, from which thread. Each job's result is scripted
    in ``results`` (by default the job as stored); ``error`` makes every write raise;
    ``gate``, when given, holds each write until it is set. It stands for both parts
    the settler writes through (leases, claims)."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, list[Any], str]] = []
        self.results: dict[Any, Result] = {}
        self.error: BaseException | None = None
        self.gate: threading.Event | None = None
        self.writing = threading.Event()

    @property
    def leases(self) -> FakeSettlements:
        return self

    @property
    def claims(self) -> FakeSettlements:
        return self

    def settle(
        self, job: JobRecord, settlement: Settlement, patience: Patience | None = None
    ) -> JobRecord | None:
        (result,) = self._write("settle", [(job, settlement)], patience)
        if isinstance(result, SerializationError):
            raise result
        return result

    def settle_many(self, items: Sequence[Item], patience: Patience | None = None) -> list[Result]:
        return self._write("settle_many", items, patience)

    def _write(self, kind: str, items: Sequence[Item], given: Patience | None) -> list[Result]:
        assert given is patience, "a write retries as the crew says"
        self.calls.append((kind, [j.id for j, _ in items], threading.current_thread().name))
        self.writing.set()
        if self.gate is not None:
            assert self.gate.wait(10), "the test never let the write return"
        if self.error is not None:
            raise self.error
        return [self.results.get(j.id, stored(j.id)) for j, _ in items]


@dataclass
class FakeCrew:
    """The runner a settler writes for: ``batching`` says whether a claim is coming;
    what follows deferred outcomes is kept in ``soon`` (a runner's workers run it)."""

    batching: bool = False
    running: int = 0
    soon: list[Callable[[], None]] = field(default_factory=list)
    asked: list[list[datetime]] = field(default_factory=list)

    def others(self) -> int:
        return self.running

    def claiming(self) -> bool:
        return self.batching

    def run_soon(self, work: Callable[[], None]) -> None:
        self.soon.append(work)

    def patience(self, held: Sequence[Leased]) -> Patience:
        self.asked.append([h.until for h in held])
        return patience

    def run_all(self) -> None:
        soon, self.soon = self.soon, []
        for work in soon:
            work()


class Caller:
    """A worker writing job ``n``'s outcome with :meth:`Settler.settle`, in a thread of
    its own (named ``worker-n``): what it returned or raised."""

    def __init__(self, settler: Settler, n: int) -> None:
        self.settler = settler
        self.n = n
        self.result: JobRecord | None = None
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, name=f"worker-{n}", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            self.result = self.settler.settle(job(self.n), DONE, until(self.n))
        except BaseException as exc:
            self.error = exc

    def join(self) -> None:
        self.thread.join(10)
        assert not self.thread.is_alive(), f"worker {self.n} never returned"


class FakeClaim:
    """A batched claim about to write (what :meth:`Settler.write_with` is given): it
    records the outcomes it carries and their patience, then returns ``results`` or
    raises ``error``; ``gate``, when given, holds it until set (``started`` is set
    meanwhile)."""

    def __init__(
        self,
        results: Sequence[Result] = (),
        error: BaseException | None = None,
        gate: threading.Event | None = None,
    ) -> None:
        self.results = list(results)
        self.error = error
        self.gate = gate
        self.started = threading.Event()
        self.carried: list[tuple[list[Item], Patience | None]] = []

    def __call__(self, items: list[Item], given: Patience | None) -> list[Result]:
        self.carried.append((items, given))
        self.started.set()
        if self.gate is not None:
            assert self.gate.wait(10), "the test never let the claim return"
        if self.error is not None:
            raise self.error
        return self.results


class AfterWrites:
    """What follows each deferred outcome's write, recorded by job."""

    def __init__(self) -> None:
        self.called: dict[Any, tuple[JobRecord | None, BaseException | None]] = {}

    def of(self, n: int) -> Callable[[JobRecord | None, BaseException | None], None]:
        def after_write(stored: JobRecord | None, error: BaseException | None) -> None:
            assert n not in self.called, f"job {n}'s after-write called twice"
            self.called[n] = (stored, error)

        return after_write


def defer(settler: Settler, crew: FakeCrew, after: AfterWrites, *ns: int) -> None:
    """A claim is coming: defer the outcome of each job of ``ns`` to it."""
    crew.batching = True
    for n in ns:
        assert settler.defer(job(n), DONE, until(n), after.of(n))


def make() -> tuple[Settler, FakeSettlements, FakeCrew]:
    store, crew = FakeSettlements(), FakeCrew()
    return Settler(store, crew=crew), store, crew


def holds(settler: Settler, n: int) -> Callable[[], bool]:
    """Whether ``settler`` holds ``n`` queued outcomes (a condition to wait for)."""
    return lambda: settler.queued == n


def queue_behind_a_write(settler: Settler, store: FakeSettlements, *ns: int) -> list[Caller]:
    """Worker ``ns[0]`` writes its outcome alone and the write is held; each of the
    others, in order, queues behind it. Returns the callers; set ``store.gate`` to let
    the write return."""
    store.gate = threading.Event()
    callers = [Caller(settler, ns[0])]
    wait_for(store.writing.is_set, message="the first write begun")
    for queued, n in enumerate(ns[1:], start=1):
        callers.append(Caller(settler, n))
        wait_for(holds(settler, queued), message=f"{queued} outcomes queued")
    return callers


def finish(store: FakeSettlements, callers: list[Caller]) -> None:
    assert store.gate is not None
    store.gate.set()
    for caller in callers:
        caller.join()


# Alone ------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("result", "returns", "raises"),
    [
        pytest.param(stored(1), stored(1), None, id="stored"),
        pytest.param(None, None, None, id="fenced-off"),
        pytest.param(SerializationError("t: result"), None, SerializationError, id="unstorable"),
    ],
)
def test_a_lone_outcome_is_written_alone_in_one_settle_and_its_worker_learns_its_result(
    result: Result, returns: JobRecord | None, raises: type[BaseException] | None
) -> None:
    settler, store, crew = make()
    store.results[1] = result
    if raises is None:
        assert settler.settle(job(1), DONE, until(1)) == returns
    else:
        with pytest.raises(raises) as caught:
            settler.settle(job(1), DONE, until(1))
        assert caught.value is result
    assert [call[:2] for call in store.calls] == [("settle", [1])]
    assert settler.bulk_writes == 0 and settler.queued == 0
    assert crew.asked == [[until(1)]]  # its write retries until its lease ends


def test_a_store_error_on_a_lone_write_reaches_its_worker_and_the_next_writes_alone() -> None:
    settler, store, _ = make()
    store.error = failure = StoreError("down")
    with pytest.raises(StoreError) as caught:
        settler.settle(job(1), DONE, until(1))
    assert caught.value is failure
    store.error = None  # nobody is left holding the turn to write
    assert settler.settle(job(2), DONE, until(2)) == stored(2)
    assert [call[:2] for call in store.calls] == [("settle", [1]), ("settle", [2])]


# Together ---------------------------------------------------------------------------------
def test_outcomes_queued_behind_a_write_go_in_one_settle_many_by_the_first_queued() -> None:
    settler, store, crew = make()
    callers = queue_behind_a_write(settler, store, 1, 2, 3, 4)
    finish(store, callers)
    assert store.calls == [
        ("settle", [1], "worker-1"),
        ("settle_many", [2, 3, 4], "worker-2"),  # the first queued writes for all
    ]
    assert settler.bulk_writes == 1 and settler.queued == 0
    assert [(c.result, c.error) for c in callers] == [(stored(n), None) for n in (1, 2, 3, 4)]
    assert crew.asked[-1] == [until(2), until(3), until(4)]  # patience for all their leases


SERIALIZATION = SerializationError("t: result")


@pytest.mark.parametrize(
    "scripted",
    [
        pytest.param({}, id="all-stored"),
        pytest.param({3: None}, id="one-fenced-off"),
        pytest.param({3: SERIALIZATION}, id="one-unstorable"),
        pytest.param({2: SERIALIZATION, 4: None}, id="the-writer's-own-unstorable"),
        pytest.param({2: None, 3: SERIALIZATION, 4: None}, id="none-stored"),
    ],
)
def test_each_queued_worker_learns_its_own_jobs_result_of_the_group_write(
    scripted: dict[int, Result],
) -> None:
    settler, store, _ = make()
    store.results.update(scripted)
    callers = queue_behind_a_write(settler, store, 1, 2, 3, 4)
    finish(store, callers)
    assert [call[:2] for call in store.calls] == [("settle", [1]), ("settle_many", [2, 3, 4])]
    for caller in callers:
        expected = scripted.get(caller.n, stored(caller.n))
        if isinstance(expected, SerializationError):
            assert (caller.result, caller.error) == (None, expected)
        else:
            assert (caller.result, caller.error) == (expected, None)


def test_a_store_error_on_a_group_write_reaches_every_outcome_in_it() -> None:
    settler, store, crew = make()
    callers = queue_behind_a_write(settler, store, 1, 2, 3)
    after = AfterWrites()
    defer(settler, crew, after, 4)  # rides with the queued
    wait_for(holds(settler, 3), message="the deferred outcome queued")
    failure = StoreError("down")
    store.error = failure
    finish(store, callers)
    assert [call[:2] for call in store.calls] == [("settle", [1]), ("settle_many", [2, 3, 4])]
    assert [c.error for c in callers] == [failure, failure, failure]
    crew.run_all()
    assert after.called == {4: (None, failure)}
    store.error = None  # and the turn to write is free again
    crew.batching = False
    assert settler.settle(job(5), DONE, until(5)) == stored(5)


def test_a_writer_waits_for_the_outcomes_of_the_jobs_still_running() -> None:
    store, crew = FakeSettlements(), FakeCrew(running=2)
    settler = Settler(store, gather=30.0, crew=crew)  # ends once the other two arrive
    callers = [Caller(settler, 1)]
    wait_for(holds(settler, 1), message="the first outcome waiting for others")
    callers += [Caller(settler, 2), Caller(settler, 3)]
    for caller in callers:
        caller.join()
    assert [call[:2] for call in store.calls] == [("settle_many", [1, 2, 3])]
    assert [c.result for c in callers] == [stored(1), stored(2), stored(3)]


# Deferred ---------------------------------------------------------------------------------
def test_no_outcome_is_deferred_when_no_claim_is_coming() -> None:
    settler, store, crew = make()
    after = AfterWrites()
    assert not settler.defer(job(1), DONE, until(1), after.of(1))
    assert settler.queued == 0 and store.calls == [] and crew.soon == []


def test_the_next_claim_writes_the_deferred_outcomes_and_each_learns_its_result() -> None:
    settler, store, crew = make()
    after = AfterWrites()
    defer(settler, crew, after, 1, 2, 3)
    assert settler.queued == 3 and store.calls == []  # nobody writes them meanwhile
    claim = FakeClaim([stored(1), None, SERIALIZATION])
    settler.write_with(claim)
    assert claim.carried == [([(job(n), DONE) for n in (1, 2, 3)], patience)]
    assert crew.asked == [[until(1), until(2), until(3)]]
    assert store.calls == [] and settler.queued == 0
    assert after.called == {}  # not in the claim's thread: a worker runs them
    crew.run_all()
    assert after.called == {1: (stored(1), None), 2: (None, None), 3: (None, SERIALIZATION)}


def test_a_claim_with_nothing_deferred_carries_no_outcome() -> None:
    settler, store, crew = make()
    claim = FakeClaim()
    settler.write_with(claim)
    assert claim.carried == [([], None)] and crew.asked == [] and crew.soon == []
    assert store.calls == []


def test_a_failed_claim_gives_its_outcomes_back_and_a_flush_writes_them() -> None:
    settler, store, crew = make()
    after = AfterWrites()
    defer(settler, crew, after, 1, 2)
    claim = FakeClaim(error=StoreError("claim failed"))
    with pytest.raises(StoreError) as caught:
        settler.write_with(claim)
    assert caught.value is claim.error
    assert settler.queued == 2 and after.called == {}  # nothing lost, nothing told yet
    settler.flush()
    assert store.calls == [("settle_many", [1, 2], threading.current_thread().name)]
    crew.run_all()
    assert after.called == {1: (stored(1), None), 2: (stored(2), None)}


def test_a_failed_claim_hands_its_outcomes_to_a_worker_queued_meanwhile() -> None:
    settler, store, crew = make()
    after = AfterWrites()
    defer(settler, crew, after, 1)
    claim = FakeClaim(error=StoreError("claim failed"), gate=threading.Event())
    raised: list[BaseException] = []

    def dispatcher() -> None:
        try:
            settler.write_with(claim)
        except StoreError as exc:
            raised.append(exc)

    thread = threading.Thread(target=dispatcher, daemon=True)
    thread.start()
    wait_for(claim.started.is_set, message="the claim on its way")
    worker = Caller(settler, 2)  # queues behind the claim's write
    wait_for(holds(settler, 1), message="the worker queued")
    assert claim.gate is not None
    claim.gate.set()
    thread.join(10)
    worker.join()
    assert raised == [claim.error]  # the dispatcher learns its claim failed
    assert store.calls == [("settle_many", [1, 2], "worker-2")]  # the worker writes both
    assert worker.result == stored(2)
    crew.run_all()
    assert after.called == {1: (stored(1), None)}


def test_a_claim_behind_a_write_takes_nothing_and_that_writer_writes_the_deferred() -> None:
    settler, store, crew = make()
    (writer,) = queue_behind_a_write(settler, store, 1)
    after = AfterWrites()
    defer(settler, crew, after, 2)
    claim = FakeClaim()
    settler.write_with(claim)
    assert claim.carried == [([], None)] and settler.queued == 1
    finish(store, [writer])
    assert store.calls == [("settle", [1], "worker-1"), ("settle", [2], "worker-1")]
    crew.run_all()
    assert writer.result == stored(1) and after.called == {2: (stored(2), None)}


# Flush ------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("deferred", "write"),
    [
        pytest.param((), [], id="nothing"),
        pytest.param((1,), [("settle", [1])], id="one-alone"),
        pytest.param((1, 2, 3), [("settle_many", [1, 2, 3])], id="several-together"),
    ],
)
def test_a_flush_writes_what_is_deferred_when_no_claim_comes(
    deferred: tuple[int, ...], write: list[tuple[str, list[int]]]
) -> None:
    settler, store, crew = make()
    after = AfterWrites()
    defer(settler, crew, after, *deferred)
    settler.flush()
    assert [call[:2] for call in store.calls] == write and settler.queued == 0
    crew.run_all()
    assert after.called == {n: (stored(n), None) for n in deferred}


def test_a_store_error_on_a_flush_reaches_every_deferred_outcome() -> None:
    settler, store, crew = make()
    after = AfterWrites()
    defer(settler, crew, after, 1, 2)
    store.error = failure = StoreError("down")
    settler.flush()  # nobody waits on it: it raises nothing
    crew.run_all()
    assert after.called == {1: (None, failure), 2: (None, failure)}


def test_an_after_write_that_raises_keeps_no_other_from_its_own() -> None:
    settler, _, crew = make()
    crew.batching = True
    after = AfterWrites()

    def raises(stored: JobRecord | None, error: BaseException | None) -> None:
        raise RuntimeError("listener broke")

    settler.defer(job(1), DONE, until(1), raises)
    settler.defer(job(2), DONE, until(2), after.of(2))
    settler.flush()
    crew.run_all()  # logs the first one's error
    assert after.called == {2: (stored(2), None)}
