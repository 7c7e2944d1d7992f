"""What a durable workflow costs beside a plain job (issue 35), on ``memory://`` or, with
MONGOSCHED_BENCH_URI set, on that server (a database of its own, dropped at the end).

    python bench/workflows.py [--steps 1000] [--sleepers 10000]

Prints:

* store calls per step of a 20-step workflow run in one go, beside a plain job's calls
  (each store call is one round trip on MongoDB), and the same on a replay that finds
  every step recorded;
* worker CPU (``time.process_time``) and wall time per step, beside a plain job's per
  job, and the same for a transactional step;
* the replay time of a ``--steps``-step workflow whose history is all recorded;
* threads held by ``--sleepers`` sleeping workflows (they wait in the store; they are
  put to sleep in this thread, claimed a hundred at a time), the growth of this
  process's peak memory (on ``memory://`` the store is in it) and, on a server, the
  database's sizes (``dbStats``) and the server's resident memory (``serverStatus``,
  where it says) before and after.
"""

from __future__ import annotations

import argparse
import math
import os
import resource
import threading
import time
import uuid
from collections import Counter
from datetime import timedelta
from typing import Any

from mongosched import App
from mongosched.store import Store
from mongosched.testing import FakeClock, drain


def counted(app: App) -> Counter[str]:
    """Count the app's store calls by name (each a round trip on MongoDB), over every
    part of the store."""
    calls: Counter[str] = Counter()
    for part in (getattr(app.store, name) for name in Store.__annotations__):  # its parts
        for name in dir(part):
            fn = getattr(part, name)
            if name.startswith("_") or not callable(fn):
                continue

            def wrap(*args: Any, _fn: Any = fn, _name: str = name, **kwargs: Any) -> Any:
                calls[_name] += 1
                return _fn(*args, **kwargs)

            setattr(part, name, wrap)
    return calls


def make_app(clock: FakeClock) -> tuple[App, Any]:
    uri = os.environ.get("MONGOSCHED_BENCH_URI")
    if not uri:
        return App(f"memory://bench-{uuid.uuid4().hex[:8]}", clock=clock), None
    import pymongo

    client: Any = pymongo.MongoClient(uri, tz_aware=True)
    database = client.get_database(f"bench_workflows_{uuid.uuid4().hex[:8]}")
    return App(database=database, clock=clock), (client, database.name)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--sleepers", type=int, default=10_000)
    parser.add_argument(
        "--within", type=float, default=None, help="seconds to put sleepers to sleep"
    )
    args = parser.parse_args()
    clock = FakeClock()
    app, cleanup = make_app(clock)
    try:
        run(app, clock, args.steps, args.sleepers, args.within)
    finally:
        if cleanup is not None:
            client, name = cleanup
            client.drop_database(name)


