"""Flow-control limits in MongoDB (part of :class:`~mongosched.store.mongo.MongoStore`):
rate limits as a sliding log, keyed concurrency as a list of holders, one small document
per (task, key) in the ``<collection>_limits`` collection, deleted by a TTL index once
idle.

Taking a rate start is one conditional upsert: the filter admits the start only while
fewer than ``count`` starts are logged or the oldest of the last ``count`` left the
window; the update pushes ``{t: now, k: token}`` keeping the log sorted and cut to the
last ``count``. When the filter refuses, the upsert collides with the existing document
(a duplicate key): the limit is saturated, and one read says when it frees.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from pymongo.errors import DuplicateKeyError

from mongosched._core.records import Admission
from mongosched.limits import IDLE
from mongosched.store.mongo.connection import MongoConnection
from mongosched.store.mongo.documents import aware, ms

__all__ = ["MongoLimits", "limit_id"]


def limit_id(kind: str, task: str, key: str | None) -> dict[str, Any]:
    """The ``_id`` of a limit document (a subdocument: task names and keys may hold
    any character)."""
    return {"kind": kind, "task": task, "key": key}


class MongoLimits:
    """Rate logs and keyed concurrency slots."""

    def __init__(self, connection: MongoConnection) -> None:
        self.connection = connection

    def _upserted(self, query: dict[str, Any], update: dict[str, Any]) -> bool:
        """One conditional upsert; False when its filter refused (a duplicate key:
        saturated, taken already, or a racing first upsert), so the caller reads."""
        try:
            self.connection.limits.update_one(query, update, upsert=True)
        except DuplicateKeyError:
            return False
        return True

    # Rate ------------------------------------------------------------------------------------
    def take_rate(
        self, task: str, key: str | None, count: int, window: timedelta, token: str, now: datetime
    ) -> Admission:
        now = ms(now)
        doc_id = limit_id("rate", task, key)
        query = {
            "_id": doc_id,
            "log.k": {"$ne": token},  # taken again (a lost reply): no second start
            "$or": [{f"log.{count - 1}": {"$exists": False}}, {"log.0.t": {"$lt": now - window}}],
        }
        update = {
            "$push": {
                "log": {"$each": [{"t": now, "k": token}], "$sort": {"t": 1}, "$slice": -count}
            },
            "$max": {"expire_at": now + window + IDLE},
        }

        def attempt(_: int) -> Admission:
            for _ in range(3):
                if self._upserted(query, update):
                    return Admission(True)
                doc = self.connection.limits.find_one({"_id": doc_id})
                log = (doc or {}).get("log") or []
                if any(entry.get("k") == token for entry in log):
                    return Admission(True)
                if len(log) >= count:
                    oldest = aware(log[-count]["t"])
                    if oldest >= now - window:
                        return Admission(False, oldest + window + timedelta(milliseconds=1))
            return Admission(False, now + timedelta(milliseconds=1))

        return self.connection.retrying("take rate", attempt)

    def return_rate(self, task: str, key: str | None, token: str) -> None:
        self.connection.retrying(
            "return rate",
            lambda _: self.connection.limits.update_one(
                {"_id": limit_id("rate", task, key)}, {"$pull": {"log": {"k": token}}}
            ),
        )

    # Keyed concurrency -----------------------------------------------------------------------
    def take_slot(
        self,
        task: str,
        key: str,
        limit: int,
        token: str,
        now: datetime,
        until: datetime,
    ) -> Admission:
        now, until = ms(now), ms(until)
        doc_id = limit_id("concurrency", task, key)
        query = {
            "_id": doc_id,
            "holders.k": {"$ne": token},  # taken again: the same slot
            f"holders.{limit - 1}": {"$exists": False},
        }
        update = {
            "$push": {"holders": {"k": token, "until": until}},
            "$max": {"expire_at": until + IDLE},
        }

        def attempt(_: int) -> Admission:
            for _ in range(3):
                if self._upserted(query, update):
                    return Admission(True)
                # Refused: one read says why. Taken already, or full; no document is a
                # racing first upsert (try again).
                doc = self.connection.limits.find_one({"_id": doc_id}, {"holders": 1})
                if doc is None:
                    continue
                holders = doc.get("holders") or []
                if any(held.get("k") == token for held in holders):
                    return Admission(True)
                if not any(aware(held["until"]) < now for held in holders):
                    return Admission(False)
                # Free the slots of lapsed holders (a crashed runner's): a slot returns
                # once its holder's lease ran out; then try again.
                self.connection.limits.update_one(
                    {"_id": doc_id}, {"$pull": {"holders": {"until": {"$lt": now}}}}
                )
            return Admission(False)

        return self.connection.retrying("take slot", attempt)

    def renew_slot(
        self, task: str, key: str, token: str, until: datetime, deadline: float | None = None
    ) -> bool:
        until = ms(until)
        result = self.connection.retrying(
            "renew slot",
            lambda _: self.connection.limits.update_one(
                {"_id": limit_id("concurrency", task, key), "holders.k": token},
                {"$set": {"holders.$.until": until}, "$max": {"expire_at": until + IDLE}},
            ),
            by=deadline,
        )
        return bool(result.matched_count)

    def release_slot(self, task: str, key: str, token: str) -> None:
        self.connection.retrying(
            "release slot",
            lambda _: self.connection.limits.update_one(
                {"_id": limit_id("concurrency", task, key)},
                {"$pull": {"holders": {"k": token}}},
            ),
        )
