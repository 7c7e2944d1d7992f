"""Test fixtures.

Which store a test's app uses (``make_app``, ``app``):

* ``MONGOSCHED_TEST_URI`` set: a real MongoDB, a database per test (dropped after);
* else ``MONGOSCHED_TEST_STORE``: ``memory`` (the default: the in-process store),
  or ``mongomock`` (the MongoDB store on mongomock, serialised by
  ``tests/support/mongomock_db.py``: its queries, not a server's behaviour).

The store contract itself runs on every substrate in ``tests/contract``. Nothing here
may depend on which store a test runs on.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from mongosched import App
from mongosched.store.memory import MemoryStore
from mongosched.testing import FakeClock
from tests.support.waiting import wait_for

# Imported by the Django test modules before pytest loads it as their plugin.
pytest.register_assert_rewrite("tests.djangoproject.fixtures")

TEST_URI = os.environ.get("MONGOSCHED_TEST_URI")
TEST_STORE = os.environ.get("MONGOSCHED_TEST_STORE", "memory")


def pytest_report_header(config: pytest.Config) -> str:
    where = (
        "MongoDB at MONGOSCHED_TEST_URI" if TEST_URI else f"{TEST_STORE} (MONGOSCHED_TEST_STORE)"
    )
    return f"mongosched feature tests store: {where}"


@pytest.fixture
def database() -> Iterator[Any]:
    """A fresh, empty MongoDB database for this test: the real server's, or mongomock's."""
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
        from tests.support.mongomock_db import embedded_client, reset_embedded

        server = f"test-{name}"
        try:
            yield embedded_client(server).get_database(name)
        finally:
            reset_embedded(server)


@pytest.fixture
def store_target(request: pytest.FixtureRequest) -> dict[str, Any]:
    """What ``App(**store_target)`` stores in for this test."""
    if TEST_URI or TEST_STORE == "mongomock":
        return {"database": request.getfixturevalue("database")}
    name = f"test-{uuid.uuid4().hex[:12]}"
    request.addfinalizer(lambda: MemoryStore.forget(name))
    return {"uri": f"memory://{name}"}


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def make_app(store_target: dict[str, Any]) -> Iterator[Callable[..., App]]:
    """``make_app(**options)``: an App on this test's store; runners stopped at the end.
    Apps made in one test share the store, as apps of one database do."""
    apps: list[App] = []

    def make(**options: Any) -> App:
        options.setdefault("lease_duration", 5.0)
        options.setdefault("poll_interval", 0.05)
        app = App(**store_target, **options)
        apps.append(app)
        return app

    yield make
    for app in apps:
        for runner in list(app.runners):
            runner.stop(graceful=False, timeout=5)


@pytest.fixture
def app(make_app: Callable[..., App]) -> App:
    return make_app()


__all__ = ["wait_for"]
