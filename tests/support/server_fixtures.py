"""Fixtures for tests that share one MongoDB between processes (import them explicitly).

``shared_db`` gives a URI naming a fresh database and the database's name, on the
session's SecantusDB server (``real_server``, tests/support/realserver.py), or with
``MONGOSCHED_TEST_URI`` on that server. ``shared_db.server`` is the SecantusDB server
(to stop, kill, start again, set fail points), or None at ``MONGOSCHED_TEST_URI``.

``standin_db`` is the same on the wire-protocol stand-in (tests/support/server.py),
started on a free port for the test, for the faults no fail point expresses: a reply
held back or lost after the write applied, every connection reset at once;
``standin_db.server`` is the stand-in. The database is dropped afterwards either way.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import pymongo
import pytest

from tests.support.realserver import RealServer
from tests.support.server import MockServer

TEST_URI = os.environ.get("MONGOSCHED_TEST_URI")

__all__ = ["SharedDatabase", "mongo_server", "shared_db", "standin_db", "with_database"]


def with_database(uri: str, name: str, **options: Any) -> str:
    """``uri`` naming database ``name``, with extra URI ``options``."""
    parts = urlsplit(uri)
    query = "&".join([q for q in [parts.query] if q] + [f"{k}={v}" for k, v in options.items()])
    return urlunsplit((parts.scheme, parts.netloc, f"/{name}", query, ""))


@dataclass
class SharedDatabase:
    base_uri: str
    name: str
    server: Any
    """The SecantusDB server (:class:`RealServer`) or the stand-in (:class:`MockServer`);
    None on the server at ``MONGOSCHED_TEST_URI``."""

    def uri(self, **options: Any) -> str:
        """The URI of this database (for ``App(uri)`` in another process)."""
        return with_database(self.base_uri, self.name, **options)

    def client(self, **options: Any) -> Any:
        return pymongo.MongoClient(self.base_uri, tz_aware=True, **options)

    def database(self, client: Any) -> Any:
        return client.get_database(self.name)


@pytest.fixture
def mongo_server() -> Iterator[MockServer]:
    """The wire-protocol stand-in, started on a free port."""
    with MockServer() as server:
        yield server


def _shared(base: str, server: MockServer | RealServer | None) -> Iterator[SharedDatabase]:
    name = f"mongosched_test_{uuid.uuid4().hex[:12]}"
    shared = SharedDatabase(base_uri=base, name=name, server=server)
    try:
        yield shared
    finally:
        if server is not None and not server.running:  # a test that stopped it failed
            server.start()
        client = shared.client(serverSelectionTimeoutMS=5000)
        try:
            client.drop_database(name)
        finally:
            client.close()


@pytest.fixture
def shared_db(request: pytest.FixtureRequest) -> Iterator[SharedDatabase]:
    """A fresh database on the server at ``MONGOSCHED_TEST_URI``, else on SecantusDB."""
    if TEST_URI:
        yield from _shared(TEST_URI, None)
        return
    server: RealServer = request.getfixturevalue("real_server")
    yield from _shared(server.uri, server)


@pytest.fixture
def standin_db(mongo_server: MockServer) -> Iterator[SharedDatabase]:
    """A fresh database on the wire-protocol stand-in."""
    yield from _shared(mongo_server.uri(), mongo_server)
