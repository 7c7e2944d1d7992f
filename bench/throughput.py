"""Throughput of no-op jobs, in memory and through the MongoDB wire protocol.

    python bench/throughput.py [--backlogs 1000,10000,100000] [--timed 5000] [--json] [--help]

1. memory://, 8 workers: jobs/s and CPU per job at a 1,000, 10,000 and 100,000-job
   backlog (scheduled with schedule_bulk; ``--timed`` jobs are timed out of it, in
   refilled rounds when the backlog is smaller), the ratio of the smallest's rate to
   the largest's, and the due-to-start delay (started_at - run_at; ``--delay-jobs 0``:
   not measured).
2. Real pymongo over a socket to bench/stub_server.py (a fast in-memory wire-protocol
   server) in a process of its own, so the CPU taken here is the client's alone: round
   trips per job by phase (see phase_of) with a backlog and for a job scheduled alone
   to an idle runner, client CPU us/job (and by thread: dispatcher, workers,
   heartbeats), jobs/s. ``--stand-in-jobs N``: the same through the test stand-in
   (tests/support/server.py; slow). With MONGOSCHED_BENCH_URI set, the same on that
   server, in a database of its own that is dropped at the end. ``--stub-jobs 0``:
   memory:// alone.

Performance claims live here, as printed numbers, never in timed tests.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import sys
import threading
import time
import timeit
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import pymongo
from pymongo import monitoring

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.harness import Successes, start_stand_in, start_stub, thread_cpu  # noqa: E402
from mongosched import App  # noqa: E402

GOAL_RATE, GOAL_RATIO = 2_000, 1.5
PHASES = ["scheduling", "claiming", "finishing", "heartbeats", "maintenance", "idle polls"]
SETUP = {"createIndexes", "listIndexes", "hello", "isMaster", "ismaster", "endSessions"}
STAND_IN_NOTE = (
    "jobs/s measures the stand-in (mongomock scans the collection on every command); "
    "client CPU us/job measures the client, somewhat inflated by the stand-in's slow "
    "replies (a thread woken after a long wait costs more CPU)"
)
results: dict[str, Any] = {}
quiet = False


def say(*lines: str) -> None:
    if not quiet:
        print(*lines, sep="\n", flush=True)


def noop_app(uri: str | None = None, **options: Any) -> tuple[App, Any]:
    app = App(uri, **options)
    return app, app.task(name="noop", retry=0)(lambda: None)


def run(
    app: App, workers: int, jobs: int, threads: Counter[str] | None = None
) -> tuple[float, float]:
    """Start a runner, wait for ``jobs`` successes, stop it: (seconds, CPU seconds);
    with ``threads``, add the CPU seconds of each kind of thread to it."""
    done = Successes(app, jobs)
    runner = app.runner(workers=workers)
    before = thread_cpu()
    cpu, started = time.process_time(), time.perf_counter()
    runner.start()
    done.wait(600)
    seconds, cpu = time.perf_counter() - started, time.process_time() - cpu
    if threads is not None:
        threads.update(thread_cpu() - before)
    runner.stop(graceful=True)
    done.close()
    return seconds, cpu


class FullCollections:
    """The garbage collector's full (generation 2) passes, and their seconds, while
    :attr:`counting`: each stops every thread for a time that grows with the objects
    the whole process holds (a large backlog among them), at moments the allocations
    of any app in the process decide."""

    def __init__(self) -> None:
        self.counting = False
        self.passes, self.seconds, self._began = 0, 0.0, 0.0
        gc.callbacks.append(self._seen)

    def _seen(self, phase: str, info: dict[str, int]) -> None:
        if info["generation"] != 2 or not self.counting:
            return
        if phase == "start":
            self._began = time.perf_counter()
        else:
            self.passes += 1
            self.seconds += time.perf_counter() - self._began

    def close(self) -> None:
        gc.callbacks.remove(self._seen)


def memory_rates(backlogs: list[int], timed: int, workers: int, chunk: int, repeat: int) -> dict:
    """Runs of ``timed`` jobs, each backlog in an app of its own, topped up before each
    run; the runs alternate between backlogs, so that load from elsewhere on the machine
    falls on each alike. Median of ``repeat`` runs, and the full collections that fell
    in each backlog's runs (all of them)."""
    apps = {backlog: noop_app(f"memory://bench-{uuid.uuid4().hex}") for backlog in backlogs}
    runs: dict[int, list[tuple[float, float]]] = {backlog: [] for backlog in backlogs}
    collections = {backlog: FullCollections() for backlog in backlogs}
    for _ in range(repeat):
        for backlog, (app, noop) in apps.items():
            seconds = cpu = 0.0
            for batch in (min(backlog, timed - done) for done in range(0, timed, backlog)):
                need = backlog - app.count_jobs(status="pending")
                for start in range(0, need, chunk):
                    app.schedule_bulk(noop.job() for _ in range(min(chunk, need - start)))
                collections[backlog].counting = True
                s, c = run(app, workers, batch)
                collections[backlog].counting = False
                seconds, cpu = seconds + s, cpu + c
            runs[backlog].append((timed / seconds, cpu / timed * 1e6))
    for counted in collections.values():
        counted.close()
    return {
        str(backlog): {
            "jobs_per_s": statistics.median(rate for rate, _ in values),
            "cpu_us_per_job": statistics.median(cpu for _, cpu in values),
            "runs": [rate for rate, _ in values],
            "full_collections": collections[backlog].passes,
            "full_collections_ms": collections[backlog].seconds * 1000,
        }
        for backlog, values in runs.items()
    }


