"""A claim's renewals through its LeaseKeeper, against a small fake of the store's
renewing writes (runner.keeper.Renewals) and a fake clock: no store, no runner, no
thread. What the heartbeat renews, in which order, until when, and what a lost lease
reports."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from types import SimpleNamespace
from typing import Any

from mongosched._core.records import JobRecord, Renewal
from mongosched.runner.claim import Claim
from mongosched.runner.keeper import LeaseKeeper, stop_margin
from mongosched.testing import FakeClock
from tests.support.claimed import claimed

START = datetime(2031, 3, 3, 8, 0, tzinfo=timezone.utc)
LEASE = 30.0


@dataclass
class FakeRenewals:
    """The store's renewing writes, recorded; each answers ``held``. It stands for
    each of the three parts the keeper renews through (leases, permits, limits)."""

    held: bool = True
    cancel: bool = False
    calls: list[tuple[Any, ...]] = field(default_factory=list)

    @property
    def leases(self) -> FakeRenewals:
        return self

    permits = limits = leases

    def renew(
        self, job_id: Any, token: str, now: datetime, until: datetime, deadline: float | None = None
    ) -> Renewal:
        self.calls.append(("renew", job_id, token, until))
        return Renewal(held=self.held, cancel_requested=self.cancel)

    def renew_permit(
        self, task: str, token: str, until: datetime, deadline: float | None = None
    ) -> bool:
        self.calls.append(("renew_permit", task, token, until))
        return self.held

    def renew_slot(
        self, task: str, key: str, token: str, until: datetime, deadline: float | None = None
    ) -> bool:
        self.calls.append(("renew_slot", task, key, token, until))
        return self.held

    def write_progress(
        self, job_id: Any, token: str, value: float | None, message: str | None, now: datetime
    ) -> bool:
        self.calls.append(("write_progress", job_id, token, value))
        return self.held


def _claim(store: FakeRenewals, clock: FakeClock, events: list[tuple[str, JobRecord]]) -> Claim:
    record = claimed("t", start=START, until=START + timedelta(seconds=LEASE))
    keeper = LeaseKeeper(store, clock, LEASE, lambda name, job: events.append((name, job)))
    task = SimpleNamespace(name="t", timeout=None, fn=lambda: None)
    return Claim(keeper, record, task)  # type: ignore[arg-type]


def test_a_renewal_extends_the_permit_the_slot_and_the_lease_to_one_lease_from_now() -> None:
    store, clock, events = FakeRenewals(), FakeClock(START), []
    claim = _claim(store, clock, events)
    claim.took_permit()
    claim.took_slot("k")
    clock.advance(seconds=10)
    assert claim.renew()
    until = START + timedelta(seconds=10 + LEASE)
    assert store.calls == [
        ("renew_permit", "t", "tok", until),
        ("renew_slot", "t", "k", "tok", until),
        ("renew", 7, "tok", until),
    ]
    assert claim.until == until and not claim.lost and events == []


def test_a_renewal_that_finds_the_lease_gone_loses_it_and_reports_it_once() -> None:
    store, clock, events = FakeRenewals(held=False), FakeClock(START), []
    claim = _claim(store, clock, events)
    assert not claim.renew()
    assert not claim.renew()  # lost: no second write, no second report
    assert claim.lost and claim.ctx.is_cancelled()
    assert [(name, job.id) for name, job in events] == [("job:lease_lost", 7)]
    assert len(store.calls) == 1


def test_a_hold_renews_once_then_the_heartbeat_leaves_the_job_alone_until_renewing_again() -> None:
    store, clock, events = FakeRenewals(), FakeClock(START), []
    claim = _claim(store, clock, events)
    assert claim.hold(120)
    assert claim.renew()  # paused: nothing written
    assert store.calls == [("renew", 7, "tok", START + timedelta(seconds=120))]
    claim.renew_again()
    assert claim.renew()
    assert len(store.calls) == 2


def test_a_progress_write_fenced_off_loses_the_lease() -> None:
    store, clock, events = FakeRenewals(held=False), FakeClock(START), []
    claim = _claim(store, clock, events)
    assert not claim.write_progress(0.5, "half")
    assert claim.lost and [name for name, _ in events] == ["job:lease_lost"]


def test_a_holder_gives_a_lease_up_a_tenth_before_its_end_at_most_a_second() -> None:
    assert stop_margin(5.0) == 0.5
    assert stop_margin(60.0) == 1.0
