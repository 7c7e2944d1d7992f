"""CPU per claimed job, by thread: the dispatcher's, the workers', the heartbeats'.

    python bench/jobcpu.py [--jobs 5000] [--rounds 5] [--workers 8]
                           [--targets stub,memory] [--backlogs 0,100000] [--profile N]

Each round drains ``--jobs`` no-op jobs with one runner (one dispatcher thread,
``--workers`` worker threads) in this process, and reads each thread's CPU time
(user + system, from ``/proc/self/task``) before and after: CPU, not wall time, so
that other work on the machine moves the figures less. The targets:

* ``stub``: real pymongo over a socket to bench/stub_server.py, in a process of its
  own (its CPU is not counted here), so what is measured is the client's work:
  decoding, records, transitions, encoding;
* ``memory``: ``memory://``, with ``--backlogs`` more jobs left pending behind the
  timed ones (0 and 100,000 by default: the backlog must not cost).

It prints the median of the rounds (and their range) of µs of CPU per job for the
dispatcher thread, the worker threads, the heartbeat threads and the whole process,
and jobs/s. ``--profile N`` also runs one more round of each target with the
dispatcher and the workers under :mod:`cProfile` (one profile per thread, summed by
kind) and prints the N functions of each with the most time of their own: where a
claimed job's CPU goes. Profiled rounds are slower; their figures are not reported.

Performance claims live here, as printed numbers, never in timed tests.
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import io
import pstats
import statistics
import sys
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.harness import Successes, load, start_stub  # noqa: E402
from bench.harness import thread_cpu as all_thread_cpu  # noqa: E402
from mongosched import App  # noqa: E402
from mongosched.runner.attempt import Attempt  # noqa: E402
from mongosched.runner.dispatcher import Dispatcher  # noqa: E402

KINDS = ("dispatcher", "worker", "heartbeat", "other")


def thread_cpu() -> Counter[str]:
    """CPU seconds of this process's threads so far, by the kinds this script reports."""
    return all_thread_cpu(KINDS)


class Collections:
    """The CPU seconds the garbage collector's collections took so far, whichever thread
    ran them (one collection runs at a time)."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self._started = 0.0

    def __call__(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._started = time.thread_time()
        else:
            self.seconds += time.thread_time() - self._started


COLLECTIONS = Collections()
gc.callbacks.append(COLLECTIONS)


class Profiles:
    """One :class:`cProfile.Profile` per thread, summed by kind when read."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.by_kind: dict[str, list[cProfile.Profile]] = {"dispatcher": [], "worker": []}
        self.local = threading.local()

    def run(self, kind: str, call: Callable[[], Any]) -> Any:
        profile = getattr(self.local, "profile", None)
        if profile is not None:  # a nested call in a thread already profiled
            return call()
        profile = self.local.profile = cProfile.Profile(time.thread_time)
        with self.lock:
            self.by_kind[kind].append(profile)
        profile.enable()
        try:
            return call()
        finally:
            profile.disable()
            self.local.profile = None

    def report(self, kind: str, jobs: int, top: int) -> str:
        profiles = self.by_kind[kind]
        if not profiles:
            return f"  ({kind}: nothing profiled)"
        out = io.StringIO()
        stats = pstats.Stats(profiles[0], stream=out)
        for profile in profiles[1:]:
            stats.add(profile)
        total = sum(row[2] for row in stats.stats.values())  # type: ignore[attr-defined]
        out.write(f"  {kind}: {total / jobs * 1e6:,.0f} µs/job under the profiler\n")
        stats.sort_stats("tottime").print_stats(top)
        return out.getvalue()


@contextmanager
def profiled(profiles: Profiles) -> Iterator[None]:
    """Profile the dispatcher's thread and every worker's runs of a claim."""
    run, work = Dispatcher._run, Attempt.work

    def dispatcher_run(self: Dispatcher) -> None:
        profiles.run("dispatcher", lambda: run(self))

    def worker_work(self: Attempt, claim: Any) -> None:
        profiles.run("worker", lambda: work(self, claim))

    Dispatcher._run = dispatcher_run  # type: ignore[method-assign]
    Attempt.work = worker_work  # type: ignore[method-assign]
    try:
        yield
    finally:
        Dispatcher._run = run  # type: ignore[method-assign]
        Attempt.work = work  # type: ignore[method-assign]


