"""The cost per job of a transactional run beside a plain one, on a server with
transactions.

    MONGOSCHED_BENCH_URI=mongodb://host:port/?directConnection=true \\
        python bench/transactions.py [--jobs 300] [--workers 4] [--rounds 3]

Both tasks insert one document (the plain one without a session, the transactional
one with ``current_job().session``) and return. For each, ``--jobs`` jobs are
scheduled in one call and run by one runner of ``--workers`` threads in this process;
printed per round and as the median: wall milliseconds per job, this process's CPU
microseconds per job (the client's share, the server being another process), and the
commands sent per job by name. The two alternate within each round, in a fresh
database each time (dropped at the end). Without a server, says so and exits.

Performance claims live here, as printed numbers, never in timed tests.
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

import pymongo
from pymongo import monitoring

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from mongosched import App, current_job  # noqa: E402


class Commands(monitoring.CommandListener):
    """Counts the commands this process sends, by name."""

    def __init__(self) -> None:
        self.counts: Counter[str] = Counter()
        self.lock = threading.Lock()

    def started(self, event: monitoring.CommandStartedEvent) -> None:
        with self.lock:
            self.counts[event.command_name] += 1

    def succeeded(self, event: monitoring.CommandSucceededEvent) -> None: ...

    def failed(self, event: monitoring.CommandFailedEvent) -> None: ...


def one_run(uri: str, jobs: int, workers: int, transactional: bool) -> dict[str, Any]:
    listener = Commands()
    client: Any = pymongo.MongoClient(uri, tz_aware=True, event_listeners=[listener])
    name = f"mongosched_bench_tx_{uuid.uuid4().hex[:8]}"
    database = client[name]
    try:
        database.create_collection("effects")
        effects = database["effects"]
        app = App(database=database, poll_interval=0.02)
        app.ensure_indexes()

        @app.task(name="work", transactional=transactional)
        def work(n: int) -> None:
            job = current_job()
            effects.insert_one({"_id": n}, session=None if job is None else job.session)

        done = threading.Semaphore(0)
        app.on("job:success", lambda event: done.release())
        app.schedule_bulk([work.job(n) for n in range(jobs)])
        listener.counts.clear()
        runner = app.runner(workers=workers)
        cpu, wall = time.process_time(), time.perf_counter()
        runner.start()
        for _ in range(jobs):
            done.acquire()
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        runner.stop(timeout=10)
        assert effects.count_documents({}) == jobs
        counts = dict(listener.counts)
        return {
            "ms_per_job": wall * 1000 / jobs,
            "cpu_us_per_job": cpu * 1e6 / jobs,
            "commands": {k: v / jobs for k, v in sorted(counts.items()) if v / jobs >= 0.05},
        }
    finally:
        client.drop_database(name)
        client.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=300)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    uri = os.environ.get("MONGOSCHED_BENCH_URI")
    if not uri:
        print("set MONGOSCHED_BENCH_URI to a server with transactions (a replica set)")
        return
    results: dict[str, list[dict[str, Any]]] = {"plain": [], "transactional": []}
    for n in range(args.rounds):
        for kind in ("plain", "transactional"):
            result = one_run(uri, args.jobs, args.workers, kind == "transactional")
            results[kind].append(result)
            print(
                f"round {n + 1} {kind:>13}: {result['ms_per_job']:.2f} ms/job, "
                f"{result['cpu_us_per_job']:.0f} us CPU/job"
            )
    print(f"\n{args.jobs} jobs, {args.workers} workers, median of {args.rounds} rounds:")
    for kind, runs in results.items():
        ms = statistics.median(r["ms_per_job"] for r in runs)
        cpu = statistics.median(r["cpu_us_per_job"] for r in runs)
        commands = ", ".join(f"{k} {v:.2f}" for k, v in runs[-1]["commands"].items())
        print(f"  {kind:>13}: {ms:.2f} ms/job, {cpu:.0f} us CPU/job; per job: {commands}")


if __name__ == "__main__":
    main()
