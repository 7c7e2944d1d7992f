"""Slow handlers against their lease, with short real intervals."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import timedelta

import pytest

from mongosched import App, Event, JobStatus
from mongosched._core.records import Renewal
from mongosched.errors import StoreError
from mongosched.runner.claim import Claim
from mongosched.testing import FakeClock
from tests.support.stalls import LostHeartbeats
from tests.support.tasks import Recorder
from tests.support.waiting import wait_for

LEASE = 0.4  # seconds; heartbeats every LEASE / 3


def test_a_job_running_five_leases_long_stays_with_its_heartbeating_holder(
    make_app: Callable[..., App],
) -> None:
    recorder = Recorder()
    apps = [make_app(lease_duration=LEASE) for _ in range(2)]
    for app in apps:

        @app.task(name="long", retry=2)
        def long() -> str:
            recorder.enter("long")
            deadline = time.monotonic() + 5 * LEASE  # the work itself, not a test wait
            while time.monotonic() < deadline:
                time.sleep(0.01)
            recorder.leave()
            return "done"

    job = apps[0].schedule("long")
    runners = [app.runner(workers=2, reap_interval=LEASE / 4).start() for app in apps]
    job.wait(timeout=20)
    for runner in runners:
        runner.stop()
    assert job.status is JobStatus.COMPLETED and job.attempts == 1
    assert recorder.calls == ["long"] and recorder.peak == 1
    print(
        f"\nlong job: {5 * LEASE:.1f} s under a {LEASE} s lease, one holder, attempts={job.attempts}"
    )


def test_a_holder_whose_heartbeats_stop_is_taken_over_and_its_completion_rejected(
    make_app: Callable[..., App],
) -> None:
    first, second = make_app(lease_duration=LEASE), make_app(lease_duration=LEASE)
    release = threading.Event()
    lost: list[Event] = []
    first.on("job:lease_lost", lost.append)

    @first.task(name="work", retry=2)
    def stuck() -> str:
        release.wait(20)
        return "first"

    second.task(name="work", retry=2)(lambda: "second")
    # The first holder's heartbeats never arrive: its lease lapses while it still works.
    a = first.runner(workers=1)
    a.steps.keeper.store = LostHeartbeats(a.store)
    a.start()
    job = first.schedule("work")
    wait_for(lambda: job.refresh().status is JobStatus.RUNNING)
    b = second.runner(workers=1, reap_interval=LEASE / 4).start()
    wait_for(lambda: job.refresh().status is JobStatus.COMPLETED, message="taken over")
    assert job.result == "second" and job.attempts == 2
    release.set()
    assert a.stop(timeout=10)
    b.stop()
    assert job.refresh().result == "second"
    assert [e.job.id for e in lost] == [job.id]
    print(
        f"\ntakeover: second holder completed attempt {job.attempts}; first holder's write rejected"
    )


def test_heartbeat_threads_renew_long_jobs_and_never_touch_short_ones(
    make_app: Callable[..., App],
) -> None:
    """A job that ends before its lease needs renewing costs no heartbeat (no thread is
    woken for it); one that runs on is renewed on time, each by a thread of its own."""
    app = make_app(lease_duration=3.0)  # renewals every second
    renewed: list[object] = []
    renewers: dict[object, set[str]] = {}  # job id -> names of the threads renewing it
    renew = app.store.leases.renew

    def counted(job_id: object, *args: object) -> object:
        renewed.append(job_id)
        renewers.setdefault(job_id, set()).add(threading.current_thread().name)
        return renew(job_id, *args)  # type: ignore[arg-type]

    app.store.leases.renew = counted  # type: ignore[method-assign]
    app.task(name="short")(lambda: None)
    gate = threading.Event()
    app.task(name="long")(lambda: gate.wait(10))
    runner = app.runner(workers=4).start()
    shorts = app.schedule_bulk(app.tasks["short"].job() for _ in range(40))
    wait_for(lambda: app.count_jobs(status="completed") == 40, message="the short jobs")
    assert renewed == []
    longs = app.schedule_bulk(app.tasks["long"].job() for _ in range(3))
    # Each long job is renewed at least twice (a second apart) while it runs.
    wait_for(
        lambda: all(renewed.count(job.id) >= 2 for job in longs),
        timeout=10,
        message="renewals of the long jobs",
    )
    gate.set()
    assert runner.stop(timeout=10)
    assert not set(renewed) & {job.id for job in shorts}
    # Each long job kept alive by one heartbeat thread, a different one for each.
    threads = [renewers[job.id] for job in longs]
    assert all(len(names) == 1 for names in threads), threads
    names = set().union(*threads)
    assert len(names) == 3 and all(n.startswith("mongosched-heartbeat-") for n in names), names
    assert {job.refresh().status for job in longs} == {JobStatus.COMPLETED}


@contextmanager
def one_claim(
    renew: Callable[..., object], clock: FakeClock | None = None, lease: float = 30.0
) -> Iterator[Claim]:
    """A runner's claim (under a ``lease``-second lease) on the one job of an in-memory
    app; its store's ``renew`` is ``renew`` until the block ends, then the app is closed."""
    app = App("memory://", clock=clock, lease_duration=lease)
    app.task(name="t")(lambda: None).schedule()
    claim = app.runner(workers=1).claim_next()
    assert claim is not None
    store = claim.keeper.store
    original, store.leases.renew = store.leases.renew, renew  # type: ignore[method-assign]
    try:
        yield claim
    finally:
        store.leases.renew = original  # type: ignore[method-assign]
        app.close()


@pytest.mark.parametrize(("lease", "margin"), [(30.0, 1.0), (1.5, 0.15)])
def test_a_failed_renewal_gives_the_lease_up_just_before_its_end(
    lease: float, margin: float
) -> None:
    """A renewal that fails (the database unreachable) while the lease still holds is
    retried at the next beat; once the lease is within its stop margin of its end (a
    tenth of the lease, at most a second: another runner may take the job the instant
    after ``until``), the claim gives it up and cancels its run (and gives up its
    concurrency slot), so the run has stopped before anyone else can start the job."""

    def unreachable(*args: object, **kwargs: object) -> object:
        raise StoreError("injected: unreachable")

    clock = FakeClock()
    with one_claim(unreachable, clock, lease) as claim:
        give_up = claim.until - timedelta(seconds=margin)
        clock.set(give_up - timedelta(milliseconds=1))
        assert claim.renew() and not claim.lost  # the lease still holds: retried later
        clock.set(give_up)
        assert not claim.renew() and claim.lost  # its end is near: given up
        assert claim.ctx.cancel_reason == "lease_lost"  # and its run told to stop


def test_a_finished_claim_does_not_wait_for_a_renewal_in_flight() -> None:
    """A renewal stuck on a silent server may last until the lease's end; the job's
    outcome must not wait that long. ``finish`` returns at once, and what the renewal
    finds once it returns (here: the lease gone, as after the outcome landed) does not
    mark the finished claim lost."""
    entered, release = threading.Event(), threading.Event()

    def stuck(*args: object, **kwargs: object) -> Renewal:
        entered.set()
        release.wait(10)
        return Renewal(held=False)

    with one_claim(stuck) as claim:
        try:
            renewing = threading.Thread(target=claim.renew)
            renewing.start()
            assert entered.wait(5)
            finishing = threading.Thread(target=claim.finish)
            finishing.start()
            finishing.join(1)
            assert not finishing.is_alive(), "finish waited for the renewal in flight"
            release.set()
            renewing.join(5)
            assert claim.finished and not claim.lost
        finally:
            release.set()