def drain(app: App, noop: Any, jobs: int, backlog: int, workers: int) -> dict[str, float]:
    """Schedule ``jobs`` (and ``backlog`` more, due later than them), run them with one
    runner, and return µs of CPU per job by kind of thread, and jobs/s."""
    for start in range(0, jobs, 10_000):
        app.schedule_bulk(noop.job() for _ in range(min(10_000, jobs - start)))
    for start in range(0, backlog, 10_000):
        app.schedule_bulk(noop.job() for _ in range(min(10_000, backlog - start)))
    done = Successes(app, jobs)
    runner = app.runner(workers=workers)
    collected = COLLECTIONS.seconds
    before = thread_cpu()
    started = time.perf_counter()
    runner.start()
    done.wait(600)
    seconds = time.perf_counter() - started
    used = thread_cpu() - before  # before the stop: what draining cost, not stopping
    collected = COLLECTIONS.seconds - collected
    runner.stop(graceful=False, timeout=30)
    done.close()
    figures = {kind: used[kind] / jobs * 1e6 for kind in KINDS}
    figures["total"] = sum(used.values()) / jobs * 1e6
    figures["gc"] = collected / jobs * 1e6
    figures["jobs/s"] = jobs / seconds
    return figures


def make_app(target: str, uri: str | None) -> tuple[App, Any]:
    if target == "stub":
        base, _, query = (uri or "").partition("?")
        app = App(f"{base.rstrip('/')}/jobcpu_{uuid.uuid4().hex[:8]}?{query}")
    else:
        app = App(f"memory://jobcpu-{uuid.uuid4().hex}")
    return app, app.task(name="noop", retry=0)(lambda: None)


def median_line(label: str, rows: list[dict[str, float]]) -> str:
    def cell(key: str, unit: str = "") -> str:
        values = sorted(row[key] for row in rows)
        return f"{key} {statistics.median(values):,.0f}{unit} ({values[0]:,.0f}–{values[-1]:,.0f})"

    return f"{label}: " + ", ".join(
        [
            *(cell(kind) for kind in ("dispatcher", "worker", "heartbeat", "total")),
            cell("gc"),
            cell("jobs/s"),
        ]
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add = parser.add_argument
    add("--jobs", type=int, default=5000, help="jobs timed per round")
    add("--rounds", type=int, default=5)
    add("--workers", type=int, default=8)
    add("--targets", default="stub,memory")
    add("--backlogs", default="0,100000", help="pending jobs behind the timed ones (memory)")
    add("--profile", type=int, default=0, help="print the N costliest functions per thread")
    options = parser.parse_args()
    targets = options.targets.split(",")
    backlogs = [int(b.replace("_", "")) for b in options.backlogs.split(",")]
    cases = [("stub", 0)] * ("stub" in targets) + [("memory", b) for b in backlogs] * (
        "memory" in targets
    )
    print(
        f"mongosched jobcpu: Python {sys.version.split()[0]}, {options.jobs:,} no-op jobs a "
        f"round, 1 dispatcher + {options.workers} workers, {options.rounds} rounds; "
        f"µs of thread CPU per job, median (range); {load()}",
        flush=True,
    )
    process, uri = start_stub() if "stub" in targets else (None, None)
    try:
        rows: dict[tuple[str, int], list[dict[str, float]]] = {case: [] for case in cases}
        for _ in range(options.rounds):  # the cases alternate: load falls on each alike
            for target, backlog in cases:
                app, noop = make_app(target, uri)
                rows[(target, backlog)].append(
                    drain(app, noop, options.jobs, backlog, options.workers)
                )
                app.close()
        for (target, backlog), values in rows.items() if options.rounds else ():
            label = target if target == "stub" else f"memory, backlog {backlog:,}"
            print(median_line(label, values), flush=True)
        if options.profile:
            for target, backlog in cases:
                profiles = Profiles()
                app, noop = make_app(target, uri)
                with profiled(profiles):
                    drain(app, noop, options.jobs, backlog, options.workers)
                app.close()
                print(f"\nprofile, {target}, backlog {backlog:,}:")
                for kind in ("dispatcher", "worker"):
                    print(profiles.report(kind, options.jobs, options.profile))
    finally:
        if process is not None:
            process.terminate()
            process.wait(10)
    print(load())


if __name__ == "__main__":
    main()
