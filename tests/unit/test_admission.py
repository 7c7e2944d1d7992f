"""Admission of a claimed job (runner.claimer.Claimer.admit), against a small fake of
the store's parts it goes through (claims, admin, permits, limits, leases) and a fake
clock: no store, no runner, no thread. What a job meets between its claim and its run
(its expiry, the pauses, its lease's end, its task's permits and limits), what is given
back and with which settlement, and what a claim given back or done releases.

The tasks are a real app's (``memory://``), for their options alone: the store the
claimer sees is the fake.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta, timezone
from types import SimpleNamespace
from typing import Any

import pytest

from mongosched import App
from mongosched._core import outcome
from mongosched._core.fleet import Pause
from mongosched._core.records import Admission, JobRecord, JobStatus, Settlement
from mongosched.errors import StoreError
from mongosched.events import Event, Listeners
from mongosched.runner import claimer as claimer_module
from mongosched.runner.claim import Claim
from mongosched.runner.claimer import Claimer
from mongosched.runner.host import RunnerHost
from mongosched.runner.inflight import InFlight
from mongosched.runner.keeper import LeaseKeeper
from mongosched.runner.parts import RunnerParts
from mongosched.runner.settings import RunnerSettings
from mongosched.runner.settler import Settler
from mongosched.store import Patience
from mongosched.testing import FakeClock
from tests.support.claimed import claimed

START = datetime(2031, 3, 3, 8, 0, tzinfo=timezone.utc)
LEASE = 30.0
HEARTBEAT = LEASE / 3  # the runner's default
POLL = 5.0
UNTIL = START + timedelta(seconds=LEASE)
TOKEN = "tok"
RUNNER = object()  # the runner its events name

APP = App("memory://")


@APP.task(name="plain")
def plain() -> None: ...


@APP.task(name="limited", concurrency=2)
def limited() -> None: ...


@APP.task(name="keyed", concurrency=1, concurrency_key="k")
def keyed(k: str) -> None: ...


@APP.task(name="rated", rate_limit="1/m", rate_key="k")
def rated(k: str) -> None: ...


@APP.task(name="both", concurrency=2, rate_limit="1/m")
def both() -> None: ...


def job(task: str = "plain", **fields: Any) -> JobRecord:
    """Job 7 of ``task`` as its claim at ``START`` returned it (leased until ``UNTIL``)."""
    return claimed(task, start=START, until=UNTIL, token=TOKEN, **fields)


Call = tuple[Any, ...]
"""A call the fake store recorded: ``(method, arguments...)``."""


def take_permit(task: str) -> Call:
    return ("take_permit", task, 2, TOKEN, 7, "r1", START, UNTIL)


def take_rate(task: str, key: str | None = None) -> Call:
    return ("take_rate", task, key, 1, timedelta(minutes=1), TOKEN, START)


class FakeStore:
    """The store's parts admission goes through, in one: each call recorded in
    ``calls`` as ``(method, arguments...)`` and answered as scripted (``paused``: the
    pauses; ``held``: the jobs a pause holds; ``permit``, ``slot``, ``rate``: what
    taking them finds; ``fenced``: a settle finds the lease gone); ``fail`` makes the
    methods it names raise."""

    def __init__(self) -> None:
        self.calls: list[Call] = []
        self.paused: list[Pause] = []
        self.held = 1
        self.permit = True
        self.slot = Admission(taken=True)
        self.rate = Admission(taken=True)
        self.fenced = False
        self.claimed: JobRecord | None = None
        self.fail: dict[str, BaseException] = {}
        self.jobs = None  # the source of a listener's Job (never read here)

    @property
    def claims(self) -> FakeStore:
        return self

    admin = permits = limits = leases = claims

    def _call(self, method: str, *args: Any) -> None:
        self.calls.append((method, *args))
        error = self.fail.get(method)
        if error is not None:
            raise error

    # claims
    def claim(self, *, job_id: Any = None, **_: Any) -> JobRecord | None:
        self._call("claim", job_id)
        return self.claimed

    # admin
    def pauses(self) -> list[Pause]:
        self._call("pauses")
        return list(self.paused)

    def pending_queues(self) -> list[str]:
        self._call("pending_queues")
        return []

    def pause_schedules(self, ids: Sequence[Any], now: datetime) -> int:
        self._call("pause_schedules", list(ids), now)
        return self.held

    def pause_label(self, label: str, now: datetime, ids: Sequence[Any] | None = None) -> int:
        self._call("pause_label", label, now, ids)
        return self.held

    # permits
    def take_permit(
        self,
        task: str,
        limit: int,
        token: str,
        job_id: Any,
        owner: str,
        now: datetime,
        until: datetime,
    ) -> bool:
        self._call("take_permit", task, limit, token, job_id, owner, now, until)
        return self.permit

    def release_permit(self, task: str, token: str) -> None:
        self._call("release_permit", task, token)

    # limits
    def take_slot(
        self, task: str, key: str, limit: int, token: str, now: datetime, until: datetime
    ) -> Admission:
        self._call("take_slot", task, key, limit, token, now, until)
        return self.slot

    def release_slot(self, task: str, key: str, token: str) -> None:
        self._call("release_slot", task, key, token)

    def take_rate(
        self, task: str, key: str | None, count: int, window: timedelta, token: str, now: datetime
    ) -> Admission:
        self._call("take_rate", task, key, count, window, token, now)
        return self.rate

    def return_rate(self, task: str, key: str | None, token: str) -> None:
        self._call("return_rate", task, key, token)

    # leases
    def settle(
        self, job: JobRecord, settlement: Settlement, patience: Patience | None = None
    ) -> JobRecord | None:
        assert patience is not None, "a holder's write retries until its lease ends"
        self._call("settle", job.id, settlement)
        return None if self.fenced else replace(job, status=settlement.status)


def unused(*_: Any, **__: Any) -> Any:
    raise AssertionError("admission never calls this")


@dataclass
class Admitting:
    """A claimer over the fake store, and what its listeners heard."""

    claimer: Claimer
    store: FakeStore
    clock: FakeClock
    events: list[Event] = field(default_factory=list)

    def admit(self, record: JobRecord, *, late: float = 0.0, by_id: bool = False) -> Claim | None:
        """Admit ``record``, claimed at ``START``, its reply arriving ``late`` seconds
        after. The calls recorded are admission's alone."""
        self.clock.set(START + timedelta(seconds=late))
        self.store.calls.clear()
        return self.claimer.admit(record, START, by_id=by_id)


