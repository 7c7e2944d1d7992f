"""The substrates the contract runs on, each a fresh, prepared, empty store per test.

* ``memory``: a private :class:`~mongosched.store.memory.MemoryStore`;
* ``server``: :class:`~mongosched.store.mongo.MongoStore` on the session's SecantusDB
  server (``real_server``, tests/support/realserver.py), a database per test;
* ``wire``: :class:`~mongosched.store.mongo.MongoStore` through pymongo and sockets to
  the wire-protocol stand-in (``tests/support/server.py``), one per session: the fault
  tests that need it rely on it keeping the contract;
* ``mongodb``: :class:`~mongosched.store.mongo.MongoStore` on the real server at
  ``MONGOSCHED_TEST_URI``, only when that is set (a database per test, dropped after).

The databases of ``server`` and ``mongodb`` are dropped after each test.

A test that finds a substrate breaking the contract records it with
``@pytest.mark.xfail_on("wire", ..., reason="...")``: a strict xfail on those
substrates only, so the suite stays green and the difference stays visible.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator

import pytest

from mongosched.store import Store
from mongosched.store.memory import MemoryStore
from mongosched.store.mongo import MongoStore
from tests.support.server import MockServer
from tests.support.server_fixtures import with_database

TEST_URI = os.environ.get("MONGOSCHED_TEST_URI")
MONGO_SUBSTRATES = ["server", "wire", *(["mongodb"] if TEST_URI else [])]
SUBSTRATES = ["memory", *MONGO_SUBSTRATES]
# MONGOSCHED_TEST_SUBSTRATES=memory,wire narrows the contract suite (make py310 does:
# the main suite runs it on the server; real pymongo still goes through wire there).
_ONLY = [s for s in os.environ.get("MONGOSCHED_TEST_SUBSTRATES", "").split(",") if s]
if _ONLY:
    MONGO_SUBSTRATES = [s for s in MONGO_SUBSTRATES if s in _ONLY]
    SUBSTRATES = [s for s in SUBSTRATES if s in _ONLY]


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "xfail_on(*substrates, reason): a known contract violation of those substrates "
        "(a strict xfail there, a normal test elsewhere)",
    )


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        callspec = getattr(item, "callspec", None)
        if callspec is None:
            continue
        substrate = callspec.params.get("store", callspec.params.get("mongo_store"))
        for mark in item.iter_markers("xfail_on"):
            if substrate in mark.args:
                item.add_marker(pytest.mark.xfail(strict=True, reason=mark.kwargs["reason"]))


@pytest.fixture(scope="session")
def wire_server() -> Iterator[MockServer]:
    """The wire-protocol stand-in, one for the session (a database per test)."""
    with MockServer() as server:
        yield server


def _unique() -> str:
    return f"contract_{uuid.uuid4().hex[:12]}"


def _open(substrate: str, request: pytest.FixtureRequest, prepare: bool) -> Iterator[Store]:
    """A fresh store on ``substrate`` (prepared if asked), its data dropped afterwards."""
    if substrate == "memory":
        store: Store = MemoryStore()
        if prepare:
            store.prepare()
        yield store
        return
    name = _unique()
    if substrate == "wire":
        server: MockServer = request.getfixturevalue("wire_server")
        uri = server.uri(name, serverSelectionTimeoutMS=5000)
    elif substrate == "server":
        uri = with_database(request.getfixturevalue("real_server").uri, name)
    else:
        assert substrate == "mongodb" and TEST_URI
        uri = with_database(TEST_URI, name)
    mongo = MongoStore(uri=uri)
    try:
        if prepare:
            mongo.prepare()
        yield mongo
    finally:
        try:
            mongo.connection.database.client.drop_database(name)
        finally:
            mongo.close()


@pytest.fixture(params=SUBSTRATES)
def store(request: pytest.FixtureRequest) -> Iterator[Store]:
    """A fresh, prepared store on each substrate."""
    yield from _open(request.param, request, prepare=True)


@pytest.fixture(params=MONGO_SUBSTRATES)
def mongo_store(request: pytest.FixtureRequest) -> Iterator[MongoStore]:
    """A fresh :class:`MongoStore` on each MongoDB substrate, *not* prepared (no
    indexes yet): the tests of what ``prepare`` makes call it themselves."""
    for opened in _open(request.param, request, prepare=False):
        assert isinstance(opened, MongoStore)
        yield opened


@pytest.fixture
def substrate(request: pytest.FixtureRequest) -> str:
    """The name of the substrate this test runs on."""
    callspec = request.node.callspec
    return str(callspec.params.get("store", callspec.params.get("mongo_store")))
