"""Due-to-start delay of a job scheduled by another process: change streams vs polling.

    python bench/wake.py [--jobs 200] [--poll-jobs 40] [--json]

Against two servers, each in a process of its own: SecantusDB (tests/support/realserver.py,
a MongoDB-compatible server with real change streams; skipped, saying so, until ``make
.venv-server`` installed it) and the wire-protocol stand-in (tests/support/server.py) as
a one-member replica set. A runner runs in another process (one worker, no-op task);
this process schedules ``--jobs`` jobs due now, one at a time at random gaps (up to a
poll interval when polling, so they do not line up with polls), and reads each job's
``started_at - run_at`` (both written with the same machine clock, in milliseconds).
Twice on each: with ``wake="change_stream"`` (poll_interval 5 s: a job picked up sooner
was woken) and with ``wake="poll"`` (poll_interval 1 s, the default). With
MONGOSCHED_BENCH_URI set (a replica set), on that server only, in a database of its own
dropped at the end.

Goal of issue 13: p99 due-to-start <= 100 ms with change streams, on a real replica set.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import pymongo  # noqa: E402

from bench.harness import start_server  # noqa: E402
from mongosched import App  # noqa: E402
from tests.support import realserver  # noqa: E402
from tests.support.server_fixtures import with_database  # noqa: E402

MODES = {"change_stream": 5.0, "poll": 1.0}  # wake mode: poll_interval
GOAL_P99_MS = 100.0


def worker(uri: str, wake: str, poll: float) -> None:
    """The runner process: one worker, the no-op task, until killed."""
    app = App(uri, poll_interval=poll, wake=wake)
    app.task(name="noop", retry=0)(lambda: None)
    runner = app.runner(workers=1).start()
    runner.wait_ready(30)
    while runner.health()["wake"] in ("starting",):
        time.sleep(0.01)
    print(f"ready {runner.health()['wake']}", flush=True)
    while True:
        time.sleep(3600)


def measure(uri: str, wake: str, poll: float, jobs: int) -> dict[str, Any]:
    proc = subprocess.Popen(
        [sys.executable, __file__, "--worker", uri, wake, str(poll)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    state = proc.stdout.readline().split()[-1]
    app = App(uri)
    noop = app.task(name="noop", retry=0)(lambda: None)
    delays = []
    try:
        for _ in range(jobs):
            job = noop.schedule()
            while job.refresh().started_at is None:
                time.sleep(0.002)
            delays.append((job.started_at - job.run_at).total_seconds() * 1000)
            time.sleep(random.uniform(0.02, 0.12 if wake != "poll" else poll))
    finally:
        proc.kill()
        proc.wait()
        app.close()
    delays.sort()
    return {
        "wake": wake,
        "state": state,
        "poll_interval_s": poll,
        "jobs": jobs,
        "p50_ms": statistics.median(delays),
        "p99_ms": delays[max(0, int(len(delays) * 0.99) - 1)],
        "max_ms": delays[-1],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=200, help="jobs timed with streams")
    parser.add_argument("--poll-jobs", type=int, default=40, help="jobs timed polling")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--worker", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args.worker[0], args.worker[1], float(args.worker[2]))
        return
    results = []
    for where, base, stop in servers():
        name = f"bench_wake_{uuid.uuid4().hex[:8]}"
        uri = with_database(base, name)
        try:
            for wake, poll in MODES.items():
                jobs = args.poll_jobs if wake == "poll" else args.jobs
                results.append({"server": where, **measure(uri, wake, poll, jobs)})
        finally:
            stop(name)
    if args.json:
        print(json.dumps(results, indent=2))
        return
    print("due -> start of a job scheduled by another process")
    print(
        f"{'server':<22} {'wake':<14} {'runner':<10} {'poll s':>6} {'jobs':>5} {'p50 ms':>8} "
        f"{'p99 ms':>8} {'max ms':>8}"
    )
    for r in results:
        print(
            f"{r['server']:<22} {r['wake']:<14} {r['state']:<10} {r['poll_interval_s']:>6g} "
            f"{r['jobs']:>5} {r['p50_ms']:>8.1f} {r['p99_ms']:>8.1f} {r['max_ms']:>8.1f}"
        )
    for r in results:
        if r["wake"] == "change_stream":
            verdict = "met" if r["p99_ms"] <= GOAL_P99_MS else "NOT met"
            print(f"goal p99 <= {GOAL_P99_MS:g} ms with change streams, {r['server']}: {verdict}")


def servers() -> Iterator[tuple[str, str, Callable[[str], None]]]:
    """(name, URI, stop) of each server to measure on; ``stop(database)`` drops the
    database on a server of the user's, stops the servers this benchmark started."""
    base = os.environ.get("MONGOSCHED_BENCH_URI")
    if base is not None:

        def drop(name: str) -> None:
            client: Any = pymongo.MongoClient(base)
            client.drop_database(name)
            client.close()

        yield "MONGOSCHED_BENCH_URI", base, drop
        return
    reason = realserver.missing()
    if reason is None:
        server = realserver.RealServer().start()
        yield "SecantusDB", server.uri, lambda _: server.close()
    else:
        print(f"SecantusDB: not measured ({reason})")
    command = [sys.executable, "-m", "tests.support.server", "0", "--change-streams"]
    process, stand_in = start_server(command, "stand-in server")

    def kill(_: str) -> None:
        process.kill()
        process.wait()

    yield "stand-in (replica set)", stand_in, kill


if __name__ == "__main__":
    main()