def make(*paused: Pause) -> Admitting:
    """A claimer whose pause set has read ``paused`` (as a runner's scope does first)."""
    clock, store, events = FakeClock(START), FakeStore(), Listeners()
    host = RunnerHost(
        store=store,  # type: ignore[arg-type]  # the parts admission goes through, alone
        tasks=APP.tasks,
        lease_duration=LEASE,
        poll_interval=POLL,
        retention=APP.retention,
        wake="poll",
        events=events,
        now=clock,
        ensure_schedules=unused,
        attach=unused,
        detach=unused,
        bind_transaction=unused,
        pause_schedule=unused,
    )
    settings = RunnerSettings(
        host,
        workers=1,
        queues=None,
        name="r1",
        lease_duration=None,
        poll_interval=None,
        heartbeat_interval=None,
        reap_interval=None,
    )
    flight = InFlight(settings.workers, clock)
    settler = Settler(store, crew=flight)  # type: ignore[arg-type]
    parts = RunnerParts(app=host, settings=settings, runner=RUNNER, flight=flight, settler=settler)
    keeper = LeaseKeeper(store, clock, LEASE, parts.emit)  # type: ignore[arg-type]
    admitting = Admitting(Claimer(parts, keeper=keeper), store, clock)
    events.add("job:expired", admitting.events.append)
    store.paused = list(paused)
    admitting.claimer.pause_set.refresh(every_queue=True)
    return admitting


def given_back(at: datetime = START) -> Call:
    """The write of job 7 given back (pending, in its place in line, uncounted)."""
    return ("settle", 7, outcome.given_back(job(), at))


def held_back(until: datetime) -> Call:
    """The write of job 7 held back by a limit, due at ``until``."""
    settlement = outcome.held_back(job(), START, until)
    assert settlement.run_at == until, "held back, not merely given back"
    return ("settle", 7, settlement)


SCHEDULE_PAUSED = Pause("schedule", "7", START)
LABEL_PAUSED = Pause("task", "lbl", START)
LAST_CHANCE = timedelta(seconds=LEASE - HEARTBEAT)  # the lease ends at the first heartbeat
PERMIT_RETURNED = [  # a permit taken, then the rate: the permit is returned, the job given back
    take_permit("both"),
    take_rate("both"),
    ("release_permit", "both", TOKEN),
    given_back(),
]
FREE_AT = START + timedelta(seconds=20)


