"""Fair shares across keys and priority aging: start shares and waiting times.

    python bench/fairness.py [--backlog 10000] [--workers 4] [--uri memory://] [--json]

Three scenarios, each printed as figures:

* **backlog**: tenant A schedules ``--backlog`` jobs, then tenant B 10, and a runner
  with ``--workers`` threads drains them: where B's starts come among all starts, and
  how long B's jobs waited (wall time, from B's scheduling to each start), with
  ``fair_key="tenant"`` and without it (the second run stops once B's last job started,
  or after a minute);
* **weights**: keys weighted 3:1, both with a backlog: the share of the first 1,000
  starts each got;
* **delayed and stuck**: with the injectable clock, tenant A's ``--backlog`` (a tenth
  on MongoDB) and tenant B's one job scheduled 3 s ahead: where B's start comes once
  due (counted from then); and, with a job in a paused queue, B back after its own 20 jobs ran, behind A's
  backlog scheduled meanwhile: where B's next start comes;
* **aging**: with the injectable clock, a priority-9 report due at minute 0 while two
  priority-1 jobs arrive a minute and one job a minute runs: the minute the report
  started, with the report aging a level a minute, with the app's aging (every job
  ages), and without aging (within 60 minutes).

``--uri`` picks the store (``mongodb://...``: a database of its own, dropped at the
end). Performance claims live here, as printed numbers, never in timed tests.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from mongosched import App  # noqa: E402
from mongosched.testing import FakeClock, drain  # noqa: E402
from tests.support.fairness import aging_stream  # noqa: E402


class Stores:
    """Apps on ``uri``: a fresh memory store each, or a database of their own."""

    def __init__(self, uri: str) -> None:
        self.uri = uri
        self.databases: list[Any] = []

    def app(self, **options: Any) -> App:
        if self.uri.startswith("memory://"):
            return App(f"memory://bench-{uuid.uuid4().hex[:8]}", poll_interval=0.05, **options)
        import pymongo

        client: Any = pymongo.MongoClient(self.uri, tz_aware=True)
        database = client[f"bench_fairness_{uuid.uuid4().hex[:8]}"]
        self.databases.append(database)
        return App(database=database, poll_interval=0.05, **options)

    def drop(self) -> None:
        for database in self.databases:
            database.client.drop_database(database.name)


def backlog(stores: Stores, size: int, workers: int, fair: bool) -> dict[str, Any]:
    app = stores.app()
    starts: list[tuple[str, float]] = []
    lock = threading.Lock()
    options = {"fair_key": "tenant"} if fair else {}

    @app.task(name="sync", **options)
    def sync(tenant: str, n: int) -> None:
        with lock:
            starts.append((tenant, time.monotonic()))

    app.schedule_bulk([sync.job("A", n) for n in range(size)])
    scheduled = time.monotonic()
    app.schedule_bulk([sync.job("B", n) for n in range(10)])
    runner = app.runner(workers=workers).start()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        with lock:
            if sum(1 for tenant, _ in starts if tenant == "B") == 10:
                break
        time.sleep(0.01)
    runner.stop(timeout=10)
    positions = [n for n, (tenant, _) in enumerate(starts) if tenant == "B"]
    waits = [at - scheduled for tenant, at in starts if tenant == "B"]
    return {
        "fair_key": fair,
        "b_started": len(positions),
        "b_last_position": positions[-1] + 1 if positions else None,
        "starts": len(starts),
        "b_wait_max_s": round(max(waits), 3) if waits else None,
    }


def weights(stores: Stores, starts_counted: int) -> dict[str, Any]:
    app = stores.app()
    started: list[str] = []

    @app.task(name="crawl", fair_key="site", fair_weights={"big": 3})
    def crawl(site: str, n: int) -> None:
        started.append(site)

    app.schedule_bulk([crawl.job(s, n) for n in range(starts_counted) for s in ("big", "small")])
    drain(app, limit=starts_counted)
    big, small = started.count("big"), started.count("small")
    return {"starts": len(started), "big": big, "small": small, "ratio": round(big / small, 3)}


def delayed_and_stuck(stores: Stores, size: int) -> dict[str, Any]:
    clock = FakeClock()
    app = stores.app(clock=clock)
    starts: list[str] = []

    @app.task(name="sync", fair_key="tenant")
    def sync(tenant: str, n: int) -> None:
        starts.append(tenant)

    app.schedule_bulk([sync.job("A", n) for n in range(size)])
    sync.configure(delay=3).schedule("B", 0)
    drain(app, limit=2)
    starts.clear()
    clock.advance(seconds=3)
    drain(app, limit=size + 1)
    delayed = starts.index("B") + 1
    app.pause(queue="held")
    sync.configure(queue="held").schedule("X", 0)
    app.schedule_bulk([sync.job("B", n) for n in range(20)])
    drain(app, limit=20)
    starts.clear()
    clock.advance(seconds=60)
    app.schedule_bulk([sync.job("A", n) for n in range(size)])
    sync.schedule("B", 20)
    drain(app, limit=size + 1)
    return {"delayed_b_position": delayed, "returning_b_position": starts.index("B") + 1}


def aging(stores: Stores, mode: str) -> dict[str, Any]:
    clock = FakeClock()
    app = stores.app(clock=clock, **({"aging": 60} if mode == "app" else {}))
    started = aging_stream(app, clock, 60, report_aging=60 if mode == "task" else None)
    report = started["report"]
    return {"aging": mode, "report_waited_min": report[0] if report else None}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backlog", type=int, default=10_000)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--weighted-starts", type=int, default=1_000)
    parser.add_argument("--uri", default="memory://")
    parser.add_argument("--json", action="store_true")
    options = parser.parse_args()
    stores = Stores(options.uri)
    rows: dict[str, Any] = {}
    try:
        rows["backlog"] = [
            backlog(stores, options.backlog, options.workers, fair) for fair in (True, False)
        ]
        rows["weights"] = weights(stores, options.weighted_starts)
        small = options.backlog if options.uri.startswith("memory://") else options.backlog // 10
        rows["delayed"] = delayed_and_stuck(stores, min(small, 1_000))
        rows["aging"] = [aging(stores, mode) for mode in ("task", "app", "none")]
    finally:
        stores.drop()
    print(f"store {options.uri}, backlog {options.backlog}, {options.workers} workers")
    for row in rows["backlog"]:
        print(
            f"  backlog, fair_key={row['fair_key']!s:5}: B's 10 started {row['b_started']}, "
            f"last at start #{row['b_last_position']} of {row['starts']}, "
            f"B waited at most {row['b_wait_max_s']} s"
        )
    w = rows["weights"]
    print(f"  weights 3:1: {w['big']} to {w['small']} of {w['starts']} starts, {w['ratio']}:1")
    d = rows["delayed"]
    print(
        f"  B's job due in 3 s: start #{d['delayed_b_position']} once due; "
        f"B back, a job stuck in a paused queue: #{d['returning_b_position']}"
    )
    for row in rows["aging"]:
        waited = row["report_waited_min"]
        said = "never (60 min)" if waited is None else f"after {waited:g} min"
        print(f"  aging ({row['aging']}): the priority-9 report started {said}")
    if options.json:
        print(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
