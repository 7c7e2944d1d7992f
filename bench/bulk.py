"""Bulk retry of failed jobs by filter, and the one-job-at-a-time loop it replaces.

    python bench/bulk.py [--jobs 10000] [--batch 500] [--loop-jobs 2000] [--json]

For each store: memory://, the MongoDB store on mongomock in-process, and the MongoDB
store through real pymongo and a socket to the test stand-in (tests/support/server.py,
in a process of its own; with MONGOSCHED_BENCH_URI set, that server instead, in a
database of its own dropped at the end):

* ``--jobs`` failed jobs (half with the error type filtered on) are stored directly;
* ``retry_jobs(task=..., error_type=..., dry_run=True)``: the count, timed;
* ``retry_jobs(task=..., error_type=...)``: seconds, batches, and (over the wire)
  the commands sent and the most ids in one write: bounded, whatever the matches;
* the loop it replaces, ``retry_job(id)`` for each of ``--loop-jobs`` jobs: jobs/s.

Performance claims live here, as printed numbers, never in timed tests.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
import uuid
from collections import Counter
from dataclasses import replace
from datetime import timedelta
from pathlib import Path
from typing import Any

from pymongo import monitoring

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bson import ObjectId  # noqa: E402

from bench.harness import start_stand_in  # noqa: E402
from mongosched import App, JobStatus  # noqa: E402
from mongosched._core.records import ErrorInfo, JobRecord  # noqa: E402
from mongosched.store.memory import MemoryStore  # noqa: E402
from mongosched.store.mongo.documents import to_document  # noqa: E402

results: dict[str, Any] = {}


class Commands(monitoring.CommandListener):
    """Counts the commands pymongo sends, and the largest ``$in`` of ids in a write."""

    def __init__(self) -> None:
        self.counts: Counter[str] = Counter()
        self.largest_write = 0

    def started(self, event: monitoring.CommandStartedEvent) -> None:
        self.counts[event.command_name] += 1
        for key in ("updates", "deletes"):
            for op in event.command.get(key, []):
                ids = op.get("q", {}).get("_id", {})
                if isinstance(ids, dict) and "$in" in ids:
                    self.largest_write = max(self.largest_write, len(ids["$in"]))

    def succeeded(self, event: monitoring.CommandSucceededEvent) -> None: ...

    def failed(self, event: monitoring.CommandFailedEvent) -> None: ...


def fill(app: App, n: int, stand_in: bool) -> None:
    """``n`` failed jobs of task ``bench.flaky``: half ValueError, half KeyError. On a
    stand-in, written as documents before any index (mongomock checks a unique index by
    scanning every document on each insert, and has no query planner to use indexes);
    elsewhere through the store, indexes first."""
    now = app.now()
    records = [
        JobRecord(
            id=ObjectId(),
            task="bench.flaky",
            run_at=now,
            created_at=now,
            updated_at=now,
            status=JobStatus.FAILED,
            attempts=1,
            max_attempts=1,
        )
        for _ in range(n)
    ]
    if isinstance(app.store, MemoryStore):
        errors = [ErrorInfo("ValueError" if i % 2 else "KeyError", "boom") for i in range(n)]
        app.store.jobs.insert(
            [replace(r, error=e, finished_at=now) for r, e in zip(records, errors, strict=True)]
        )
        return
    if not stand_in:
        app.ensure_indexes()
    else:
        app.store.prepare = lambda: None  # type: ignore[method-assign]
        app.ensure_indexes()
    docs = []
    for i, record in enumerate(records):
        doc = to_document(record)
        kind = "ValueError" if i % 2 else "KeyError"
        doc.update(error={"type": kind, "message": "boom"}, finished_at=now)
        docs.append(doc)
    for start in range(0, n, 5000):
        app.store.connection.jobs.insert_many(docs[start : start + 5000])  # type: ignore[attr-defined]


def measure(
    name: str, app: App, args: argparse.Namespace, commands: Commands | None, stand_in: bool
) -> None:
    fill(app, args.jobs, stand_in)
    matching = args.jobs // 2
    started = time.perf_counter()
    counted = app.retry_jobs(task="bench.flaky", error_type="ValueError", dry_run=True)
    count_s = time.perf_counter() - started
    if commands is not None:
        commands.counts.clear()
        commands.largest_write = 0
    started = time.perf_counter()
    retried = app.retry_jobs(task="bench.flaky", error_type="ValueError", batch_size=args.batch)
    retry_s = time.perf_counter() - started
    assert counted == matching and retried == matching, (counted, retried)
    assert app.count_jobs(status="pending") == matching
    row: dict[str, Any] = {
        "jobs": args.jobs,
        "matching": matching,
        "dry_run_s": round(count_s, 3),
        "retry_s": round(retry_s, 3),
        "jobs_per_s": round(retried / retry_s),
        "batches": math.ceil(matching / args.batch),
    }
    if commands is not None:  # the bulk retry's alone
        row["commands"] = dict(commands.counts)
        row["largest_write_ids"] = commands.largest_write
    # The loop it replaces: one retry_job per job.
    app.store.jobs.purge([JobStatus.FAILED], app.now() + timedelta(days=1), "bench.flaky")
    loop = args.loop_jobs
    fill(app, loop, stand_in)
    ids = [j.id for j in app.get_jobs(task="bench.flaky", status="failed", limit=0)]
    started = time.perf_counter()
    for job_id in ids:
        app.retry_job(job_id)
    loop_s = time.perf_counter() - started
    row["loop_jobs"] = len(ids)
    row["loop_jobs_per_s"] = round(len(ids) / loop_s)
    results[name] = row
    print(
        f"{name}: retry of {matching} of {args.jobs} failed jobs: {retry_s:.2f} s "
        f"({row['jobs_per_s']} jobs/s) in {row['batches']} batches of <= {args.batch}; "
        f"dry-run count {count_s * 1000:.0f} ms; the retry_job loop: "
        f"{row['loop_jobs_per_s']} jobs/s",
        flush=True,
    )
    if commands is not None:
        print(
            f"  the bulk retry's commands: {row['commands']}; most ids in one write: "
            f"{row['largest_write_ids']}",
            flush=True,
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--batch", type=int, default=500)
    parser.add_argument("--loop-jobs", type=int, default=2000)
    parser.add_argument("--wire-jobs", type=int, default=10_000, help="jobs over the wire")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()

    measure("memory://", App("memory://"), args, None, False)

    from tests.support.mongomock_db import embedded_client

    database = embedded_client("bench").get_database("bench")
    measure("mongomock (MongoStore in-process)", App(database=database), args, None, True)

    commands = Commands()
    monitoring.register(commands)
    given = os.environ.get("MONGOSCHED_BENCH_URI")
    process = None
    if given:
        name = f"bench_{uuid.uuid4().hex[:8]}"
        base, _, query = given.partition("?")
        uri = f"{base.rstrip('/').rsplit('/', 1)[0]}/{name}" + (f"?{query}" if query else "")
        where = "MongoDB at MONGOSCHED_BENCH_URI"
    else:
        process, base = start_stand_in()
        uri = base.replace("/?", "/bench?") if "/?" in base else base.rstrip("/") + "/bench"
        where = "wire stand-in (MongoStore over pymongo)"
    app = App(uri, connect_timeout=30)
    try:
        wire = argparse.Namespace(**{**vars(args), "jobs": args.wire_jobs})
        measure(where, app, wire, commands, not given)
    finally:
        if given:
            app.store.connection.database.client.drop_database(app.store.connection.database.name)  # type: ignore[attr-defined]
        app.close()
        if process is not None:
            process.terminate()
            process.wait(10)
    if args.json:
        print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