# Admitted ---------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("record", "late", "calls", "holds"),
    [
        pytest.param(job(), 0.0, [], {}, id="plain"),
        pytest.param(
            job("limited"),
            0.0,
            [take_permit("limited")],
            {"has_permit": True},
            id="permit-taken",
        ),
        pytest.param(
            job("keyed", concurrency_key="a"),
            0.0,
            [("take_slot", "keyed", "a", 1, TOKEN, START, UNTIL)],
            {"slot_key": "a"},
            id="slot-taken",
        ),
        pytest.param(
            job("rated", rate_key="a"),
            0.0,
            [take_rate("rated", "a")],
            {"rate_taken": True},
            id="rate-taken",
        ),
        pytest.param(  # the start counts at the claim, not at its reply
            job("both"),
            5.0,
            [
                take_permit("both"),
                take_rate("both"),
            ],
            {"has_permit": True, "rate_taken": True},
            id="taken-at-the-claim-after-a-slow-reply",
        ),
        pytest.param(
            job(),
            LAST_CHANCE.total_seconds() - 0.001,
            [],
            {},
            id="reply-a-moment-before-too-late",
        ),
    ],
)
def test_an_admitted_job_is_returned_as_its_claim_holding_what_it_took_and_counted(
    record: JobRecord, late: float, calls: list[Call], holds: dict[str, Any]
) -> None:
    admitting = make()
    claim = admitting.admit(record, late=late)
    assert claim is not None
    assert claim.record is record and claim.token == TOKEN and claim.until == UNTIL
    assert admitting.store.calls == calls  # nothing given back
    took = {"has_permit": False, "slot_key": None, "rate_taken": False, **holds}
    assert {name: getattr(claim, name) for name in took} == took
    assert not claim.finished
    assert admitting.claimer.claimed == 1


# Given back -------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("record", "paused", "answers", "late", "calls"),
    [
        pytest.param(
            job(),
            [SCHEDULE_PAUSED],
            {"held": 1},
            0.0,
            [given_back(), ("pause_schedules", [7], START)],
            id="schedule-paused",
        ),
        pytest.param(  # the pause is gone from the store: read the pauses again at once
            job(),
            [SCHEDULE_PAUSED],
            {"held": 0},
            0.0,
            [given_back(), ("pause_schedules", [7], START), ("pauses",)],
            id="schedule-paused-then-resumed",
        ),
        pytest.param(
            job(label="lbl"),
            [LABEL_PAUSED],
            {"held": 1},
            0.0,
            [given_back(), ("pause_label", "lbl", START, [7])],
            id="label-paused",
        ),
        pytest.param(
            job(label="lbl"),
            [LABEL_PAUSED],
            {"held": 0},
            0.0,
            [given_back(), ("pause_label", "lbl", START, [7]), ("pauses",)],
            id="label-paused-then-resumed",
        ),
        pytest.param(
            job("limited"),
            [],
            {},
            LAST_CHANCE.total_seconds(),
            [given_back(START + LAST_CHANCE)],  # before any permit is taken
            id="reply-too-late-for-the-lease",
        ),
        pytest.param(
            job(),
            [],
            {},
            LEASE + 1,
            [given_back(UNTIL + timedelta(seconds=1))],
            id="reply-after-the-lease-ended",
        ),
        pytest.param(
            job("limited"),
            [],
            {"permit": False},
            0.0,
            [take_permit("limited"), given_back()],
            id="permits-all-held",
        ),
        pytest.param(
            job("keyed", concurrency_key="a"),
            [],
            {"slot": Admission(taken=False)},
            0.0,
            [
                ("take_slot", "keyed", "a", 1, TOKEN, START, UNTIL),
                held_back(START + timedelta(seconds=POLL)),
            ],
            id="key-slots-all-held",
        ),
        pytest.param(
            job("rated", rate_key="a"),
            [],
            {"rate": Admission(taken=False, free_at=FREE_AT)},
            0.0,
            [take_rate("rated", "a"), held_back(FREE_AT)],
            id="key-rate-saturated",
        ),
        pytest.param(  # the permit it took is released before the job is given back
            job("both"),
            [],
            {"rate": Admission(taken=False, free_at=FREE_AT)},
            0.0,
            PERMIT_RETURNED,
            id="permit-taken-then-rate-saturated",
        ),
    ],
)
def test_a_job_that_may_not_run_now_is_given_back_uncounted_with_its_settlement(
    record: JobRecord,
    paused: list[Pause],
    answers: dict[str, Any],
    late: float,
    calls: list[Call],
) -> None:
    admitting = make(*paused)
    vars(admitting.store).update(answers)
    assert admitting.admit(record, late=late) is None
    assert admitting.store.calls == calls
    assert admitting.claimer.claimed == 0 and admitting.events == []


