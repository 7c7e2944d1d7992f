"""A worker for tests/faults/test_partition.py, run on either side of a network partition.

Run as ``python -m tests.support.partition_app URI RUNS_FILE [--workers N] [--lease S]
[--name NAME]`` (tests.support.processes.worker_arguments). It registers
``partition.work(seconds)``: a task that works for ``seconds`` in short steps and stops
early once its context is cancelled (its lease lost, which is how a holder cut off from
the database learns it must stop). Each run appends a ``start`` and an ``end`` line of
JSON to RUNS_FILE, a local file: both sides of the partition share this machine's file
system and clock, and neither line depends on the database, so the record survives the
partition; the ``end`` line holds the lease's end as the run's holder last knew it.
The run returns ``PID:TOKEN``, so the job's stored result names the run whose
outcome landed.
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

from mongosched import App, RetryPolicy, current_job
from tests.support.processes import run_worker, worker_arguments

STEP = 0.01
"""Seconds between the task's looks at its context."""


def _append(path: str, line: dict[str, Any]) -> None:
    # One write of one short line to a file opened for appending: whole, never interleaved.
    with open(path, "a", encoding="utf-8") as file:
        file.write(json.dumps(line) + "\n")


def build(uri: str, runs_file: str, lease: float) -> App:
    app = App(uri, lease_duration=lease, poll_interval=0.05, keep_completed=None)

    @app.task(name="partition.work", retry=RetryPolicy(retries=9, backoff="fixed", delay=0.05))
    def work(seconds: float) -> str:
        ctx = current_job()
        assert ctx is not None
        lease = getattr(ctx, "_lease", None)  # the runner's claim
        token = getattr(lease, "token", "")
        run = {"job": str(ctx.id), "token": token, "pid": os.getpid()}
        _append(runs_file, {**run, "event": "start", "t": time.time()})
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline and not ctx.is_cancelled():
            time.sleep(STEP)
        # The lease's end as this holder last knew it (renewals move it on).
        until = lease.until.timestamp() if lease is not None else None
        end = {"event": "end", "t": time.time(), "reason": ctx.cancel_reason, "until": until}
        _append(runs_file, {**run, **end})
        return f"{os.getpid()}:{token}"

    return app


def main(argv: list[str] | None = None) -> None:
    parser = worker_arguments("tests.support.partition_app")
    parser.add_argument("runs_file")
    args = parser.parse_args(argv)
    run_worker(args, lambda: build(args.uri, args.runs_file, args.lease))


if __name__ == "__main__":
    main()
