"""The MongoDB store: every query, update operator, field name, index and driver error.

Each method is one atomic operation on the server (or a small fixed number of them),
takes the current time from its caller, and is written so that repeating it after a
network error is safe:

* a claim is tagged with a token made *before* the call, so a claim whose reply was
  lost is found again by its token instead of being lost or taken twice;
* a holder's writes are fenced on the lease token, and each leaves an id of its own
  in ``last_write``, so a write whose reply was lost can be recognised as landed (an
  id per write, not the token: one holder may make several writes);
* inserts use ids made on the client, so an insert repeated after a lost reply finds
  its own document instead of making a second one.

Driver errors never leave this module: a server that cannot be reached raises
:class:`~mongosched.errors.StoreUnavailable`, anything else it refuses
:class:`~mongosched.errors.StoreError`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import replace
from datetime import datetime
from typing import Any, TypeVar

from pymongo import ASCENDING, DESCENDING, ReturnDocument
from pymongo.errors import (
    BulkWriteError,
    DuplicateKeyError,
)

from mongosched._core.records import (
    IDLE_SCHEDULE_STATUSES,
    JobQuery,
    JobRecord,
    JobStatus,
    PendingChanges,
    Renewal,
    Settlement,
)
from mongosched.errors import (
    JobStateError,
    MalformedJob,
    StoreError,
)
from mongosched.store import codec
from mongosched.store.mongo.batches import MongoBatches
from mongosched.store.mongo.documents import (
    CLAIM_SORT,
    DEDUPE_FIELDS,
    KEEPS_DEPENDENTS,
    PENDING,
    RUNNING,
    UNSTARTED,
    ms,
    query_document,
    to_document,
    to_record,
)
from mongosched.store.mongo.flow import MongoFlow
from mongosched.store.mongo.limits import MongoLimits
from mongosched.store.mongo.operations import MongoOperations
from mongosched.store.mongo.transactions import MongoTransactions
from mongosched.store.mongo.updates import (
    claim_query,
    claim_update,
    dedupe_hold,
    edit_fields,
    retry_update,
    revised,
    set_also,
    settle_update,
)
from mongosched.store.mongo.watch import MongoWatch
from mongosched.store.patience import Patience

__all__ = ["MongoStore"]

log = logging.getLogger("mongosched.store")

T = TypeVar("T")


class MongoStore(
    MongoTransactions, MongoFlow, MongoLimits, MongoBatches, MongoOperations, MongoWatch
):
    """Jobs in one MongoDB collection; permits for concurrency limits and flow-control
    limits beside it."""

    def parse_id(self, value: Any) -> Any:
        return codec.parse_id(value)

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
        if self._transaction is not None:
            return self._insert_in_transaction(docs)
        if len(docs) == 1:
            return [self._insert_one(docs[0])]
        return self._insert_many(docs)

    def _insert_one(self, doc: dict[str, Any]) -> tuple[JobRecord, bool]:
        for _ in range(10):
            try:
                self._retrying("insert", lambda _: self.jobs.insert_one(doc))
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
            self._retrying("insert_many", lambda _: self.jobs.insert_many(docs, ordered=False))
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
        and among the jobs of this call). A key taken meanwhile by a write the snapshot
        cannot see makes the insert conflict: the transaction runs again and finds it."""
        results: list[tuple[JobRecord, bool]] = []
        held: dict[tuple[str, str, Any], dict[str, Any]] = {}
        new = []
        for doc in docs:
            fields = [name for name in DEDUPE_FIELDS.values() if name in doc]
            keys = [(doc["task"], name, doc[name]) for name in fields]
            holder = next((held[key] for key in keys if key in held), None)
            for task, name, value in keys:
                if holder is None:
                    holder = self._retrying("insert", self._finder({"task": task, name: value}))
            if holder is not None:
                results.append((to_record(holder), False))
                continue
            held.update((key, doc) for key in keys)
            new.append(doc)
            results.append((to_record(doc), True))
        if new:
            self._retrying("insert", lambda _: self.jobs.insert_many(new, ordered=True))
        return results

    def _resolve_duplicate(self, doc: Mapping[str, Any]) -> dict[str, Any] | None:
        """After a duplicate-key error: our own document (an insert repeated after a lost
        reply) or the job holding the dedupe key, else None."""
        own = self._retrying("insert", lambda _: self.jobs.find_one({"_id": doc["_id"]}))
        if own is not None:
            return own
        for name in DEDUPE_FIELDS.values():
            if name in doc:
                holder = self._retrying(
                    "insert", self._finder({"task": doc["task"], name: doc[name]})
                )
                if holder is not None:
                    return holder
        return None

    def _finder(self, query: dict[str, Any]) -> Callable[[int], dict[str, Any] | None]:
        return lambda _: self.jobs.find_one(query)

    def upsert_schedule(self, job: JobRecord, now: datetime) -> bool:
        doc = to_document(job)

        def create(_: int) -> bool:
            try:
                result = self.jobs.update_one(
                    {"_id": doc["_id"]}, {"$setOnInsert": doc}, upsert=True
                )
            except DuplicateKeyError:  # a racing upsert created it first
                return False
            return result.upserted_id is not None

        if self._retrying("upsert schedule", create):
            return True
        self._retrying(
            "update schedule",
            lambda _: self.jobs.update_one(
                {
                    "_id": doc["_id"],
                    "status": {"$in": [s.value for s in IDLE_SCHEDULE_STATUSES]},
                    "repeat": {"$ne": doc["repeat"]},
                },
                {"$set": revised({"run_at": doc["run_at"], "scheduled_for": doc["scheduled_for"]})},
            ),
        )
        fields = {k: doc[k] for k in ("repeat", "queue", "priority", "max_attempts")}
        self._retrying(
            "update schedule",
            lambda _: self.jobs.update_one(
                {"_id": doc["_id"], "$or": [{k: {"$ne": v}} for k, v in fields.items()]},
                {"$set": revised({**fields, "updated_at": now}), "$unset": {"edit": ""}},
            ),
        )
        return False

    # Reads ---------------------------------------------------------------------------------------
    def get(self, job_id: Any) -> JobRecord | None:
        doc = self._retrying("get", lambda _: self.jobs.find_one({"_id": job_id}))
        return None if doc is None else to_record(doc)

    def _find(
        self, query: Mapping[str, Any], sort: Sequence[tuple[str, int]], limit: int, skip: int = 0
    ) -> list[JobRecord]:
        def run(_: int) -> list[dict[str, Any]]:
            return list(self.queries.find(dict(query), sort=list(sort), skip=skip, limit=limit))

        return [to_record(doc) for doc in self._retrying("find", run)]

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
            self._retrying("count", lambda _: self.queries.count_documents(query_document(query)))
        )

    def counts(self) -> dict[tuple[str, JobStatus], int]:
        name = {"$ifNull": ["$label", "$task"]}  # a labelled job counts under its label
        pipeline = [{"$group": {"_id": {"task": name, "status": "$status"}, "n": {"$sum": 1}}}]
        rows = self._retrying("stats", lambda _: list(self.queries.aggregate(pipeline)))
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
        rows = self._retrying("unknown tasks", lambda _: list(self.queries.aggregate(pipeline)))
        return {row["_id"]: row["n"] for row in rows}

    def schedules(self) -> list[JobRecord]:
        return self._find({"repeat": {"$exists": True}}, [("task", 1)], 0)

    # Claim, heartbeat, fenced writes ------------------------------------------------------------
    def claim(
        self,
        *,
        owner: str,
        tasks: Sequence[str],
        queues: Sequence[str] | None,
        now: datetime,
        lease_duration: float,
        job_id: Any = None,
    ) -> JobRecord | None:
        if not tasks:
            return None
        token = codec.new_token()
        query = claim_query(tasks, queues, now, job_id)
        update = claim_update(owner, token, now, lease_duration)

        def attempt(n: int) -> dict[str, Any] | None:
            if n > 0:  # the last try may have landed: look for our token first
                mine = self.jobs.find_one({"lease.token": token, "status": RUNNING})
                if mine is not None:
                    return mine
            return self.jobs.find_one_and_update(
                query, update, sort=CLAIM_SORT, return_document=ReturnDocument.AFTER
            )

        doc = self._retrying("claim", attempt)
        if doc is None:
            return None
        try:
            return to_record(doc, check=True)
        except MalformedJob as exc:  # failed alone; the caller claims again
            self._fail_malformed({"_id": doc["_id"], "lease.token": token}, str(exc), now)
            return None

    def renew(
        self,
        job_id: Any,
        token: str,
        now: datetime,
        until: datetime,
        deadline: float | None = None,
    ) -> Renewal:
        doc = self._by_deadline(
            deadline,
            self._retrying,
            "heartbeat",
            lambda _: self.jobs.find_one_and_update(
                {"_id": job_id, "lease.token": token, "status": RUNNING},
                {"$set": {"lease.until": ms(until), "lease.heartbeat_at": now}},
                projection={"cancel_requested": True},
                return_document=ReturnDocument.AFTER,
            ),
        )
        if doc is None:
            return Renewal(held=False)
        return Renewal(held=True, cancel_requested=bool(doc.get("cancel_requested")))

    def _fenced(
        self,
        what: str,
        job_id: Any,
        token: str,
        update: dict[str, Any],
        condition: Mapping[str, Any] | None = None,
    ) -> dict[str, Any] | None:
        """A write by the lease holder: lands only while ``token`` holds the job's lease
        (and the job meets ``condition``). The document after the write, or None when it
        did not land."""
        write = codec.new_token()
        update = set_also(update, {"last_write": write})
        fence = {"_id": job_id, "lease.token": token, "status": RUNNING, **(condition or {})}

        def attempt(n: int) -> dict[str, Any] | None:
            doc = self.jobs.find_one_and_update(fence, update, return_document=ReturnDocument.AFTER)
            if doc is None and n > 0:  # repeated: did the first one land before its reply?
                doc = self.jobs.find_one({"_id": job_id, "last_write": write})
            return doc

        return self._retrying(what, attempt)

    def record_slot(self, job_id: Any, token: str, slot: datetime, now: datetime) -> bool:
        update = {"$set": {"scheduled_for": slot, "updated_at": now}}
        return self._fenced("record slot", job_id, token, update) is not None

    def write_progress(
        self, job_id: Any, token: str, value: float | None, message: str | None, now: datetime
    ) -> bool:
        update = {"$set": {"progress": {"value": value, "message": message, "at": now}}}
        return self._fenced("progress", job_id, token, update) is not None

    def settle(
        self, job: JobRecord, settlement: Settlement, patience: Patience | None = None
    ) -> JobRecord | None:
        token = job.lease.token if job.lease is not None else ""

        def write(update: dict[str, Any], condition: Mapping[str, Any]) -> dict[str, Any] | None:
            return self._fenced("settle", job.id, token, update, condition)

        return self._patiently(patience, self._settle, job, settlement, write)

    def _settle(
        self,
        job: JobRecord,
        settlement: Settlement,
        write: Callable[[dict[str, Any], Mapping[str, Any]], dict[str, Any] | None],
    ) -> JobRecord | None:
        """Apply ``settlement`` with ``write`` (fenced by the caller, plus a condition).
        If a cancel was requested meanwhile, ``settlement.on_cancel`` lands instead (a
        second write only then). Going back to pending, the job holds its dedupe key
        again, unless another job took that key meanwhile: then it waits without it."""
        result = None  # checked here (encoded once), so nothing half-written lands
        if settlement.result is not None:
            result = codec.encode_value(job.task, "return value", settlement.result)
        if settlement.on_cancel is None:
            return self._settle_once(job, settlement, write, {}, result)
        landed = self._settle_once(
            job, settlement, write, {"cancel_requested": {"$ne": True}}, result
        )
        if landed is not None:
            return landed
        cancelled = settlement.on_cancel
        again = result if cancelled.result is settlement.result else None
        if cancelled.result is not None and again is None:
            again = codec.encode_value(job.task, "return value", cancelled.result)
        return self._settle_once(job, cancelled, write, {"cancel_requested": True}, again)

    def _settle_once(
        self,
        job: JobRecord,
        settlement: Settlement,
        write: Callable[[dict[str, Any], Mapping[str, Any]], dict[str, Any] | None],
        condition: Mapping[str, Any],
        result: bytes | None = None,
    ) -> JobRecord | None:
        try:
            doc = write(settle_update(job.id, settlement, dedupe_hold(job), result), condition)
        except DuplicateKeyError:
            log.info(
                "job %s (%s): its dedupe key %r is held by another job; it waits without it",
                job.id,
                job.task,
                job.dedupe_key,
            )
            doc = write(settle_update(job.id, settlement, {}, result), condition)
        return None if doc is None else to_record(doc)

    def leases_expired(self, now: datetime, limit: int = 100) -> list[JobRecord]:
        """Running jobs whose lease ran out; one that cannot be processed is failed
        alone (``MalformedJob``) instead of being returned."""
        query = {"status": RUNNING, "lease.until": {"$lt": now}}
        docs = self._retrying(
            "leases_expired",
            lambda _: list(self.jobs.find(query, sort=[("lease.until", 1)], limit=limit)),
        )
        records = []
        for doc in docs:
            try:
                records.append(to_record(doc, check=True))
            except MalformedJob as exc:
                self._fail_malformed({"_id": doc["_id"], **query}, str(exc), now)
        return records

    def quarantine(self, now: datetime, limit: int = 100) -> list[str]:
        """Fail the due pending jobs that cannot be claimed (their attempts are not a
        number); returns what was wrong with each."""
        query = {
            "status": PENDING,
            "run_at": {"$lte": now},
            "attempts": {"$not": {"$type": "number"}},
        }
        docs = self._retrying("quarantine", lambda _: list(self.jobs.find(query, limit=limit)))
        reasons = []
        for doc in docs:
            reason = f"job {doc['_id']}: field 'attempts' is {doc.get('attempts')!r:.40}"
            self._fail_malformed({"_id": doc["_id"], **query}, reason, now)
            reasons.append(reason)
        return reasons

    def reap(self, job: JobRecord, now: datetime, settlement: Settlement) -> JobRecord | None:
        """Fenced on the expired lease, re-checked in the same write. It does not touch
        ``last_write``: that field proves a *holder's* own write landed, and the reaper
        writes on behalf of no holder."""
        token = job.lease.token if job.lease is not None else None
        fence = {
            "_id": job.id,
            "status": RUNNING,
            "lease.token": token,
            "lease.until": {"$lt": now},
        }

        def write(update: dict[str, Any], condition: Mapping[str, Any]) -> dict[str, Any] | None:
            return self._retrying(
                "reap",
                lambda _: self.jobs.find_one_and_update(
                    {**fence, **condition}, update, return_document=ReturnDocument.AFTER
                ),
            )

        return self._settle(job, settlement, write)

    # Control by users ---------------------------------------------------------------------------
    def cancel_pending(self, job_id: Any, settlement: Settlement) -> JobRecord | None:
        update = settle_update(job_id, settlement, {})
        doc = self._retrying(
            "cancel",
            lambda _: self.jobs.find_one_and_update(
                {"_id": job_id, "status": {"$in": UNSTARTED}},
                update,
                return_document=ReturnDocument.AFTER,
            ),
        )
        return None if doc is None else to_record(doc)

    def request_cancel(self, job_id: Any, now: datetime) -> JobRecord | None:
        doc = self._retrying(
            "cancel",
            lambda _: self.jobs.find_one_and_update(
                {"_id": job_id, "status": RUNNING},
                {"$set": {"cancel_requested": True, "updated_at": now}},
                return_document=ReturnDocument.AFTER,
            ),
        )
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
        doc = self._retrying(
            "update",
            lambda _: self.jobs.find_one_and_update(
                {"_id": job.id, "status": PENDING},
                {"$set": revised(fields)},
                return_document=ReturnDocument.AFTER,
            ),
        )
        return None if doc is None else to_record(doc)

    def retry_finished(self, job_id: Any, status: JobStatus, now: datetime) -> JobRecord | None:
        current = self._retrying("retry", lambda _: self.jobs.find_one({"_id": job_id}))
        if current is None or current["status"] != status.value:
            return None
        update = retry_update(now, bool(current.get("repeat")), dedupe_hold(to_record(current)))
        try:
            doc = self._retrying(
                "retry",
                lambda _: self.jobs.find_one_and_update(
                    {"_id": job_id, "status": status.value},
                    update,
                    return_document=ReturnDocument.AFTER,
                ),
            )
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
        result = self._retrying("purge", lambda _: self.jobs.delete_many(query))
        return int(result.deleted_count)
