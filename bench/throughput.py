"""Throughput: schedule N no-op jobs, run them with W workers, print the figures.

    python bench/throughput.py [--jobs N] [--workers W] [--runners R]

Prints jobs per second, MongoDB round trips per job (scheduling, claiming, finishing;
counted by a pymongo command listener on a real server, or at the stand-in's collection
calls), and the delay from due time to start (p50, p99). Runs on the embedded stand-in,
or on a real server when MONGOSCHED_BENCH_URI is set (a database of its own is created
and dropped).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import threading
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from mongosched import App  # noqa: E402
from mongosched.embedded import embedded_client  # noqa: E402


class CountingCollection:
    """Counts each call that reaches the server (the stand-in's unit of a round trip)."""

    def __init__(self, target: Any, counts: Counter[str], lock: threading.Lock) -> None:
        self._target, self._counts, self._lock = target, counts, lock

    def __getattr__(self, name: str) -> Any:
        value = getattr(self._target, name)
        if not callable(value):
            return value

        def call(*args: Any, **kwargs: Any) -> Any:
            with self._lock:
                self._counts[name] += 1
            return value(*args, **kwargs)

        return call


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=1000)
    parser.add_argument("--workers", type=int, default=8)
    parser.add_argument("--runners", type=int, default=1)
    options = parser.parse_args()

    uri = os.environ.get("MONGOSCHED_BENCH_URI")
    counts: Counter[str] = Counter()
    lock = threading.Lock()
    name = f"mongosched_bench_{uuid.uuid4().hex[:8]}"
    client: Any
    if uri:
        import pymongo
        from pymongo import monitoring

        class Listener(monitoring.CommandListener):
            def started(self, event: monitoring.CommandStartedEvent) -> None:
                with lock:
                    counts[event.command_name] += 1

            def succeeded(self, event: Any) -> None: ...

            def failed(self, event: Any) -> None: ...

        client = pymongo.MongoClient(uri, tz_aware=True, event_listeners=[Listener()])
        database = client.get_database(name)
        backend = "MongoDB at MONGOSCHED_BENCH_URI"
    else:
        client = embedded_client(name)
        database = client.get_database(name)
        backend = "embedded stand-in (mongomock; every query is a scan)"

    app = App(database=database, poll_interval=0.05)
    app.task(name="noop", retry=1)(lambda n: None)
    app.ensure_indexes()
    if not uri:
        store = app._store
        store.jobs = CountingCollection(store.jobs, counts, lock)
        store.slots = CountingCollection(store.slots, counts, lock)

    def phase_counts() -> int:
        with lock:
            total = sum(
                v
                for k, v in counts.items()
                if k not in ("hello", "isMaster", "ismaster", "endSessions")
            )
            counts.clear()
        return total

    phase_counts()
    started = time.perf_counter()
    task = app.tasks["noop"]
    app.schedule_bulk(task.job(n) for n in range(options.jobs))
    schedule_seconds = time.perf_counter() - started
    schedule_trips = phase_counts()

    done = threading.Event()
    finished = Counter[str]()

    def on_success(event: Any) -> None:
        with lock:
            finished["n"] += 1
            if finished["n"] == options.jobs:
                done.set()

    app.on("job:success", on_success)
    runners = [app.runner(workers=options.workers) for _ in range(options.runners)]
    started = time.perf_counter()
    for runner in runners:
        runner.start()
    done.wait()
    elapsed = time.perf_counter() - started
    for runner in runners:
        runner.stop()
    run_trips = phase_counts()

    docs = app._store.find({"status": "completed"}, projection={"run_at": 1, "started_at": 1})
    delays = [(d["started_at"] - d["run_at"]).total_seconds() * 1000 for d in docs]
    if uri:
        client.drop_database(name)

    print(f"backend: {backend}")
    print(f"jobs: {options.jobs}, runners: {options.runners} x {options.workers} workers")
    print(
        f"schedule_bulk: {options.jobs / schedule_seconds:,.0f} jobs/s, {schedule_trips} round trip(s) in all"
    )
    print(f"run: {options.jobs / elapsed:,.0f} jobs/s ({elapsed:.2f} s)")
    print(
        f"round trips per job while running: {run_trips / options.jobs:.2f} "
        "(claim + finish, plus idle polls, reaper and completion checks)"
    )
    print(
        f"due-to-start delay: p50 {statistics.median(delays):.1f} ms, p99 {percentile(delays, 0.99):.1f} ms"
    )


if __name__ == "__main__":
    main()
