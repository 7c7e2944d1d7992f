"""What the tests of bounds share: an app on ``memory://`` and one on the SecantusDB
server (the bugs of unbounded values are MongoDB's: a 64-bit overflow, a command over
16 MiB), with a repeating task, and values beyond every bound."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import datetime, timezone

import pytest

from mongosched import App
from mongosched.store.memory import MemoryStore
from mongosched.testing import FakeClock
from tests.support.server_fixtures import SharedDatabase

__all__ = ["BIG", "FAR", "HUGE", "LONG", "bounded_app"]

HUGE = 2**63
"""One more than MongoDB's largest integer."""
BIG = "x" * (17 * 1024 * 1024)
"""A text that makes any command carrying it larger than MongoDB's 16 MiB."""
LONG = "y" * 2000
"""A text short enough for a URL, longer than any name taken."""
FAR = datetime(9999, 12, 30, tzinfo=timezone.utc)
"""A time a day from the end of the years a datetime holds."""


@pytest.fixture(params=["memory", "server"])
def bounded_app(request: pytest.FixtureRequest) -> Iterator[App]:
    """An app on ``memory://`` or on the server, with a task ``t`` that repeats every
    minute (its schedule in place) and a job of task ``once``."""
    if request.param == "memory":
        name = f"bounds-{uuid.uuid4().hex[:12]}"
        request.addfinalizer(lambda: MemoryStore.forget(name))
        uri = f"memory://{name}"
    else:
        shared: SharedDatabase = request.getfixturevalue("shared_db")
        uri = shared.uri()
    app = App(uri, clock=FakeClock(), lease_duration=5, poll_interval=0.05)
    app.task(name="t", every=60)(lambda: None)
    app.task(name="once")(lambda: None)
    app.ensure_schedules()
    app.schedule("once")
    yield app
    app.close()
