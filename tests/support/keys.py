"""The dedupe keys a store records as held, read from the store's own bookkeeping
(memory://: its key map; MongoDB: the jobs' dedupe fields) rather than derived from
the jobs' statuses: a test can then see a key a store failed to release or to take.
Test support only; the library has no such read."""

from __future__ import annotations

from typing import Any

from mongosched.store import Store
from mongosched.store.memory import MemoryStore
from mongosched.store.mongo import MongoStore
from mongosched.store.mongo.documents import DEDUPE_FIELDS

__all__ = ["HeldKey", "held_keys"]

HeldKey = tuple[str, str, str, Any]
"""``(task, dedupe key, scope, id of the job holding it)``."""


def held_keys(store: Store) -> list[HeldKey]:
    """Every dedupe key ``store`` records as held, once per record (a key recorded
    twice in one scope shows twice), in no particular order."""
    if isinstance(store, MemoryStore):
        table = store.table
        with table.lock:
            return [
                (task, key, scope, job_id)
                for scope, keys in table.keys.items()
                for (task, key), job_id in keys.items()
            ]
    if isinstance(store, MongoStore):
        jobs = store.connection.jobs
        held: list[HeldKey] = []
        for scope, name in DEDUPE_FIELDS.items():
            for doc in jobs.find({name: {"$exists": True}}, {"task": 1, name: 1}):
                held.append((doc["task"], doc[name], scope, doc["_id"]))
        return held
    raise TypeError(f"no read of the dedupe keys of {store!r}")
