"""How long the dashboard's pages take to answer with a large store behind them.

    python bench/dashboard.py [--jobs 100000] [--repeat 5]

Fills a ``memory://`` store (in-process: the figures are the dashboard's own cost plus
the store's reads, no network) with ``--jobs`` jobs of 8 tasks in 4 queues — a third
completed, a tenth failed, the rest pending (half of them due) — and prints, per page,
the median time of ``--repeat`` requests through the standalone WSGI application.

Performance claims live here, as printed numbers, never in timed tests.
"""

from __future__ import annotations

import argparse
import io
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from mongosched import App, RetryPolicy  # noqa: E402
from mongosched.dashboard import StandaloneDashboard  # noqa: E402
from mongosched.testing import FakeClock, drain  # noqa: E402

TOKEN = "bench-token-0123456789abcdef"


def fill(app: App, clock: FakeClock, total: int) -> None:
    tasks = []
    for i in range(8):

        def work(n: int, fail: bool = False) -> int:
            if fail:
                raise ValueError(f"job {n} failed")
            return n

        tasks.append(app.task(name=f"bench.task{i}", queue=f"q{i % 4}", retry=RetryPolicy(0))(work))
    finished = total * 43 // 100
    for start in range(0, finished, 5000):
        count = min(5000, finished - start)
        app.schedule_bulk(tasks[n % 8].job(n, fail=n % 4 == 0) for n in range(start, start + count))
        drain(app)
        clock.advance(seconds=60)
    pending = total - finished
    for start in range(0, pending, 5000):
        count = min(5000, pending - start)
        app.schedule_bulk(
            tasks[n % 8].configure(delay=0 if n % 2 else 3600).job(n)
            for n in range(start, start + count)
        )
    clock.advance(seconds=30)


def call(wsgi: Any, path: str) -> tuple[int, int]:
    path, _, query = path.partition("?")
    environ = {
        "REQUEST_METHOD": "GET",
        "PATH_INFO": path,
        "QUERY_STRING": query,
        "HTTP_AUTHORIZATION": f"Bearer {TOKEN}",
        "HTTP_HOST": "bench",
        "wsgi.input": io.BytesIO(),
        "wsgi.url_scheme": "http",
    }
    status: list[int] = []
    body = b"".join(wsgi(environ, lambda s, h: status.append(int(s.split()[0]))))
    return status[0], len(body)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    clock = FakeClock()
    app = App("memory://bench-dashboard", clock=clock)
    started = time.perf_counter()
    fill(app, clock, args.jobs)
    print(f"store: {app.count_jobs():,} jobs, filled in {time.perf_counter() - started:.1f} s")
    wsgi = StandaloneDashboard(app, TOKEN)
    failed = app.get_jobs(status="failed", limit=1)[0]
    pages = [
        ("overview", "/"),
        ("jobs, first page", "/jobs"),
        ("jobs, failed, page 40", "/jobs?status=failed&page=40"),
        ("jobs, task+status filter", "/jobs?task=bench.task3&status=pending&sort=run_at"),
        ("jobs, error type", "/jobs?error=ValueError"),
        ("a job", f"/jobs/{failed.id}"),
        ("bulk retry confirmation (dry run)", "/bulk/retry?task=bench.task0&status=failed"),
        ("schedules", "/schedules"),
        ("runners", "/runners"),
    ]
    print(f"{'page':<36} {'median ms':>10} {'max ms':>8} {'KiB':>6}")
    for name, path in pages:
        times = []
        size = 0
        for _ in range(args.repeat):
            t0 = time.perf_counter()
            status, size = call(wsgi, path)
            times.append((time.perf_counter() - t0) * 1000)
            assert status == 200, (path, status)
        print(
            f"{name:<36} {statistics.median(times):>10.1f} {max(times):>8.1f} {size / 1024:>6.1f}"
        )


if __name__ == "__main__":
    main()
