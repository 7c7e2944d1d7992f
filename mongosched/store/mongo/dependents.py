"""Expiry and dependencies in MongoDB (part of :class:`~mongosched.store.mongo.MongoStore`):
the queries and updates on the job collection that flow control adds, each on an
index of its own (``expiring``, ``waiting_for``, ``dependents``; the walk of
:meth:`~MongoDependents.orphaned` on ``bulk_by_status``)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from mongosched._core.records import JobRecord, JobStatus, Settlement
from mongosched.store.mongo.connection import MongoConnection
from mongosched.store.mongo.documents import FINAL, UNSTARTED, WAITING, ms, to_record
from mongosched.store.mongo.updates import keep_window, revised, settle_update

__all__ = ["MongoDependents"]


class MongoDependents:
    """Expiry sweeps and the release of dependents."""

    def __init__(self, connection: MongoConnection) -> None:
        self.connection = connection

    def start_deadlines_due(self, now: datetime, limit: int = 100) -> list[JobRecord]:
        query = {"status": {"$in": UNSTARTED}, "expires_at": {"$lte": ms(now)}}
        docs = self.connection.retrying(
            "start_deadlines_due",
            lambda _: list(self.connection.jobs.find(query, sort=[("expires_at", 1)], limit=limit)),
        )
        return [to_record(doc) for doc in docs]

    def link_dependencies(
        self, job_ids: Sequence[Any], now: datetime, dependent: Any = None
    ) -> dict[Any, JobStatus]:
        ids = list(job_ids)

        def link(_: int) -> list[dict[str, Any]]:
            # updated_at too: a holder's batched settlement then sees the job changed
            # since its claim and reads it back, mark included.
            self.connection.jobs.update_many(
                {"_id": {"$in": ids}, "has_dependents": {"$ne": True}},
                {"$set": revised({"has_dependents": True, "updated_at": ms(now)})},
            )
            return list(self.connection.jobs.find({"_id": {"$in": ids}}, {"status": 1}))

        docs = self.connection.retrying("link dependencies", link)
        if dependent is not None:
            self.connection.retrying(
                "link dependencies",
                lambda _: self.connection.jobs.update_one(
                    {"_id": dependent, "unlinked": True}, {"$unset": {"unlinked": ""}}
                ),
            )
        return {doc["_id"]: JobStatus(doc["status"]) for doc in docs}

    def unlinked(self, created_before: datetime, limit: int = 100) -> list[JobRecord]:
        query = {"unlinked": True, "created_at": {"$lt": ms(created_before)}}
        docs = self.connection.retrying(
            "unlinked",
            lambda _: list(self.connection.jobs.find(query, sort=[("created_at", 1)], limit=limit)),
        )
        return [to_record(doc) for doc in docs if doc.get("status") == WAITING]

    def of(self, job_id: Any, limit: int = 100) -> list[JobRecord]:
        query = {"waiting_for": job_id, "status": WAITING}
        docs = self.connection.retrying(
            "dependents",
            lambda _: list(self.connection.jobs.find(query, sort=[("_id", 1)], limit=limit)),
        )
        return [to_record(doc) for doc in docs]

    def release_dependent(
        self, job: JobRecord, dependency: Any, settlement: Settlement
    ) -> JobRecord | None:
        waiting = {"_id": job.id, "status": WAITING}
        update = settle_update(job.id, settlement, {})

        def write(query: dict[str, Any], change: dict[str, Any]) -> dict[str, Any] | None:
            return self.connection.modify("release dependent", {**waiting, **query}, change)

        if settlement.status.is_final:
            doc = keep_window(self.connection.modify, write({"waiting_for": dependency}, update))
            return None if doc is None else to_record(doc)
        crossed = None
        if dependency is not None:
            # The last one it waited for: pending in one step.
            doc = write({"waiting_for": [dependency]}, update)
            if doc is not None:
                return to_record(doc)
            crossed = write({"waiting_for": dependency}, {"$pull": {"waiting_for": dependency}})
            if crossed is None or crossed.get("waiting_for"):
                return None if crossed is None else to_record(crossed)
        # Others were crossed off in between (or, dependency None, the reaper's repair
        # of a job left waiting for nothing): pending now.
        doc = write({"waiting_for": []}, update)
        if doc is not None:
            return to_record(doc)
        return None if crossed is None else to_record(crossed)

    def stranded(self, limit: int = 100) -> list[JobRecord]:
        docs = self.connection.retrying(
            "stranded",
            lambda _: list(
                self.connection.jobs.find({"waiting_for": [], "status": WAITING}, limit=limit)
            ),
        )
        return [to_record(doc) for doc in docs]

    def dependents_released(self, job_id: Any) -> None:
        self.connection.retrying(
            "dependents released",
            lambda _: self.connection.jobs.update_one(
                {"_id": job_id, "status": {"$in": FINAL}, "has_dependents": True},
                {"$unset": {"has_dependents": ""}},
            ),
        )

    def unreleased(self, finished_before: datetime, limit: int = 100) -> list[JobRecord]:
        query = {"has_dependents": True, "finished_at": {"$lt": ms(finished_before)}}
        docs = self.connection.retrying(
            "unreleased",
            lambda _: list(
                self.connection.jobs.find(query, sort=[("finished_at", 1)], limit=limit)
            ),
        )
        return [to_record(doc) for doc in docs if JobStatus(doc["status"]).is_final]

    def orphaned(
        self, after: Any = None, limit: int = 100
    ) -> tuple[list[tuple[JobRecord, tuple[Any, ...]]], Any]:
        query: dict[str, Any] = {"status": WAITING}
        if after is not None:
            query["_id"] = {"$gt": after}

        def page(_: int) -> list[dict[str, Any]]:
            # A keyset page on bulk_by_status (status, _id, ...): what each waits for.
            found = self.connection.jobs.find(
                query, {"waiting_for": 1}, sort=[("_id", 1)], limit=limit
            )
            return list(found)

        def present(ids: list[Any]) -> set[Any]:
            return {
                doc["_id"] for doc in self.connection.jobs.find({"_id": {"$in": ids}}, {"_id": 1})
            }

        docs = self.connection.retrying("orphaned", page)
        wanted = list({dep for doc in docs for dep in doc.get("waiting_for") or ()})
        gone = set(wanted) - (
            self.connection.retrying("orphaned", lambda _: present(wanted)) if wanted else set()
        )
        lost = [doc["_id"] for doc in docs if gone.intersection(doc.get("waiting_for") or ())]
        found: list[tuple[JobRecord, tuple[Any, ...]]] = []
        if lost:
            read = {"_id": {"$in": lost}, "status": WAITING}
            full = self.connection.retrying(
                "orphaned", lambda _: list(self.connection.jobs.find(read, sort=[("_id", 1)]))
            )
            for doc in full:
                record = to_record(doc)
                missing = tuple(dep for dep in record.waiting_for if dep in gone)
                if missing:
                    found.append((record, missing))
        return found, docs[-1]["_id"] if len(docs) == limit else None
