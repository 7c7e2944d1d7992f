"""Fairness scenarios that tests/integration/test_fairness.py asserts on and
bench/fairness.py prints figures of."""

from __future__ import annotations

from mongosched import App
from mongosched.testing import FakeClock, drain


def aging_stream(
    app: App, clock: FakeClock, minutes: int, report_aging: float | None = None
) -> dict[str, list[float]]:
    """A priority-9 ``report`` due at minute 0, then two priority-1 ``urgent`` jobs a
    minute while one job a minute runs, for ``minutes`` minutes (``report_aging``: the
    report's own ``aging``). The minutes each kind started at."""
    started: dict[str, list[float]] = {"report": [], "urgent": []}
    t0 = clock()

    def record(kind: str) -> None:
        started[kind].append((clock() - t0).total_seconds() / 60)

    aging = {} if report_aging is None else {"aging": report_aging}
    report = app.task(name="report", priority=9, **aging)(lambda: record("report"))
    urgent = app.task(name="urgent", priority=1)(lambda: record("urgent"))
    report.schedule()
    for _ in range(minutes):
        urgent.schedule()
        urgent.schedule()
        drain(app, limit=1)
        clock.advance(minutes=1)
    return started
