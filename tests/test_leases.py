"""Slow handlers against their lease, with short real intervals."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from mongosched import App, Event, JobStatus
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

        @app.task(name="long", retry=3)
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

    @first.task(name="work", retry=3)
    def stuck() -> str:
        release.wait(20)
        return "first"

    second.task(name="work", retry=3)(lambda: "second")
    # The first holder's heartbeats never arrive: its lease lapses while it still works.
    a = first.runner(workers=1)
    a.store = LostHeartbeats(a.store)  # type: ignore[assignment]
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
