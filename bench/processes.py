"""How ``mongosched worker --processes N`` scales a CPU-bound task on this machine.

    python bench/processes.py [--jobs 300] [--work 150000] [--rounds 3] [--max 2]
    make bench-processes

A CPU-bound task (``burn``: a pure-Python loop of ``--work`` iterations, a few ms) is
run by ``mongosched worker --processes N --workers 2`` for N = 1 and 2 (up to
``--max``), against bench/stub_server.py in a process of its own. Each round starts
the worker, waits until every process has run a warm-up job (so start-up is not
timed), schedules ``--jobs`` jobs at once and times them until none is left. The N
alternate within each round, so load from elsewhere on the machine falls on each
alike; the median of ``--rounds`` rounds is shown, and the ratio to one process (the
goal on 2 cores: at least 1.6x with 2 processes).

Performance claims live here, as printed numbers, never in timed tests.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from harness import BENCH, ROOT, load, start_stub, stop, tree_cpu  # noqa: E402

GOAL = 1.6
sys.path.insert(0, str(BENCH / "peer_apps"))


def run(uri: str, processes: int, threads: int, jobs: int, work: int) -> tuple[float, float]:
    """Jobs per second of one timed run, and the cores the worker kept busy (its CPU
    seconds per second)."""
    import pymongo

    os.environ["BENCH_MONGO_URI"] = uri
    import ms_app

    app = ms_app.app
    burn = app.get_task("burn")
    client: Any = pymongo.MongoClient(uri)
    jobs_coll = client.get_default_database()["mongosched_jobs"]
    jobs_coll.delete_many({})
    left = {"status": {"$in": ["pending", "running"]}}
    env = {**os.environ, "PYTHONPATH": str(BENCH / "peer_apps")}
    command = [
        sys.executable, "-m", "mongosched", "worker", "ms_app:app", "--workers", str(threads),
        "--processes", str(processes), "--log-level", "warning", "--poll-interval", "0.05",
    ]  # fmt: skip
    worker = subprocess.Popen(command, cwd=ROOT, env=env)
    try:
        owners: set[str] = set()
        deadline = time.monotonic() + 120
        while len({o.rsplit(":", 1)[0] for o in owners}) < processes:  # host:pid per process
            if time.monotonic() > deadline or worker.poll() is not None:
                raise RuntimeError(f"not every process of the worker started ({owners})")
            app.schedule_bulk(burn.job(work) for _ in range(processes * threads))
            time.sleep(0.05)
            owners |= {
                d["lease"]["owner"] for d in jobs_coll.find({"status": "running"}, {"lease": 1})
            }
        while jobs_coll.count_documents(left):
            time.sleep(0.01)
        app.schedule_bulk(burn.job(work) for _ in range(jobs))
        started, cpu = time.perf_counter(), tree_cpu(worker.pid)
        while jobs_coll.count_documents(left):
            time.sleep(0.005)
        seconds = time.perf_counter() - started
        return jobs / seconds, (tree_cpu(worker.pid) - cpu) / seconds
    finally:
        stop(worker)
        client.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=300)
    parser.add_argument("--work", type=int, default=150_000, help="loop iterations per job")
    parser.add_argument("--threads", type=int, default=2, help="--workers of each process")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--max", type=int, default=2, help="up to this many processes")
    options = parser.parse_args()
    counts = list(range(1, options.max + 1))
    before = load()
    stub, uri = start_stub()
    rates: dict[int, list[float]] = {n: [] for n in counts}
    cores: dict[int, list[float]] = {n: [] for n in counts}
    try:
        for _ in range(options.rounds):
            for n in counts:
                rate, busy = run(uri + "bench", n, options.threads, options.jobs, options.work)
                rates[n].append(rate)
                cores[n].append(busy)
                print(
                    f"  --processes {n}: {rate:,.1f} jobs/s, {busy:.2f} cores busy",
                    file=sys.stderr,
                    flush=True,
                )
    finally:
        stub.kill()
        stub.wait()
    one = statistics.median(rates[1])
    print(
        f"CPU-bound jobs ({options.work:,} loop iterations each), {options.jobs} per run, "
        f"--workers {options.threads}; {os.cpu_count()} cores; median of {options.rounds} rounds",
        f"machine: {before} before, {load()} after (other work on it takes from both runs)",
        sep="\n",
    )
    for n in counts:
        median = statistics.median(rates[n])
        runs = ", ".join(f"{r:,.1f}" for r in rates[n])
        busy = statistics.median(cores[n])
        print(
            f"--processes {n}: {median:,.1f} jobs/s ({median / one:.2f}x one process; runs {runs}); "
            f"the worker kept {busy:.2f} cores busy"
        )
    if 2 in rates:
        # Jobs per second of CPU the worker got: what the machine's other work does not
        # change (it takes cores, not CPU per job).
        per_core = {
            n: statistics.median(r / c for r, c in zip(rates[n], cores[n], strict=True))
            for n in (1, 2)
        }
        print(
            f"jobs per CPU-second of the worker: {per_core[1]:,.1f} with 1 process, "
            f"{per_core[2]:,.1f} with 2; on two idle cores (each process one core) 2 processes "
            f"would do {2 * per_core[2] / per_core[1]:.2f}x one (derived from those, not measured)"
        )
        ratio = statistics.median(rates[2]) / one
        print(
            f"goal: --processes 2 >= {GOAL}x one process: {ratio:.2f}x ({'met' if ratio >= GOAL else 'MISSED'})"
        )


if __name__ == "__main__":
    main()
