"""CPU per job of keeping log records with the job (``capture_logs``), for a no-op task.

    python bench/joblogs.py [--jobs 5000] [--rounds 7] [--json]

In one process, on ``memory://`` (no round trip to hide behind: what is measured is the
runner's own CPU), a backlog of ``--jobs`` jobs of a task that does nothing is scheduled
(not timed), then run to the end in this thread (``drain``: the runner's claim, run and
outcome write), timing the process's CPU (``time.process_time``). Each round runs the
same task registered with ``capture_logs=True`` (the default) and ``capture_logs=False``,
in alternating order, and, for scale, a task that logs three INFO lines (kept). Figures
are medians over the rounds, in microseconds of CPU per job. The logger of the logging
task lets INFO through; no handler is configured, so nothing is written anywhere.

On a busy machine the difference between the two no-op runs drowns in the noise, so
the script also times what capture adds to a run that logs nothing, alone
(``timeit``: a ``Capture`` made, set in its context variable, reset, asked for its
entries), beside a bare context variable set and reset for scale.
"""

from __future__ import annotations

import argparse
import contextvars
import json
import logging
import statistics
import sys
import time
import timeit
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from mongosched import App  # noqa: E402
from mongosched._core.records import JobRecord  # noqa: E402
from mongosched.observe import logs  # noqa: E402
from mongosched.testing import drain  # noqa: E402

log = logging.getLogger("bench.joblogs")


def build() -> App:
    app = App("memory://")

    @app.task(name="noop_on")
    def noop_on() -> None:
        return None

    @app.task(name="noop_off", capture_logs=False)
    def noop_off() -> None:
        return None

    @app.task(name="logs_three")
    def logs_three() -> None:
        log.info("one")
        log.info("two %d", 2)
        log.info("three %s", "three")

    return app


def cpu_per_job(app: App, task: str, jobs: int) -> float:
    """Microseconds of this process's CPU per job to run ``jobs`` jobs of ``task``."""
    app.schedule_bulk(app.get_task(task).job() for _ in range(jobs))
    before = time.process_time()
    ran = drain(app)
    spent = time.process_time() - before
    assert ran == jobs, (ran, jobs)
    return spent / jobs * 1e6


def setup_cost(number: int = 200_000) -> tuple[float, float]:
    """Microseconds that capture adds to a run that logs nothing, and a bare context
    variable's set and reset, each alone (the best of five timings)."""
    now = App("memory://").now()
    record = JobRecord(task="t", run_at=now, created_at=now, updated_at=now, attempts=1)
    var: contextvars.ContextVar[int | None] = contextvars.ContextVar("bench", default=None)

    def capture() -> None:
        kept = logs.Capture(record, logging.INFO)
        token = logs.capturing(kept)
        logs.uncapture(token)
        kept.result()

    def bare() -> None:
        var.reset(var.set(1))

    timings = [
        min(timeit.repeat(fn, number=number, repeat=5)) / number * 1e6 for fn in (capture, bare)
    ]
    return timings[0], timings[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--jobs", type=int, default=5000)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    log.setLevel(logging.INFO)
    app = build()
    cpu_per_job(app, "noop_on", 500)  # warm up: imports, the record factory in place
    cpu_per_job(app, "logs_three", 500)
    figures: dict[str, list[float]] = {"noop_on": [], "noop_off": [], "logs_three": []}
    for n in range(args.rounds):
        order = ["noop_on", "noop_off"] if n % 2 == 0 else ["noop_off", "noop_on"]
        for task in [*order, "logs_three"]:
            figures[task].append(cpu_per_job(app, task, args.jobs))
        app.purge_jobs(status="completed")
    medians = {task: statistics.median(values) for task, values in figures.items()}
    alone, bare = setup_cost()
    spread = {task: (min(v), max(v)) for task, v in figures.items()}
    if args.json:
        data = {"jobs": args.jobs, "rounds": args.rounds, "median_us": medians}
        print(json.dumps({**data, "capture_setup_us": alone, "contextvar_us": bare}))
        return
    print(f"{args.jobs} jobs x {args.rounds} rounds, memory://, one thread (CPU per job)")
    labels = {
        "noop_off": "no-op task, capture_logs=False",
        "noop_on": "no-op task, capture_logs=True (default)",
        "logs_three": "task logging 3 INFO lines, kept",
    }
    for task in ("noop_off", "noop_on", "logs_three"):
        low, high = spread[task]
        print(f"  {labels[task]:42s} {medians[task]:7.1f} us  (min {low:.1f}, max {high:.1f})")
    extra = medians["noop_on"] - medians["noop_off"]
    print(f"  capture on - off, no-op task: {extra:+.1f} us per job")
    print(f"  capture's setup alone: {alone:.2f} us per run (a context variable: {bare:.2f} us)")


if __name__ == "__main__":
    main()
