"""The serialised mongomock stand-in of the test support (``tests/support/mongomock_db``):
shared named servers, fork safety, the commands it runs itself."""

from __future__ import annotations

import os
import threading

import pytest

from mongosched import App
from tests.support.mongomock_db import embedded_client, reset_embedded
from tests.support.waiting import wait_child


def test_apps_naming_one_server_share_its_data() -> None:
    try:
        first = App(database=embedded_client("shared-test").get_database("db"))
        second = App(database=embedded_client("shared-test").get_database("db"))
        other = App(database=embedded_client("other-test").get_database("db"))
        first.task(name="t")(lambda: None)
        job = first.schedule("t")
        assert second.get_job(job.id) is not None
        assert other.get_job(job.id) is None
    finally:
        reset_embedded("shared-test")
        reset_embedded("other-test")


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_forked_child_is_not_blocked_by_a_lock_held_at_the_fork() -> None:
    server = "fork-test"
    try:
        collection = embedded_client(server).get_database("db").get_collection("c")
        collection.insert_one({"n": 1})
        lock = embedded_client(server).lock
        held, release = threading.Event(), threading.Event()

        def hold() -> None:
            with lock:
                held.set()
                release.wait(10)

        holder = threading.Thread(target=hold)
        holder.start()
        assert held.wait(5)
        pid = os.fork()
        if pid == 0:  # the child: the holding thread does not exist here
            try:
                collection.insert_one({"n": 2})  # from the main thread, not the holder's
            finally:
                os._exit(0)
        release.set()
        holder.join(5)
        code = wait_child(pid, timeout=10)
        assert code is not None, "the forked child deadlocked on a lock held at the fork"
        assert code == 0
        assert collection.count_documents({}) == 1  # the child's write stayed in the child
    finally:
        reset_embedded(server)


def test_a_document_whose_id_is_a_document_expires_by_its_ttl_index() -> None:
    """mongomock's TTL expiry fails on such an id (unhashable); the stand-in deletes the
    document, as a server does (limit documents have such ids and expire when idle)."""
    from datetime import datetime, timedelta, timezone

    name = "ttl-compound-id"
    try:
        limits = embedded_client(name).get_database("d").get_collection("limits")
        limits.create_index([("expire_at", 1)], expireAfterSeconds=0)
        past = datetime.now(timezone.utc) - timedelta(seconds=5)
        future = past + timedelta(hours=1)
        limits.insert_one({"_id": {"kind": "concurrency", "key": "k1"}, "expire_at": past})
        limits.insert_one({"_id": {"kind": "concurrency", "key": "k2"}, "expire_at": future})
        assert [d["_id"]["key"] for d in limits.find({})] == ["k2"]
        limits.update_one({"_id": {"kind": "concurrency", "key": "k2"}}, {"$set": {"n": 1}})
        assert limits.count_documents({}) == 1
    finally:
        reset_embedded(name)


def test_the_find_and_update_commands_reply_as_a_server_does() -> None:
    """mongomock's own ``command`` runs neither: the stand-in does, on the collection,
    with a server's reply (the first batch; counts and the write errors by index)."""
    server = "command-test"
    try:
        database = embedded_client(server).get_database("db")
        collection = database.get_collection("c")
        collection.create_index("k", unique=True)
        collection.insert_many([{"_id": n, "k": n} for n in range(4)])
        found = database.command(
            {"find": "c", "filter": {"k": {"$gte": 1}}, "sort": {"k": -1}, "limit": 2}
        )
        assert found["cursor"]["firstBatch"] == [{"_id": 3, "k": 3}, {"_id": 2, "k": 2}]
        assert found["cursor"]["id"] == 0 and found["ok"] == 1.0
        updated = database.command(
            {
                "update": "c",
                "updates": [
                    {"q": {"_id": 0}, "u": {"$set": {"k": 1}}},  # the key is taken
                    {"q": {"_id": 1}, "u": {"$set": {"x": 1}}},
                    {"q": {"_id": 9}, "u": {"$set": {"x": 1}}},  # matches nothing
                    {"q": {"_id": 2}, "u": {"$set": {"x": 1}}},
                ],
                "ordered": False,
            }
        )
        assert updated["n"] == updated["nModified"] == 2
        [error] = updated["writeErrors"]
        assert error["index"] == 0 and error["code"] == 11000
        assert sorted(d["_id"] for d in collection.find({"x": 1})) == [1, 2]
        with pytest.raises(NotImplementedError, match="collation"):
            database.command({"find": "c", "filter": {}, "collation": {"locale": "fr"}})
    finally:
        reset_embedded(server)