@pytest.mark.parametrize("late", [LAST_CHANCE.total_seconds(), LEASE + 1])
def test_a_reply_too_late_for_the_lease_is_given_back_with_a_warning(
    late: float, caplog: pytest.LogCaptureFixture
) -> None:
    admitting = make()
    with caplog.at_level(logging.WARNING, logger="mongosched.runner"):
        assert admitting.admit(job(), late=late) is None
    (warning,) = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert (
        "job 7 (plain)" in warning.getMessage() and "too late for its lease" in warning.getMessage()
    )


@pytest.mark.parametrize(("job_id", "admitted"), [(None, False), (7, True)])
def test_pauses_do_not_hold_a_job_claimed_by_its_id(job_id: Any, admitted: bool) -> None:
    admitting = make(SCHEDULE_PAUSED, LABEL_PAUSED)
    admitting.store.claimed = record = job(label="lbl")
    claim, taken = admitting.claimer.take(job_id=job_id)
    assert taken and (claim is not None) == admitted
    pausing = [c[0] for c in admitting.store.calls if c[0].startswith("pause_")]
    assert pausing == ([] if admitted else ["pause_schedules"])
    assert admitting.claimer.claimed == int(admitted)
    if claim is not None:
        assert claim.record is record


def test_a_task_whose_permits_are_all_held_is_left_out_of_claims_for_a_poll_interval(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    ticks = [1000.0]
    monkeypatch.setattr(claimer_module, "time", SimpleNamespace(monotonic=lambda: ticks[0]))
    admitting = make()
    assert "limited" in admitting.claimer._claimable()
    admitting.store.permit = False
    assert admitting.admit(job("limited")) is None
    assert "limited" not in admitting.claimer._claimable()
    assert "plain" in admitting.claimer._claimable()  # the others are claimed meanwhile
    ticks[0] += POLL - 0.001
    assert "limited" not in admitting.claimer._claimable()
    ticks[0] += 0.001
    assert "limited" in admitting.claimer._claimable()


# Expired ----------------------------------------------------------------------------------
@pytest.mark.parametrize("fenced", [False, True], ids=["settled", "fenced-off"])
def test_a_job_past_its_expiry_on_arrival_is_settled_unrun_and_announced(fenced: bool) -> None:
    admitting = make(SCHEDULE_PAUSED)
    admitting.store.fenced = fenced
    record = job("limited", expires_at=START + timedelta(seconds=1))
    assert admitting.admit(record, late=1.0) is None  # due at the claim, past on arrival
    arrived = START + timedelta(seconds=1)
    decision = outcome.expired(record, arrived, APP.retention)
    assert decision.settlement.status is JobStatus.EXPIRED
    assert admitting.store.calls == [("settle", 7, decision.settlement)]  # nothing else
    assert admitting.claimer.claimed == 0
    if fenced:  # not written: nothing to announce
        assert admitting.events == []
    else:
        (event,) = admitting.events
        assert event.name == "job:expired" and event.runner is RUNNER
        assert event.job is not None and event.job.record.status is JobStatus.EXPIRED


# Released ---------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("record", "started", "calls"),
    [
        pytest.param(job("limited"), True, [("release_permit", "limited", TOKEN)], id="permit"),
        pytest.param(
            job("keyed", concurrency_key="a"),
            True,
            [("release_slot", "keyed", "a", TOKEN)],
            id="slot",
        ),
        pytest.param(job("rated", rate_key="a"), True, [], id="start-that-ran"),
        pytest.param(
            job("rated", rate_key="a"),
            False,
            [("return_rate", "rated", "a", TOKEN)],
            id="start-that-did-not-run",
        ),
        pytest.param(job(), True, [], id="nothing"),
    ],
)
def test_a_claim_done_releases_what_it_holds_once(
    record: JobRecord, started: bool, calls: list[Call]
) -> None:
    admitting = make()
    claim = admitting.admit(record)
    assert claim is not None
    admitting.store.calls.clear()
    admitting.claimer.release(claim, started=started)
    assert admitting.store.calls == calls
    assert claim.finished and not claim.has_permit and claim.slot_key is None
    admitting.claimer.release(claim, started=started)
    assert admitting.store.calls == calls  # released once


