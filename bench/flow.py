"""Claim round trips per job, with and without flow-control limits.

    python bench/flow.py [--jobs 120] [--workers 4] [--json]

Runs the same no-op jobs through one runner on real pymongo over a socket to the
wire-protocol stand-in (tests/support/server.py, in this process; or the server at
MONGOSCHED_BENCH_URI, in a database of its own dropped at the end) under each limit,
and counts the commands sent, by what they were for:

* claims (``findAndModify`` taking a pending job; one that found none is an idle
  poll, counted apart: it depends on the poll interval, not on the limits),
* limits (the rate log or keyed slots: recording a start, taking or releasing a slot),
* permits (task-wide concurrency),
* give-backs (a claimed job handed back because a limit was saturated),

per completed job, plus the jobs held back. Round trips are what a limit costs on the
claim path; the stand-in's timings mean nothing, so none are printed.
Performance claims live here, as printed numbers, never in timed tests.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import uuid
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pymongo import monitoring

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from mongosched import App  # noqa: E402

CATEGORIES = ["claims", "limits", "permits", "give-backs", "settles", "idle polls", "other"]


class Counting(monitoring.CommandListener):
    """Counts commands by what they were for (see the module)."""

    def __init__(self) -> None:
        self.counts: Counter[str] = Counter()
        self.on = False
        self._claims: set[int] = set()

    def started(self, event: monitoring.CommandStartedEvent) -> None:
        if not self.on:
            return
        cmd = dict(event.command)
        name = event.command_name
        target = str(cmd.get(name, ""))
        if target.endswith("_limits"):
            self.counts["limits"] += 1
        elif target.endswith("_permits"):
            self.counts["permits"] += 1
        elif name == "findAndModify":
            update = cmd.get("update") or {}
            status = (update.get("$set") or {}).get("status")
            if status == "running":
                self.counts["claims"] += 1
                self._claims.add(event.request_id)
            elif status == "pending" and (update.get("$set") or {}).get("attempts") is not None:
                # a pending settlement that resets attempts downwards: a give-back (the
                # bench's jobs never fail, so no retry lands here)
                self.counts["give-backs"] += 1
            elif status is not None:
                self.counts["settles"] += 1
            else:
                self.counts["other"] += 1
        else:
            self.counts["other"] += 1

    def succeeded(self, event: Any) -> None:
        if event.request_id in self._claims:
            self._claims.discard(event.request_id)
            if self.on and event.reply.get("value") is None:  # found nothing due
                self.counts["claims"] -= 1
                self.counts["idle polls"] += 1

    def failed(self, event: Any) -> None:
        pass


Scenario = tuple[str, dict[str, Any], Callable[[int], dict[str, Any]]]

SCENARIOS: list[Scenario] = [
    ("no limits", {}, lambda n: {}),
    ("concurrency=2", {"concurrency": 2}, lambda n: {}),
    ("rate 1000/s (never saturated)", {"rate_limit": "1000/s"}, lambda n: {}),
    ("rate 40/s (saturated)", {"rate_limit": "40/s"}, lambda n: {}),
    (
        "rate 10/s per key, 6 keys",
        {"rate_limit": "10/s", "rate_key": "key"},
        lambda n: {"key": f"k{n % 6}"},
    ),
    (
        "rate 2/s per key, 6 keys (saturated)",
        {"rate_limit": "2/s", "rate_key": "key"},
        lambda n: {"key": f"k{n % 6}"},
    ),
    (
        "concurrency=1 per key, 6 keys",
        {"concurrency": 1, "concurrency_key": "key"},
        lambda n: {"key": f"k{n % 6}"},
    ),
]


def run(uri: str, counting: Counting, jobs: int, workers: int, scenario: Scenario) -> dict:
    name, options, kwargs = scenario
    app = App(uri, poll_interval=0.02, lease_duration=10)
    task = app.task(name="noop", retry=0, **options)(lambda key=None: None)
    app.schedule_bulk([task.job(**kwargs(n)) for n in range(jobs)])
    runner = app.runner(workers=workers)
    counting.counts.clear()
    counting.on = True
    t0 = time.monotonic()
    runner.start()
    while app.count_jobs(status="completed") < jobs:
        time.sleep(0.05)
    elapsed = time.monotonic() - t0
    counting.on = False
    runner.stop()
    app.close()
    counts = dict(counting.counts)
    row = {c: round(counts.get(c, 0) / jobs, 2) for c in CATEGORIES}
    path = sum(counts.get(c, 0) for c in ("claims", "limits", "permits", "give-backs"))
    row["claim path"] = round(path / jobs, 2)
    row["held back"] = runner.claimer.gate.held_back
    row["seconds"] = round(elapsed, 1)
    return {"scenario": name, **row}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=120)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    counting = Counting()
    monitoring.register(counting)
    base = os.environ.get("MONGOSCHED_BENCH_URI")
    server = None
    if base is None:
        from tests.support.server import MockServer

        server = MockServer().start()
        base = server.uri()
    rows = []
    try:
        for scenario in SCENARIOS:
            db = f"bench_flow_{uuid.uuid4().hex[:8]}"
            uri = base.rstrip("/") + f"/{db}" if "?" not in base else base
            rows.append(run(uri, counting, args.jobs, args.workers, scenario))
            if server is None:
                import pymongo

                pymongo.MongoClient(base).drop_database(db)
    finally:
        if server is not None:
            server.stop()
    if args.json:
        print(json.dumps(rows, indent=2))
        return
    print(f"{args.jobs} no-op jobs, one runner x {args.workers} workers; commands per job:")
    head = ["scenario", "claim path", *CATEGORIES, "held back", "seconds"]
    widths = [max(len(h), *(len(str(r[h])) for r in rows)) for h in head]
    print("  ".join(h.ljust(w) for h, w in zip(head, widths, strict=True)))
    for r in rows:
        print("  ".join(str(r[h]).ljust(w) for h, w in zip(head, widths, strict=True)))
    print(
        "claim path = claims + limits + permits + give-backs per completed job; "
        "'settles' are the outcomes (one per job), 'idle polls' claims that found nothing "
        "due (the runner waiting out a window polls at its poll interval), 'other' the rest "
        "(heartbeats, reaper, counts by this bench)"
    )


if __name__ == "__main__":
    main()
