"""mongosched: the no-op task, and ``burn`` (CPU-bound) for bench/processes.py."""

from __future__ import annotations

import os

from mongosched import App

app = App(os.environ["BENCH_MONGO_URI"], poll_interval=0.5)


@app.task(name="noop", retry=0)
def noop() -> None:
    return None


@app.task(name="burn", retry=0)
def burn(n: int) -> int:
    total = 0
    for i in range(n):
        total += i * i % 7
    return total