@pytest.mark.parametrize(
    ("record", "released"),
    [
        pytest.param(job("limited"), [("release_permit", "limited", TOKEN)], id="permit"),
        pytest.param(
            job("keyed", concurrency_key="a"), [("release_slot", "keyed", "a", TOKEN)], id="slot"
        ),
        pytest.param(
            job("rated", rate_key="a"), [("return_rate", "rated", "a", TOKEN)], id="start"
        ),
    ],
)
def test_a_claim_given_back_releases_all_it_took_then_is_pending_again(
    record: JobRecord, released: list[Call]
) -> None:
    admitting = make()
    claim = admitting.admit(record)
    assert claim is not None
    admitting.store.calls.clear()
    admitting.clock.advance(seconds=2)
    admitting.claimer.give_back(claim)  # as a runner that stops gives back what it holds
    assert admitting.store.calls == [*released, given_back(START + timedelta(seconds=2))]
    assert claim.finished


def test_a_permit_that_cannot_be_released_is_left_to_expire_with_a_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    admitting = make()
    claim = admitting.admit(job("limited"))
    assert claim is not None
    admitting.store.fail["release_permit"] = StoreError("down")
    with caplog.at_level(logging.WARNING, logger="mongosched.runner"):
        admitting.claimer.release(claim, started=True)  # raises nothing
    assert claim.finished and not claim.has_permit
    assert "could not release a permit of limited: down" in caplog.text


# Failures ---------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("record", "failing", "calls"),
    [
        pytest.param(
            job("limited"),
            "take_permit",
            [take_permit("limited"), given_back()],
            id="taking-a-permit",
        ),
        pytest.param(
            job("both"),
            "take_rate",
            PERMIT_RETURNED,
            id="taking-a-rate-after-a-permit",
        ),
    ],
)
def test_an_error_in_admission_gives_the_job_back_then_leaves(
    record: JobRecord, failing: str, calls: list[Call]
) -> None:
    admitting = make()
    admitting.store.fail[failing] = failure = StoreError("down")
    with pytest.raises(StoreError) as caught:
        admitting.admit(record)
    assert caught.value is failure
    assert admitting.store.calls == calls
    assert admitting.claimer.claimed == 0


@pytest.mark.parametrize(
    ("pause", "failing", "calls"),
    [
        pytest.param(
            SCHEDULE_PAUSED,
            "pause_schedules",
            [given_back(), ("pause_schedules", [7], START)],
            id="pausing-a-schedule",
        ),
        pytest.param(
            LABEL_PAUSED,
            "pause_label",
            [given_back(), ("pause_label", "lbl", START, [7])],
            id="pausing-a-label",
        ),
    ],
)
def test_a_pause_write_that_fails_after_the_give_back_gives_nothing_back_twice(
    pause: Pause, failing: str, calls: list[Call]
) -> None:
    """A job of a paused schedule or label is given back, then paused: when that
    write fails its error leaves, and the job, already given back, is not given back
    a second time (a wasted write, fenced off)."""
    admitting = make(pause)
    admitting.store.fail[failing] = failure = StoreError("down")
    with pytest.raises(StoreError) as caught:
        admitting.admit(job(label="lbl"))
    assert caught.value is failure
    assert admitting.store.calls == calls


def test_a_job_that_cannot_be_given_back_either_is_left_to_its_lease_with_a_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    admitting = make()
    admitting.store.fail["take_permit"] = failure = StoreError("permits down")
    admitting.store.fail["settle"] = StoreError("leases down")
    with caplog.at_level(logging.WARNING, logger="mongosched.runner"):
        with pytest.raises(StoreError) as caught:
            admitting.admit(job("limited"))
    assert caught.value is failure  # the first error, not the give-back's
    assert [c[0] for c in admitting.store.calls] == ["take_permit", "settle"]
    (warning,) = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert warning.getMessage() == (
        "job 7 (limited): could not give it back (leases down); "
        "it runs again once its lease expires"
    )
