"""Fixtures for tests that share one MongoDB between processes (import them explicitly).

``shared_db`` gives a URI naming a fresh database and the database's name. Without
``MONGOSCHED_TEST_URI`` it starts the wire-protocol stand-in (tests/support/server.py)
on a free port for the test; with it, the database lives on that real server. The
database is dropped afterwards either way. ``shared_db.server`` is the stand-in (to
stop, restart, drop connections, delay replies), or None on a real server.
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

from tests.support.server import MockServer

TEST_URI = os.environ.get("MONGOSCHED_TEST_URI")

__all__ = ["SharedDatabase", "mongo_server", "shared_db", "with_database"]


def with_database(uri: str, name: str, **options: Any) -> str:
    """``uri`` naming database ``name``, with extra URI ``options``."""
    parts = urlsplit(uri)
    query = "&".join([q for q in [parts.query] if q] + [f"{k}={v}" for k, v in options.items()])
    return urlunsplit((parts.scheme, parts.netloc, f"/{name}", query, ""))


@dataclass
class SharedDatabase:
    base_uri: str
    name: str
    server: MockServer | None

    def uri(self, **options: Any) -> str:
        """The URI of this database (for ``App(uri)`` in another process)."""
        return with_database(self.base_uri, self.name, **options)

    def client(self, **options: Any) -> Any:
        return pymongo.MongoClient(self.base_uri, tz_aware=True, **options)

    def database(self, client: Any) -> Any:
        return client.get_database(self.name)


@pytest.fixture
def mongo_server() -> Iterator[MockServer | None]:
    """The stand-in server, started on a free port (None when MONGOSCHED_TEST_URI is set)."""
    if TEST_URI:
        yield None
        return
    with MockServer() as server:
        yield server


@pytest.fixture
def shared_db(mongo_server: MockServer | None) -> Iterator[SharedDatabase]:
    name = f"mongosched_test_{uuid.uuid4().hex[:12]}"
    base = TEST_URI or (mongo_server.uri() if mongo_server is not None else "")
    shared = SharedDatabase(base_uri=base, name=name, server=mongo_server)
    try:
        yield shared
    finally:
        if mongo_server is None or mongo_server.running:
            client = shared.client(serverSelectionTimeoutMS=5000)
            try:
                client.drop_database(name)
            finally:
                client.close()
