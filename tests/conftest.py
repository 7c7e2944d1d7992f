"""Test fixtures.

Which store a test's app uses (``make_app``, ``app``):

* ``MONGOSCHED_TEST_URI`` set: a real MongoDB, a database per test (dropped after);
* else ``MONGOSCHED_TEST_STORE``: ``memory`` (the default: the in-process store),
  or ``server`` (the MongoDB store on the session's SecantusDB server, a database per
  test).

``real_server`` is that server (tests/support/realserver.py), started on first use and
stopped at the end of the session; ``database`` is a fresh database for one test on
the server at ``MONGOSCHED_TEST_URI``, else on it. The store contract itself runs on
every substrate in ``tests/contract``. Nothing here may depend on which store a test
runs on.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from mongosched import App
from mongosched.store.memory import MemoryStore
from mongosched.testing import FakeClock
from tests.support.realserver import RealServer, missing, server_binary, session_server
from tests.support.waiting import wait_for

# Imported by test modules before pytest loads them as their plugins.
pytest.register_assert_rewrite("tests.djangoproject.fixtures", "tests.support.server_fixtures")

TEST_URI = os.environ.get("MONGOSCHED_TEST_URI")
TEST_STORE = os.environ.get("MONGOSCHED_TEST_STORE", "memory")


def pytest_report_header(config: pytest.Config) -> str:
    where = (
        "MongoDB at MONGOSCHED_TEST_URI" if TEST_URI else f"{TEST_STORE} (MONGOSCHED_TEST_STORE)"
    )
    server = missing() or f"SecantusDB at {server_binary()}"
    return f"mongosched feature tests store: {where}\nreal_server: {server}"


# What makes a test use the SecantusDB server: these fixtures, or a parameter naming it
# (the contract's substrate "server"; the "mongodb" store of tests/cli/test_cli.py's by_uri).
SERVER_FIXTURES = frozenset({"real_server", "shared_db", "database", "tx_uri", "tx_database"})


def uses_server(item: pytest.Item) -> bool:
    if SERVER_FIXTURES & set(getattr(item, "fixturenames", ())):
        return True
    if TEST_STORE == "server" and "store_target" in getattr(item, "fixturenames", ()):
        return True
    params = getattr(getattr(item, "callspec", None), "params", {})
    substrates = (params.get(name) for name in ("store", "mongo_store", "pair"))
    return "server" in substrates or params.get("by_uri") == "mongodb"


FOLDERS = (
    "unit",
    "integration",
    "processes",
    "faults",
    "contrib",
    "dashboard",
    "cli",
    "meta",
    "model",
    "contract",
)
"""The folders of tests, sorted by what they cost; each is a marker of its own
(``pytest -m unit``), applied by directory."""


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    """Captured output as text UTF-8 can carry: a test of lone surrogates logs them, and
    pytest-xdist sends each report between processes as UTF-8."""
    outcome: Any = yield
    report = outcome.get_result()
    report.sections = [(title, _utf8(text)) for title, text in report.sections]
    if isinstance(report.longrepr, str):
        report.longrepr = _utf8(report.longrepr)


def _utf8(text: str) -> str:
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def pytest_configure(config: pytest.Config) -> None:
    for folder in FOLDERS:
        config.addinivalue_line("markers", f"{folder}: the tests in tests/{folder}/")


FIRST = ("processes", "faults", "model", "contrib", "integration", "meta", "dashboard", "cli")
"""The folders whose files take longest, in the order they start: with the suite spread
over several processes (``make unit``), long files started last would leave one process
working alone at the end."""


def _start_order(item: pytest.Item, root: Path) -> int:
    try:
        folder = Path(str(item.path)).resolve().relative_to(root).parts[0]
    except ValueError:
        return len(FIRST)
    return FIRST.index(folder) if folder in FIRST else len(FIRST)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    root = Path(__file__).resolve().parent
    items.sort(key=lambda item: _start_order(item, root))  # stable: a file keeps its order
    for item in items:
        if uses_server(item):
            item.add_marker(pytest.mark.server)
        try:
            folder = Path(str(item.path)).resolve().relative_to(root).parts[0]
        except ValueError:
            continue
        if folder in FOLDERS:
            item.add_marker(folder)
            if folder == "processes":
                item.add_marker(pytest.mark.processes)


@pytest.fixture(scope="session")
def real_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RealServer]:
    """The session's SecantusDB server (skipped, or failed in CI, where not installed)."""
    with session_server(tmp_path_factory.mktemp("realserver")) as server:
        yield server


@pytest.fixture
def database(request: pytest.FixtureRequest) -> Iterator[Any]:
    """A fresh, empty MongoDB database for this test (dropped after): on the server at
    ``MONGOSCHED_TEST_URI``, else on the session's SecantusDB server."""
    import pymongo

    name = f"mongosched_test_{uuid.uuid4().hex[:12]}"
    uri = TEST_URI or request.getfixturevalue("real_server").uri
    client: Any = pymongo.MongoClient(uri, tz_aware=True)
    try:
        yield client.get_database(name)
    finally:
        client.drop_database(name)
        client.close()


@pytest.fixture
def store_target(request: pytest.FixtureRequest) -> dict[str, Any]:
    """What ``App(**store_target)`` stores in for this test."""
    if TEST_URI or TEST_STORE == "server":
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
