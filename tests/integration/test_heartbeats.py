"""The heartbeat threads (heartbeats.Heartbeats): a claim that outlives the adoption delay is
adopted before its first renewal is due, and short claims cost the threads nothing (no
adoption, no wake-up per claim)."""

from __future__ import annotations

import os
import threading
import time

import pytest

from mongosched.runner.heartbeats import Heartbeats
from tests.support.waiting import wait_for


class FakeClaim:
    """What Heartbeats uses of a claim; keep_alive holds the thread until finished."""

    def __init__(self) -> None:
        self.started = time.monotonic()
        self.timeout: float | None = None
        self.done = threading.Event()
        self.adopted = threading.Event()
        self.adopted_at: float | None = None

    @property
    def finished(self) -> bool:
        return self.done.is_set()

    def keep_alive(self, interval: float) -> None:
        self.adopted_at = time.monotonic()
        self.adopted.set()
        self.done.wait(10)


def _voluntary_switches(names: set[int]) -> int:
    total = 0
    for tid in names:
        with open(f"/proc/self/task/{tid}/status") as status:
            for line in status:
                if line.startswith("voluntary_ctxt_switches"):
                    total += int(line.split()[1])
    return total


def _timing(beats: Heartbeats) -> None:
    """Wait until a heartbeat thread times the adoption of a held claim."""
    wait_for(lambda: beats._timer_due is not None, message="the timer waiting")


def test_a_claim_watched_after_a_finished_one_is_adopted_before_its_renewal() -> None:
    beats = Heartbeats(2, 0.6, "test")
    beats.start()
    try:
        first = FakeClaim()
        beats.watch(first)  # the timer waits for its adoption...
        _timing(beats)
        first.done.set()  # ...but it ends before
        beats.forget(first)
        second = FakeClaim()
        beats.watch(second)  # due later than what the timer waits for
        assert second.adopted.wait(5)
        assert second.adopted_at is not None
        assert second.adopted_at - second.started < 0.6  # before its first renewal
        assert not first.adopted.is_set()
        second.done.set()
    finally:
        beats.stop()


def test_a_claim_with_a_timeout_is_adopted_at_once() -> None:
    beats = Heartbeats(2, 30.0, "test")
    beats.start()
    try:
        claim = FakeClaim()
        claim.timeout = 1.0
        beats.watch(claim)
        assert claim.adopted.wait(5)  # not after interval / 3 = 10 s
        claim.done.set()
    finally:
        beats.stop()


@pytest.mark.skipif(not os.path.exists("/proc/self/task"), reason="needs Linux /proc")
def test_short_claims_do_not_wake_the_heartbeat_threads() -> None:
    beats = Heartbeats(4, 3.0, "test")
    beats.start()
    try:
        warm = FakeClaim()
        beats.watch(warm)  # the timer now waits for its adoption, 1 s away
        _timing(beats)
        warm.done.set()
        beats.forget(warm)
        ids = {t.native_id for t in threading.enumerate() if t.name.startswith("mongosched-heart")}
        assert len(ids) == 4
        before = _voluntary_switches(ids)  # type: ignore[arg-type]
        claims = [FakeClaim() for _ in range(200)]
        for claim in claims:  # a backlog of short jobs, one after another
            beats.watch(claim)
            time.sleep(0.001)  # it runs (and lets a woken thread run)
            claim.done.set()
            beats.forget(claim)
        woken = _voluntary_switches(ids) - before  # type: ignore[arg-type]
        assert woken < 10, f"heartbeat threads woken {woken} times for 200 short claims"
        assert not any(claim.adopted.is_set() for claim in claims)
    finally:
        beats.stop()
