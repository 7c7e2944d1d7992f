"""Jobs one at a time on MongoDB (a part of :class:`~mongosched.store.mongo.MongoStore`):
inserts (a dedupe key's holder found, an insert repeated after a lost reply finding its
own job), declared schedules, reads, and what users do to one job (cancel, edit,
retry, purge).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import replace
from datetime import datetime
from typing import Any

from pymongo import ASCENDING, DESCENDING
from pymongo.errors import BulkWriteError, DuplicateKeyError

from mongosched._core import ranks
from mongosched._core.records import (
    IDLE_SCHEDULE_STATUSES,
    REPLACEABLE_STATUSES,
    SCHEDULE_ID_PREFIX,
    JobQuery,
    JobRecord,
    JobStatus,
    PendingChanges,
    Settlement,
)
from mongosched.errors import JobStateError, StoreError
from mongosched.store import codec
from mongosched.store.mongo.connection import MongoConnection
from mongosched.store.mongo.documents import (
    DEDUPE_FIELDS,
    FINAL,
    KEEPS_DEPENDENTS,
    PENDING,
    RUNNING,
    UNSTARTED,
    WINDOW_FIELD,
    aware,
    query_document,
    to_document,
    to_record,
)
from mongosched.store.mongo.fair import MongoFair
from mongosched.store.mongo.updates import (
    dedupe_hold,
    edit_fields,
    keep_window,
    replace_fields,
    replacement,
    retry_update,
    revised,
    settle_update,
)

__all__ = ["MongoJobs"]

REPLACEABLE = [s.value for s in REPLACEABLE_STATUSES]


class MongoJobs:
    """Inserts, reads, and users' changes to one job."""

    def __init__(self, connection: MongoConnection) -> None:
        self.connection = connection
        self.fair = MongoFair(connection)

    # Scheduling --------------------------------------------------------------------------------
    def insert(self, jobs: Sequence[JobRecord]) -> list[tuple[JobRecord, bool]]:
        docs = []
        for job in jobs:
            # The payload as BSON keeps it (times in milliseconds), so the record
            # returned is the job as stored.
            stored = codec.decode(codec.encode_payload(job.task, job.args, job.kwargs))
            job = replace(
                job,
                id=job.id if job.id is not None else codec.new_id(),
                args=tuple(stored["args"]),
                kwargs=stored["kwargs"],
            )
            docs.append(to_document(job))
        self.fair.rank(docs)
        if self.connection.transaction is not None:
            return self._insert_in_transaction(docs)
        if len(docs) == 1:
            return [self._insert_one(docs[0])]
        return self._insert_many(docs)

    def _insert_one(self, doc: dict[str, Any]) -> tuple[JobRecord, bool]:
        for _ in range(10):
            try:
                self.connection.retrying("insert", lambda _: self.connection.jobs.insert_one(doc))
                return to_record(doc), True
            except DuplicateKeyError:
                existing = self._resolve_duplicate(doc)
                if existing is not None:
                    return to_record(existing), existing["_id"] == doc["_id"]
                # The job holding the key finished in between: the key is free again.
        raise StoreError(
            f"could not insert job for task {doc['task']!r}: dedupe key keeps changing"
        )

    def _insert_many(self, docs: list[dict[str, Any]]) -> list[tuple[JobRecord, bool]]:
        if not docs:
            return []
        failed: set[int] = set()
        try:
            self.connection.retrying(
                "insert_many", lambda _: self.connection.jobs.insert_many(docs, ordered=False)
            )
        except BulkWriteError as exc:
            for error in exc.details.get("writeErrors", []):
                if error.get("code") != 11000:
                    raise StoreError(f"insert: {error.get('errmsg')}") from exc
                failed.add(error["index"])
        results: list[tuple[JobRecord, bool]] = []
        for index, doc in enumerate(docs):
            if index not in failed:
                results.append((to_record(doc), True))
                continue
            existing = self._resolve_duplicate(doc)
            results.append(
                self._insert_one(doc)
                if existing is None
                else (to_record(existing), existing["_id"] == doc["_id"])
            )
        return results

    def _insert_in_transaction(self, docs: list[dict[str, Any]]) -> list[tuple[JobRecord, bool]]:
        """Insert in the view's transaction: a failed insert aborts a transaction, so
        each dedupe key's holder is looked for first (in the transaction's snapshot,
        and among the jobs of this call), in the order an insert outside one finds it
        (a throttle window's holder first). A debounce replaces its holder, in the
        store or of this call, as a later call does. A key taken meanwhile by a write
        the snapshot cannot see makes the insert conflict: the transaction runs again
        and finds it."""
        results: list[tuple[JobRecord, bool]] = []
        held: dict[tuple[str, str, Any], dict[str, Any]] = {}
        new = []
        for doc in docs:
            fields = [name for name in DEDUPE_FIELDS.values() if name in doc]
            keys = [(doc["task"], name, doc[name]) for name in fields]
            window = [(doc["task"], WINDOW_FIELD, doc[WINDOW_FIELD])] if WINDOW_FIELD in doc else []
            holder = next((held[key] for key in window if key in held), None)
            if holder is None and window:
                holder = self._window_holder(doc)  # a call with a window: its holder first
            if holder is None:
                holder = next((held[key] for key in keys if key in held), None)
                if holder is not None and doc.get("dedupe_replace"):
                    if holder["status"] in REPLACEABLE:
                        replace_fields(holder, doc)
            if holder is None:
                holder = self._key_holder(doc)
                if holder is not None and doc.get("dedupe_replace"):
                    holder = self._replace_pending(doc, holder) or holder
            if holder is not None:
                results.append((to_record(holder), False))
                continue
            held.update((key, doc) for key in (*keys, *window))
            new.append(doc)
            results.append((to_record(doc), True))
        if new:
            self.connection.retrying(
                "insert", lambda _: self.connection.jobs.insert_many(new, ordered=True)
            )
        return results

    def _resolve_duplicate(self, doc: Mapping[str, Any]) -> dict[str, Any] | None:
        """After a duplicate-key error: our own document (an insert repeated after a lost
        reply) or the job holding the dedupe key, else None."""
        own = self.connection.retrying(
            "insert", lambda _: self.connection.jobs.find_one({"_id": doc["_id"]})
        )
        if own is not None:
            return own
        window = self._window_holder(doc) if WINDOW_FIELD in doc else None
        if window is not None:  # a call with a window: its holder first
            return window
        holder = self._key_holder(doc)
        if holder is not None:
            # Replaced, or claimed meanwhile: its key is free, insert again.
            return self._replace_pending(doc, holder) if doc.get("dedupe_replace") else holder
        return None

    def _key_holder(self, doc: Mapping[str, Any]) -> dict[str, Any] | None:
        """The job that holds the dedupe key ``doc`` would hold (its scope's field), if
        any."""
        for name in DEDUPE_FIELDS.values():
            if name in doc:
                query = {"task": doc["task"], name: doc[name]}
                holder = self.connection.retrying("insert", self._finder(query))
                if holder is not None:
                    return holder
        return None

    def _replace_pending(
        self, doc: Mapping[str, Any], holder: Mapping[str, Any]
    ) -> dict[str, Any] | None:
        """Debounce: the pending job ``holder`` with the arguments, due time and per-job
        keys of ``doc`` (a later call with its key), or None if it is no longer pending
        in that key's scope (claimed meanwhile: the key is free for ``doc``)."""
        name = DEDUPE_FIELDS["pending"]
        update = replacement(doc, holder)
        # As read: the update's status (a label's hold released or kept) and its rank
        # (a placement since gives it another) go by it.
        query = {"_id": holder["_id"], "status": holder["status"], name: doc.get(name)}
        query["label"] = holder.get("label")
        if "rank" in update["$set"]:
            query["rank"] = holder["rank"]
        return self.connection.modify("insert", query, update)

    def _window_holder(self, doc: Mapping[str, Any]) -> dict[str, Any] | None:
        """The job whose throttle window holds ``doc``'s dedupe key, if that window is
        still open when ``doc`` is scheduled; a window that ended is freed (None)."""
        query = {"task": doc["task"], WINDOW_FIELD: doc[WINDOW_FIELD]}
        holder = self.connection.retrying("insert", self._finder(query))
        if holder is None or aware(holder.get("dedupe_until")) > aware(doc["created_at"]):
            return holder
        ended = {**query, "_id": holder["_id"], "dedupe_until": {"$lte": doc["created_at"]}}
        self.connection.retrying(
            "insert",
            lambda _: self.connection.jobs.update_one(ended, {"$unset": {WINDOW_FIELD: ""}}),
        )
        return None

    def _finder(self, query: dict[str, Any]) -> Callable[[int], dict[str, Any] | None]:
        return lambda _: self.connection.jobs.find_one(query)

    def upsert_schedule(self, job: JobRecord, now: datetime) -> bool:
        doc = to_document(job)

        def create(_: int) -> bool:
            try:
                result = self.connection.jobs.update_one(
                    {"_id": doc["_id"]}, {"$setOnInsert": doc}, upsert=True
                )
            except DuplicateKeyError:  # a racing upsert created it first
                return False
            return result.upserted_id is not None

        if self.connection.retrying("upsert schedule", create):
            return True
        self.connection.retrying(
            "update schedule",
            lambda _: self.connection.jobs.update_one(
                {
                    "_id": doc["_id"],
                    "status": {"$in": [s.value for s in IDLE_SCHEDULE_STATUSES]},
                    "repeat": {"$ne": doc["repeat"]},
                },
                {"$set": revised({"run_at": doc["run_at"], "scheduled_for": doc["scheduled_for"]})},
            ),
        )
        fields = {k: doc[k] for k in ("repeat", "queue", "priority", "max_attempts")}
        self.connection.retrying(
            "update schedule",
            lambda _: self.connection.jobs.update_one(
                {"_id": doc["_id"], "$or": [{k: {"$ne": v}} for k, v in fields.items()]},
                {"$set": revised({**fields, "updated_at": now}), "$unset": {"edit": ""}},
            ),
        )
        return False

    # Reads ---------------------------------------------------------------------------------------
    def get(self, job_id: Any) -> JobRecord | None:
        doc = self.connection.retrying(
            "get", lambda _: self.connection.jobs.find_one({"_id": job_id})
        )
        return None if doc is None else to_record(doc)

    def _find(
        self, query: Mapping[str, Any], sort: Sequence[tuple[str, int]], limit: int, skip: int = 0
    ) -> list[JobRecord]:
        def run(_: int) -> list[dict[str, Any]]:
            return list(
                self.connection.queries.find(dict(query), sort=list(sort), skip=skip, limit=limit)
            )

        return [to_record(doc) for doc in self.connection.retrying("find", run)]

    def find(
        self,
        query: JobQuery,
        *,
        sort: str = "updated_at",
        descending: bool = True,
        skip: int = 0,
        limit: int = 50,
    ) -> list[JobRecord]:
        direction = DESCENDING if descending else ASCENDING
        return self._find(
            query_document(query), [(sort, direction), ("_id", direction)], limit, skip
        )

    def count(self, query: JobQuery) -> int:
        return int(
            self.connection.retrying(
                "count", lambda _: self.connection.queries.count_documents(query_document(query))
            )
        )

    def counts(self) -> dict[tuple[str, JobStatus], int]:
        name = {"$ifNull": ["$label", "$task"]}  # a labelled job counts under its label
        pipeline = [{"$group": {"_id": {"task": name, "status": "$status"}, "n": {"$sum": 1}}}]
        rows = self.connection.retrying(
            "stats", lambda _: list(self.connection.queries.aggregate(pipeline))
        )
        return {(r["_id"]["task"], JobStatus(r["_id"]["status"])): r["n"] for r in rows}

    def oldest_due(self, now: datetime) -> JobRecord | None:
        found = self._find({"status": PENDING, "run_at": {"$lte": now}}, [("run_at", 1)], 1)
        return found[0] if found else None

    def running(self, limit: int = 1000) -> list[JobRecord]:
        return self._find({"status": RUNNING}, [("lease.until", 1)], limit)

    def unknown_due_tasks(self, known: Iterable[str], now: datetime) -> dict[str, int]:
        pipeline: list[dict[str, Any]] = [
            {"$match": {"status": PENDING, "run_at": {"$lte": now}, "task": {"$nin": list(known)}}},
            {"$group": {"_id": "$task", "n": {"$sum": 1}}},
            {"$sort": {"n": -1}},
            {"$limit": 20},
        ]
        rows = self.connection.retrying(
            "unknown tasks", lambda _: list(self.connection.queries.aggregate(pipeline))
        )
        return {row["_id"]: row["n"] for row in rows}

    def schedules(self) -> list[JobRecord]:
        # As records.is_listed_schedule says: live, or declared.
        declared = {"_id": {"$regex": f"^{re.escape(SCHEDULE_ID_PREFIX)}"}}
        live = {"$or": [{"status": {"$nin": FINAL}}, declared]}
        return self._find({"repeat": {"$exists": True}, **live}, [("task", 1)], 0)

    # Control by users ---------------------------------------------------------------------------
    def cancel_pending(self, job_id: Any, settlement: Settlement) -> JobRecord | None:
        update = settle_update(job_id, settlement, {})
        doc = self.connection.modify(
            "cancel", {"_id": job_id, "status": {"$in": UNSTARTED}}, update
        )
        doc = keep_window(self.connection.modify, doc)
        return None if doc is None else to_record(doc)

    def request_cancel(self, job_id: Any, now: datetime) -> JobRecord | None:
        update = {"$set": {"cancel_requested": True, "updated_at": now}}
        doc = self.connection.modify("cancel", {"_id": job_id, "status": RUNNING}, update)
        return None if doc is None else to_record(doc)

    def update_pending(
        self, job: JobRecord, changes: PendingChanges, now: datetime
    ) -> JobRecord | None:
        fields = edit_fields(changes, now)
        if changes.args is not None or changes.kwargs is not None:
            args = job.args if changes.args is None else changes.args
            kwargs = job.kwargs if changes.kwargs is None else changes.kwargs
            codec.encode_payload(job.task, args, kwargs)
            fields.update(args=list(args), kwargs=dict(kwargs))
        query: dict[str, Any] = {"_id": job.id, "status": PENDING}
        if (changes.priority is not None or changes.run_at is not None) and job.rank is not None:
            # A ranked job: its rank follows the new priority and due time (see
            # ranks.edited_rank), fenced on the rank as read (a placement since gives
            # it a new one).
            priority = job.priority if changes.priority is None else changes.priority
            run_at = job.run_at if changes.run_at is None else changes.run_at
            fields["rank"] = ranks.edited_rank(job.rank, job.fair_at, priority, job.aging, run_at)
            query["rank"] = job.rank
        update = {"$set": revised(fields)}
        doc = self.connection.modify("update", query, update)
        if doc is None and "rank" in query:
            current = self.connection.retrying(
                "update", lambda _: self.connection.jobs.find_one({"_id": job.id})
            )
            if current is not None and current.get("rank") != job.rank:
                return self.update_pending(to_record(current), changes, now)  # placed since
        return None if doc is None else to_record(doc)

    def retry_finished(self, job_id: Any, status: JobStatus, now: datetime) -> JobRecord | None:
        current = self.connection.retrying(
            "retry", lambda _: self.connection.jobs.find_one({"_id": job_id})
        )
        if current is None or current["status"] != status.value:
            return None
        update = retry_update(now, bool(current.get("repeat")), dedupe_hold(to_record(current)))
        try:
            doc = self.connection.modify("retry", {"_id": job_id, "status": status.value}, update)
        except DuplicateKeyError:
            raise JobStateError(
                f"job {job_id} ({current['task']}): dedupe key {current.get('dedupe_key')!r} "
                "is held by another job now"
            ) from None
        return None if doc is None else to_record(doc)

    def purge(
        self, statuses: Sequence[JobStatus], finished_before: datetime, task: str | None
    ) -> int:
        query: dict[str, Any] = {
            "status": {"$in": [s.value for s in statuses]},
            "finished_at": {"$lte": finished_before},
            "_id": {"$type": "objectId"},  # declared schedules stay (tombstones)
            **KEEPS_DEPENDENTS,
        }
        if task is not None:
            query["task"] = task
        result = self.connection.retrying(
            "purge", lambda _: self.connection.jobs.delete_many(query)
        )
        return int(result.deleted_count)
