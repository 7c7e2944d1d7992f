"""Concurrency permits in MongoDB: ``limit`` numbered documents per task, each a small
lease of its own (token, job, owner, until), taken atomically and renewed with the job's
lease; never count-then-claim."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pymongo.errors import BulkWriteError

from mongosched.errors import StoreError
from mongosched.store.mongo.connection import MongoConnection
from mongosched.store.mongo.documents import ms

__all__ = ["MongoPermits"]


class MongoPermits:
    """The permit operations of :class:`~mongosched.store.mongo.MongoStore`."""

    def __init__(self, connection: MongoConnection) -> None:
        self.connection = connection

    def ensure_permits(self, task: str, limit: int) -> None:
        docs = [
            {
                "_id": f"{task}#{i}",
                "task": task,
                "index": i,
                "token": None,
                "job": None,
                "until": None,
            }
            for i in range(limit)
        ]
        try:
            self.connection.retrying(
                "permits", lambda _: self.connection.permits.insert_many(docs, ordered=False)
            )
        except BulkWriteError as exc:
            if any(e.get("code") != 11000 for e in exc.details.get("writeErrors", [])):
                raise StoreError(f"permits of {task!r}: {exc}") from exc

    def take_permit(
        self,
        task: str,
        limit: int,
        token: str,
        job_id: Any,
        owner: str,
        now: datetime,
        until: datetime,
    ) -> bool:
        update = {"$set": {"token": token, "job": job_id, "owner": owner, "until": ms(until)}}
        query = {
            "task": task,
            "index": {"$lt": limit},
            "$or": [{"token": None}, {"until": {"$lt": now}}],
        }

        def attempt(_: int) -> bool:
            # The token's own permit first: taking again (after a lost reply, or a
            # caller's retry) never takes a second one.
            if (
                self.connection.permits.find_one({"task": task, "token": token}, {"_id": 1})
                is not None
            ):
                return True
            return self.connection.permits.find_one_and_update(query, update) is not None

        return self.connection.retrying("take permit", attempt)

    def renew_permit(
        self, task: str, token: str, until: datetime, deadline: float | None = None
    ) -> bool:
        result = self.connection.retrying(
            "renew permit",
            lambda _: self.connection.permits.update_one(
                {"task": task, "token": token}, {"$set": {"until": ms(until)}}
            ),
            by=deadline,
        )
        return bool(result.matched_count)

    def release_permit(self, task: str, token: str) -> None:
        self.connection.retrying(
            "release permit",
            lambda _: self.connection.permits.update_one(
                {"task": task, "token": token},
                {"$set": {"token": None, "job": None, "owner": None, "until": None}},
            ),
        )

    def permit_holders(self, task: str, now: datetime) -> int:
        query = {"task": task, "token": {"$ne": None}, "until": {"$gte": now}}
        return int(
            self.connection.retrying(
                "permits", lambda _: self.connection.permits.count_documents(query)
            )
        )