def run(app: App, clock: FakeClock, steps: int, sleepers: int, within: float | None) -> None:
    @app.task(name="plain")
    def plain() -> int:
        return 1

    @app.step(name="one")
    def one(i: int) -> int:
        return i

    @app.workflow(name="many")
    def many(count: int, rest: bool) -> int:
        total = sum(one(i) for i in range(count))
        if rest:
            app.sleep(60)
        return total

    @app.step(name="written", transactional=True)
    def written(i: int) -> int:
        return i

    @app.workflow(name="writing")
    def writing(count: int) -> int:
        return sum(written(i) for i in range(count))

    @app.workflow(name="sleeper")
    def sleeper() -> None:
        app.sleep(timedelta(days=1))

    calls = counted(app)
    jobs = 200
    plain_jobs = [plain.schedule() for _ in range(jobs)]
    calls.clear()
    cpu, wall = time.process_time(), time.perf_counter()
    drain(app)
    plain_wall = (time.perf_counter() - wall) / jobs
    plain_cpu = (time.process_time() - cpu) / jobs
    plain_calls = sum(calls.values()) / jobs
    assert all(j.refresh().result == 1 for j in plain_jobs)

    job = many.schedule(20, True)
    calls.clear()
    cpu, wall = time.process_time(), time.perf_counter()
    drain(app)
    step_wall = (time.perf_counter() - wall) / 20
    step_cpu = (time.process_time() - cpu) / 20
    first = dict(calls)
    clock.advance(timedelta(seconds=61))
    calls.clear()
    drain(app)
    replay = dict(calls)
    assert job.refresh().result == sum(range(20))
    print(
        f"plain job: {plain_calls:.1f} store calls per job, {plain_cpu * 1e6:.0f} us CPU, "
        f"{plain_wall * 1e3:.2f} ms wall per job"
    )
    print(
        f"20-step workflow, first run: {first} ({first.get('record_step', 0) / 20:.1f} writes per step)"
    )
    print(f"  per step: {step_cpu * 1e6:.0f} us worker CPU, {step_wall * 1e3:.2f} ms wall")
    print(f"  replay of the 20 recorded steps: {replay} (one steps read)")

    tx = writing.schedule(20)
    calls.clear()
    cpu, wall = time.process_time(), time.perf_counter()
    drain(app)
    tx_wall = (time.perf_counter() - wall) / 20
    tx_cpu = (time.process_time() - cpu) / 20
    assert tx.refresh().result == sum(range(20))
    print(
        f"20 transactional steps: {dict(calls)}; per step {tx_cpu * 1e6:.0f} us worker CPU, "
        f"{tx_wall * 1e3:.2f} ms wall"
    )

    long = many.schedule(steps, True)
    drain(app)
    clock.advance(timedelta(seconds=61))
    started = time.perf_counter()
    drain(app)
    print(f"replay of a {steps}-step workflow: {(time.perf_counter() - started) * 1e3:.1f} ms")
    assert long.refresh().result == sum(range(steps))

    sizes = server_sizes(app)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    before = threading.active_count()
    started = time.perf_counter()
    asleep = put_to_sleep(app, sleeper, sleepers, within)
    elapsed = time.perf_counter() - started
    grown = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - peak  # KiB on Linux
    print(
        f"{asleep} of {sleepers} workflows put to sleep; "
        f"{app.count_jobs(task='sleeper', status='running')} holding a worker; "
        f"threads before {before}, after {threading.active_count()}; "
        f"put to sleep in {elapsed:.1f} s; this process's peak memory grew {grown / 1024:.1f} MiB"
    )
    after = server_sizes(app)
    for key in after:
        change = after[key] - sizes.get(key, 0)
        print(
            f"  server {key}: {after[key] / 2**20:.1f} MiB ({change / max(asleep, 1):.0f} B per sleeper)"
        )


def put_to_sleep(app: App, sleeper: Any, count: int, within: float | None, wave: int = 1000) -> int:
    """Schedule ``count`` sleepers ``wave`` at a time and run each wave's in this
    thread, claimed a hundred at a time (one claim's read for each hundred, as a
    runner with that many free workers claims), until none is due or ``within`` seconds
    have passed: each sleeper runs to its sleep and is written back pending. Returns
    how many ran. In waves, a claim on a server that scans the pending jobs (SecantusDB)
    scans fewer of them."""
    runner = app.runner(workers=1, name="bench")
    started, done = time.perf_counter(), 0
    by = math.inf if within is None else started + within
    while done < count and time.perf_counter() < by:
        app.schedule_bulk([sleeper.job() for _ in range(min(wave, count - done))])
        while time.perf_counter() < by and (claims := runner.claim_batch(100)):
            runner.run_claims(claims)
            done += len(claims)
        print(f"  {done} put to sleep after {time.perf_counter() - started:.0f} s", flush=True)
    return done


def server_sizes(app: App) -> dict[str, float]:
    """The database's data, storage and index sizes and the server's resident memory,
    in bytes (empty on ``memory://``; a figure the server does not give is left out)."""
    database = getattr(app.store, "connection", None)
    if database is None:
        return {}
    database = database.database
    stats = database.command("dbStats")
    sizes = {k: float(stats[k]) for k in ("dataSize", "storageSize", "indexSize") if k in stats}
    try:
        resident = database.client.admin.command("serverStatus").get("mem", {}).get("resident")
    except Exception:  # a server without serverStatus
        resident = None
    if resident:
        sizes["resident memory"] = float(resident) * 2**20  # MiB in serverStatus
    return sizes


if __name__ == "__main__":
    main()
