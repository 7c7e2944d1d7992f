"""Test support for transactions: a real server with multi-document transactions, a
database per test, fail points, and the worker process of the process-level tests.

The server: ``MONGOSCHED_TEST_URI`` when it names a replica set (real MongoDB), else
``MONGOSCHED_TX_URI`` (a server started by hand), else the suite's own SecantusDB
(``real_server``).

Run as ``python -m tests.support.transactions URI --workers N [--lease S]``: a worker
process whose app registers :func:`register` 's tasks and runs until killed.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import sys
import uuid
from collections.abc import Iterator
from typing import Any

import pymongo
import pytest

from mongosched import App, current_job
from mongosched.store.memory import MemoryStore

EFFECTS = "effects"
"""The side collection a transactional task writes its effect in."""


def server_uri() -> str | None:
    """The URI of a server with transactions (no database in it), or None."""
    for name in ("MONGOSCHED_TEST_URI", "MONGOSCHED_TX_URI"):
        uri = os.environ.get(name)
        if uri:
            client: Any = pymongo.MongoClient(uri, serverSelectionTimeoutMS=3000)
            try:
                if client.admin.command("hello").get("setName"):
                    return uri
            finally:
                client.close()
    return None


def database_uri(uri: str, name: str) -> str:
    """``uri`` naming database ``name``."""
    base, _, query = uri.partition("?")
    scheme, _, rest = base.partition("://")
    host = rest.split("/", 1)[0]
    return f"{scheme}://{host}/{name}" + (f"?{query}" if query else "")


@pytest.fixture
def tx_uri(request: pytest.FixtureRequest) -> str:
    """The URI of a server with transactions (no database in it): the one named by
    ``MONGOSCHED_TEST_URI`` or ``MONGOSCHED_TX_URI`` when set, else the suite's own
    server (``real_server``, which skips or fails as its rules say when it is missing)."""
    return server_uri() or str(request.getfixturevalue("real_server").uri)


@pytest.fixture
def tx_database(tx_uri: str) -> Iterator[Any]:
    """A fresh database on the transactions server."""
    client: Any = pymongo.MongoClient(tx_uri, tz_aware=True)
    name = f"mongosched_tx_{uuid.uuid4().hex[:12]}"
    try:
        yield client.get_database(name)
    finally:
        client.drop_database(name)
        client.close()


@pytest.fixture(params=["memory", "server"])
def store_target(request: pytest.FixtureRequest) -> dict[str, Any]:
    """What ``App(**store_target)`` stores in: ``memory://`` or the transactions
    server (a database per test). A test module that imports it runs each test on
    both, through the suite's ``make_app`` and ``app`` fixtures."""
    if request.param == "memory":
        name = f"tx-{uuid.uuid4().hex[:12]}"
        request.addfinalizer(lambda: MemoryStore.forget(name))
        return {"uri": f"memory://{name}"}
    return {"database": request.getfixturevalue("tx_database")}


def own_collection(app: App, name: str) -> Any:
    """A collection of the user's own on the app's client; None on ``memory://``
    (there, the writes of a transaction are its jobs only)."""
    connection = getattr(app.store, "connection", None)
    if connection is None:
        return None
    database = connection.database
    if name not in database.list_collection_names():
        # Made before any transaction writes in it: two transactions that both make
        # a collection conflict until one of them ends.
        database.create_collection(name)
    return database[name]


@contextlib.contextmanager
def fail_point(client: Any, data: dict[str, Any], times: int = 1) -> Iterator[None]:
    """The server's ``failCommand`` fail point, on for the block (``times`` hits)."""
    client.admin.command(
        {"configureFailPoint": "failCommand", "mode": {"times": times}, "data": data}
    )
    try:
        yield
    finally:
        client.admin.command({"configureFailPoint": "failCommand", "mode": "off"})


def register(app: App, effects: Any) -> Any:
    """The transactional task of the process-level tests: ``effect(key)`` inserts
    ``{_id: key}`` in ``effects`` in its transaction (a second insert of one key is a
    duplicate key: it would fail the run, and the test would see it), and reports
    its session id to ``effects_sessions`` (outside the transaction) so that a test can
    end a killed process's transaction as the server would."""

    @app.task(name="effect", transactional=True, timeout=5)
    def effect(key: str, pause: float = 0.0) -> str:
        job = current_job()
        assert job is not None and job.session is not None
        effects.insert_one({"_id": key, "pid": os.getpid()}, session=job.session)
        if pause:
            effects.database["effects_sessions"].insert_one(
                {"key": key, "lsid": job.session.session_id, "pid": os.getpid()}
            )
            import time

            time.sleep(pause)  # the test kills the process here
        return key

    return effect


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("uri")
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--lease", type=float, default=2.0)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    client: Any = pymongo.MongoClient(args.uri, tz_aware=True)
    database = client.get_default_database()
    app = App(database=database, lease_duration=args.lease, poll_interval=0.05)
    register(app, database[EFFECTS])
    app.run_worker(workers=args.workers)


if __name__ == "__main__":
    main(sys.argv[1:])