def memory_delay(jobs: int, workers: int) -> dict[str, float]:
    """Jobs scheduled 10 at a time every 10 ms while a runner runs."""
    app, noop = noop_app(f"memory://bench-{uuid.uuid4().hex}")
    runner = app.runner(workers=workers).start()
    for n in range(jobs):
        noop.schedule()
        if n % 10 == 9:
            time.sleep(0.01)
    while app.count_jobs(status="completed") < jobs:
        time.sleep(0.01)
    runner.stop(graceful=True)
    finished = app.get_jobs(status="completed", limit=0)
    ms = [(j.started_at - j.run_at).total_seconds() * 1000 for j in finished]
    cuts = statistics.quantiles(ms, n=100, method="inclusive")
    return {"p50_ms": cuts[49], "p99_ms": cuts[98], "max_ms": max(ms)}


def phase_of(name: str, cmd: dict[str, Any]) -> str:
    """A command's phase, by the first rule that matches its name and shape: setup
    (indexes, the clock check: per app or runner, not per job); insert: scheduling;
    permits: claiming; ``last_write`` set (a settle, or a bulk write of settles, also
    one that carries the next batch's claims with them) or looked for: finishing;
    filter ``status: pending`` and set ``status: running`` (or a bulk
    write of such updates), or a read of due pending jobs (a batched claim's candidates):
    a claim (an idle poll if it found nothing); only ``lease.*`` set (a renewal):
    heartbeats; find by ``lease.token`` (after a retried claim) or by a list of ids (a
    batched write's read back, when an update missed): claiming; filter on
    ``lease.until`` (reaper) or aggregate (report of
    unknown tasks): maintenance."""
    query = cmd.get("query") or cmd.get("filter") or {}
    fields = (cmd.get("update") or {}).get("$set", {}) if name == "findAndModify" else {}
    updates = (cmd.get("updates") or []) if name == "update" else []
    sets = [(u.get("u") or {}).get("$set") or {} for u in updates]
    rules = [
        (name in SETUP, "setup"),
        (name == "insert", "scheduling"),
        (str(cmd.get(name, "")).endswith("_permits"), "claiming"),
        ("last_write" in fields or (name == "find" and "last_write" in query), "finishing"),
        (any("last_write" in f for f in sets), "finishing"),
        (query.get("status") == "pending" and fields.get("status") == "running", "claim"),
        (any(f.get("status") == "running" for f in sets), "claiming"),
        (name == "find" and query.get("status") == "pending" and "run_at" in query, "claim"),
        (bool(fields) and all(k.startswith("lease.") for k in fields), "heartbeats"),
        (name == "find" and "lease.token" in query, "claiming"),
        (name == "find" and set(query) == {"_id"} and "$in" in _mapping(query["_id"]), "claiming"),
        ("lease.until" in query or name == "aggregate", "maintenance"),
    ]
    return next((phase for matched, phase in rules if matched), f"other: {name}")


def _mapping(value: Any) -> Any:
    return value if isinstance(value, dict) else {}


class Phases(monitoring.CommandListener):
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.counts: Counter[str] = Counter()
        self.setup: Counter[str] = Counter()
        self.started_as: dict[tuple[Any, int], str] = {}

    def started(self, event: monitoring.CommandStartedEvent) -> None:
        phase = phase_of(event.command_name, dict(event.command))
        with self.lock:
            self.started_as[(event.connection_id, event.request_id)] = phase
            self.setup[event.command_name] += phase == "setup"

    def succeeded(self, event: Any) -> None:
        with self.lock:
            phase = self.started_as.pop((event.connection_id, event.request_id), "setup")
            if isinstance(event, monitoring.CommandFailedEvent):
                phase = f"failed: {phase}"
            elif phase == "claim":
                reply = event.reply
                found = reply.get("value") or (reply.get("cursor") or {}).get("firstBatch")
                phase = "claiming" if found else "idle polls"
            self.counts[phase] += 1

    failed = succeeded


