"""Test fixtures.

Every MongoDB-facing test runs against a real server when ``MONGOSCHED_TEST_URI`` is set
(each test gets its own database, dropped afterwards), and otherwise against the embedded
stand-in (each test gets its own in-memory server). Nothing here may depend on which.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from mongosched import App
from mongosched.testing import FakeClock
from tests.support.waiting import wait_for

TEST_URI = os.environ.get("MONGOSCHED_TEST_URI")


def pytest_report_header(config: pytest.Config) -> str:
    return f"mongosched backend: {'MongoDB at MONGOSCHED_TEST_URI' if TEST_URI else 'embedded stand-in (mongomock)'}"


@pytest.fixture
def database() -> Iterator[Any]:
    """A fresh, empty database for this test."""
    name = f"mongosched_test_{uuid.uuid4().hex[:12]}"
    if TEST_URI:
        import pymongo

        client: Any = pymongo.MongoClient(TEST_URI, tz_aware=True)
        try:
            yield client.get_database(name)
        finally:
            client.drop_database(name)
            client.close()
    else:
        from mongosched.embedded import embedded_client, reset_embedded

        server = f"test-{name}"
        try:
            yield embedded_client(server).get_database(name)
        finally:
            reset_embedded(server)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def make_app(database: Any) -> Iterator[Callable[..., App]]:
    """``make_app(**options)``: an App on this test's database; runners stopped at the end."""
    apps: list[App] = []

    def make(**options: Any) -> App:
        options.setdefault("lease_duration", 5.0)
        options.setdefault("poll_interval", 0.05)
        app = App(database=database, **options)
        apps.append(app)
        return app

    yield make
    for app in apps:
        for runner in list(app._runners):
            runner.stop(graceful=False, timeout=5)


@pytest.fixture
def app(make_app: Callable[..., App]) -> App:
    return make_app()


__all__ = ["wait_for"]
