"""Ranks on MongoDB (a part of :class:`~mongosched.store.mongo.MongoStore`, used by its
inserts and its claims): each new ranked job's rank, and the fair start of an unplaced
fair job once it is due (see :mod:`mongosched._core.ranks`). Every read is a find of
one document on an index.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from pymongo import DESCENDING, UpdateOne

from mongosched._core import ranks
from mongosched.store.mongo.connection import MongoConnection
from mongosched.store.mongo.documents import CLAIMED, PENDING, RANK_SORT, RANKED, aware

__all__ = ["MongoFair"]


class MongoFair:
    """Ranks and fair starts, read and written on the jobs collection."""

    def __init__(self, connection: MongoConnection) -> None:
        self.connection = connection

    def rank(self, docs: Sequence[dict[str, Any]], now: datetime | None = None) -> None:
        """Set the rank of each ranked job of ``docs`` (new ones: at their creation;
        unplaced ones: at ``now``). A fair job's start needs its task's fair clock and
        its key's latest start: read once per call (three finds, each one document),
        then carried along the call's jobs. Two calls at once for one key may give
        their jobs the same start: they share a turn, nothing worse."""
        clocks: dict[str, float] = {}
        lasts: dict[tuple[str, str], float | None] = {}
        for doc in docs:
            if "aging" not in doc and "fair_key" not in doc:
                continue
            since = ranks.millis(aware(doc["run_at"]))
            if "fair_key" in doc:
                at = aware(doc["created_at"]) if now is None else now
                if since > ranks.millis(at):  # not due yet: no start
                    doc["rank"] = ranks.unplaced(since)
                    continue
                task, key = doc["task"], doc["fair_key"]
                if task not in clocks:
                    clocks[task] = self._clock(task, at)
                if (task, key) not in lasts:
                    lasts[task, key] = self._last(task, key)
                since = ranks.fair_start(clocks[task], lasts[task, key], doc["fair_weight"])
                lasts[task, key] = doc["fair_at"] = since
            doc["rank"] = ranks.rank(since, doc["priority"], doc.get("aging"))

    def place(
        self, tasks: Sequence[str], queues: Sequence[str] | None, now: datetime, limit: int
    ) -> None:
        """Give the unplaced fair jobs of ``tasks`` in ``queues`` due by ``now`` their
        start (up to ``limit``, the earliest due first): one find on the ranked index,
        by the range of their ranks; and when there are some, the reads of :meth:`rank`
        and one bulk write, each update on the job still as read."""
        low, high = ranks.unplaced_until(now)
        query: dict[str, Any] = {
            "status": PENDING,
            "task": {"$in": list(tasks)},
            "rank": {"$gte": low, "$lte": high},
            "fair_key": {"$exists": True},
            "fair_at": {"$exists": False},
        }
        if queues is not None:
            query["queue"] = {"$in": list(queues)}
        fields = {"task": 1, "fair_key": 1, "fair_weight": 1, "priority": 1, "aging": 1, "rev": 1}
        due = self.connection.retrying(
            "claim",
            lambda _: list(
                self.connection.jobs.find(
                    query, {**fields, "run_at": 1, "rank": 1}, sort=RANK_SORT, limit=limit
                )
            ),
        )
        if not due:
            return
        was = {doc["_id"]: doc["rank"] for doc in due}
        self.rank(due, now)
        # Each write is fenced on the job as read (its rank, and its rev, which every
        # edit renews): one edited meanwhile stays unplaced, for the next placement.
        writes = [
            UpdateOne(
                {
                    "_id": doc["_id"],
                    "status": PENDING,
                    "rank": was[doc["_id"]],
                    "rev": doc.get("rev"),
                },
                {"$set": {name: doc[name] for name in ("rank", "fair_at") if name in doc}},
            )
            for doc in due
            if doc["rank"] != was[doc["_id"]]
        ]
        if writes:
            self.connection.retrying(
                "claim", lambda _: self.connection.jobs.bulk_write(writes, ordered=False)
            )

    def _clock(self, task: str, now: datetime) -> float:
        """``task``'s fair clock (:func:`~mongosched._core.ranks.fair_clock`): the fair
        start of its first due pending job in rank order, and the latest among its
        claimed jobs."""
        due = {"status": PENDING, "task": task, **RANKED, "run_at": {"$lte": now}}
        claimed = {"task": task, "status": {"$in": CLAIMED}, "fair_at": {"$exists": True}}

        def first(query: dict[str, Any], sort: list[tuple[str, int]]) -> float | None:
            doc = self.connection.retrying(
                "insert", lambda _: self.connection.jobs.find_one(query, {"fair_at": 1}, sort=sort)
            )
            return None if doc is None else doc.get("fair_at")

        return ranks.fair_clock(
            first(due, RANK_SORT), first(claimed, [("fair_at", DESCENDING)]), ranks.millis(now)
        )

    def _last(self, task: str, key: str) -> float | None:
        """The latest fair start of key ``key`` of ``task``, if it has one."""
        query = {"task": task, "fair_key": key, "fair_at": {"$exists": True}}
        last = self.connection.retrying(
            "insert",
            lambda _: self.connection.jobs.find_one(
                query, {"fair_at": 1}, sort=[("fair_at", DESCENDING)]
            ),
        )
        return None if last is None else last.get("fair_at")