def lone_jobs(app: App, noop: Any, phases: Phases, jobs: int, workers: int) -> dict[str, float]:
    """Round trips per job, by phase, of ``jobs`` jobs scheduled one at a time, each
    after the last finished, to an idle runner of ``workers`` workers."""
    done = threading.Event()
    app.on("job:success", lambda _: done.set())
    runner = app.runner(workers=workers).start()
    runner.wait_ready(30)
    with phases.lock:
        phases.counts.clear()
    for _ in range(jobs):
        done.clear()
        noop.schedule()
        if not done.wait(60):
            raise SystemExit("a lone job did not finish in 60 s")
    runner.stop(graceful=True)
    with phases.lock:
        counts = dict(phases.counts)
    return {p: counts.pop(p, 0) / jobs for p in PHASES}


def wire_run(uri: str, jobs: int, workers: int, lone: int = 20) -> dict[str, Any]:
    phases = Phases()
    client: Any = pymongo.MongoClient(uri, tz_aware=True, event_listeners=[phases])
    plain: Any = pymongo.MongoClient(uri)
    name = f"mongosched_bench_{uuid.uuid4().hex[:8]}"
    try:
        plain.admin.command("ping")
        ping = timeit.timeit(
            lambda: plain.admin.command("ping"), timer=time.process_time, number=200
        )
        app, noop = noop_app(database=client.get_database(name))
        app.ensure_indexes()
        cpu, started = time.process_time(), time.perf_counter()
        app.schedule_bulk(noop.job() for _ in range(jobs))
        schedule_s, schedule_cpu = time.perf_counter() - started, time.process_time() - cpu
        threads: Counter[str] = Counter()
        seconds, cpu = run(app, workers, jobs, threads)
        with phases.lock:
            counts, setup = dict(phases.counts), +phases.setup
        lone_trips = lone_jobs(app, noop, phases, lone, workers)
        app.close()
    finally:
        client.drop_database(name)
        client.close()
        plain.close()
    counts.pop("setup", None)
    return {
        "jobs": jobs,
        "jobs_per_s": jobs / seconds,
        "cpu_us_per_job": cpu / jobs * 1e6,
        "thread_cpu_us_per_job": {k: v / jobs * 1e6 for k, v in threads.most_common()},
        "ping_cpu_us": ping / 200 * 1e6,
        "schedule_jobs_per_s": jobs / schedule_s,
        "schedule_cpu_us_per_job": schedule_cpu / jobs * 1e6,
        "round_trips_per_job": {p: counts.pop(p, 0) / jobs for p in PHASES},
        "lone_round_trips_per_job": lone_trips,
        "setup_round_trips": dict(setup),
        "unclassified": counts,
    }


def report_wire(label: str, r: dict[str, Any], workers: int, stand_in: bool) -> None:
    trips = r["round_trips_per_job"]
    by_phase = ", ".join(f"{p} {trips[p]:.3f}" for p in PHASES)
    lone = r["lone_round_trips_per_job"]
    lone_phases = ", ".join(f"{p} {lone[p]:.2f}" for p in PHASES if lone[p])
    setup = ", ".join(f"{n} {name}" for name, n in r["setup_round_trips"].items())
    say(
        f"{label}, {r['jobs']:,} jobs, {workers} workers:",
        f"  round trips per job: {by_phase}; total {sum(trips.values()):.3f}; claiming + "
        f"finishing {trips['claiming'] + trips['finishing']:.3f} (goal <= 1.2)",
        f"  a lone job (scheduled to an idle runner): {lone_phases}; claiming + finishing "
        f"{lone['claiming'] + lone['finishing']:.2f} (goal <= 2.0), total "
        f"{sum(lone.values()):.2f}",
        f"  setup round trips (per app/runner start, not per job): {setup}",
        *([f"  unclassified round trips: {r['unclassified']}"] if r["unclassified"] else []),
        f"  schedule_bulk: {r['schedule_jobs_per_s']:,.0f} jobs/s, "
        f"client CPU {r['schedule_cpu_us_per_job']:,.0f} us/job",
        f"  run: client CPU {r['cpu_us_per_job']:,.0f} us/job, {r['jobs_per_s']:,.0f} jobs/s "
        f"(for scale: a bare pymongo ping takes {r['ping_cpu_us']:,.0f} us CPU here)",
        "  client CPU by thread, us/job: "
        + ", ".join(f"{k} {v:,.0f}" for k, v in r["thread_cpu_us_per_job"].items()),
        *[f"  note: {STAND_IN_NOTE}"] * stand_in,
    )


def main() -> None:
    global quiet
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add = parser.add_argument
    add("--workers", type=int, default=8)
    add("--backlogs", default="1000,10000,100000", help="comma-separated backlog sizes")
    add("--timed", type=int, default=5000, help="jobs timed per run (memory://)")
    add("--repeat", type=int, default=3, help="runs per backlog; the median is shown")
    add("--chunk", type=int, default=10_000, help="schedule_bulk chunk size")
    add("--delay-jobs", type=int, default=2000, help="jobs for the due-to-start delay (0: none)")
    add("--stub-jobs", type=int, default=5000, help="jobs through bench/stub_server.py (0: none)")
    add("--lone-jobs", type=int, default=50, help="jobs scheduled one at a time (wire)")
    add("--stand-in-jobs", type=int, default=0, help="jobs through the (slow) test stand-in")
    add("--wire-jobs", type=int, default=1000, help="jobs at MONGOSCHED_BENCH_URI")
    add("--json", action="store_true", help="print one JSON document instead")
    options = parser.parse_args()
    quiet, workers = options.json, options.workers
    backlogs = [int(b.replace("_", "")) for b in options.backlogs.split(",")]
    say(
        f"mongosched bench: Python {sys.version.split()[0]}, {os.cpu_count()} CPUs, no-op jobs, "
        f"1 runner x {workers} workers; memory:// rates: median of {options.repeat} runs "
        f"of {options.timed:,} jobs"
    )

    rates = results["memory"] = memory_rates(
        backlogs, options.timed, workers, options.chunk, options.repeat
    )
    for backlog in backlogs:
        r = rates[str(backlog)]
        met = "met" if r["jobs_per_s"] >= GOAL_RATE else "MISSED"
        say(
            f"memory:// {workers} workers, backlog {backlog:,}: {r['jobs_per_s']:,.0f} jobs/s "
            f"(goal >= {GOAL_RATE:,}: {met}; runs "
            f"{', '.join(f'{x:,.0f}' for x in r['runs'])}), CPU {r['cpu_us_per_job']:,.0f} us/job; "
            f"full GC passes in its runs: {r['full_collections']} "
            f"({r['full_collections_ms']:,.0f} ms)"
        )
    if len(backlogs) > 1:
        small, large = (rates[str(b)]["jobs_per_s"] for b in (min(backlogs), max(backlogs)))
        ratio = results["memory_ratio"] = small / large
        say(
            f"memory:// rate at backlog {min(backlogs):,} / rate at {max(backlogs):,}: "
            f"{ratio:.2f} (goal <= {GOAL_RATIO}: {'met' if ratio <= GOAL_RATIO else 'MISSED'})"
        )
    if options.delay_jobs:
        d = results["memory_delay"] = memory_delay(options.delay_jobs, workers)
        say(
            f"memory:// due-to-start delay of {options.delay_jobs:,} jobs scheduled 10 per 10 "
            f"ms while a runner runs: p50 {d['p50_ms']:.0f} ms, p99 {d['p99_ms']:.0f} ms, "
            f"max {d['max_ms']:.0f} ms (started_at - run_at; both stored in whole ms)"
        )
    if options.stub_jobs:
        process, uri = start_stub()
        try:
            r = results["wire_stub"] = wire_run(uri, options.stub_jobs, workers, options.lone_jobs)
        finally:
            process.terminate()
            process.wait(10)
        report_wire("wire protocol to bench/stub_server.py (own process)", r, workers, False)
    if options.stand_in_jobs:
        process, uri = start_stand_in()
        try:
            r = results["wire_stand_in"] = wire_run(uri, options.stand_in_jobs, workers)
        finally:
            process.terminate()
            process.wait(10)
        report_wire("wire protocol to the test stand-in (mongomock, own process)", r, workers, True)
    real = os.environ.get("MONGOSCHED_BENCH_URI")
    if real:
        r = results["wire_real"] = wire_run(real, options.wire_jobs, workers, options.lone_jobs)
        report_wire("MongoDB at MONGOSCHED_BENCH_URI", r, workers, False)
    if quiet:
        print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
