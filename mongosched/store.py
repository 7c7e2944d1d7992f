"""Every MongoDB query and index mongosched uses.

Nothing else in the package talks to the database. Each method is one atomic
operation on the server (or a small fixed number of them), takes the current time from
its caller, and is written so that repeating it after a network error is safe:

* a claim is tagged with a token made *before* the call, so a claim whose reply was
  lost is found again by its token instead of being lost or taken twice;
* a holder's writes are fenced on the lease token, and each leaves an id of its own
  in ``last_write``, so a write whose reply was lost can be recognised as landed (an
  id per write, not the token: one holder may make several writes);
* inserts use ids made on the client, so an insert repeated after a lost reply finds
  its own document instead of making a second one.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime, timedelta, timezone
from typing import Any, TypeVar

from bson.codec_options import CodecOptions
from pymongo import ASCENDING, ReturnDocument, WriteConcern
from pymongo.collection import Collection
from pymongo.errors import BulkWriteError, ConnectionFailure, DuplicateKeyError, PyMongoError

__all__ = ["Store", "TRANSIENT_ERRORS", "new_token"]

log = logging.getLogger("mongosched.store")

T = TypeVar("T")

TRANSIENT_ERRORS: tuple[type[BaseException], ...] = (ConnectionFailure,)
"""Errors after which an operation may be repeated (network, failover, selection)."""

RUNNING = "running"
PENDING = "pending"
FINAL = ("completed", "failed", "cancelled")

DEDUPE_FIELDS = ("dedupe_active", "dedupe_pending")

# Claim order: priority first (1 before 10), then oldest due first.
CLAIM_SORT = [("priority", ASCENDING), ("run_at", ASCENDING)]

INDEXES: list[tuple[list[tuple[str, int]], dict[str, Any]]] = [
    # Claim, Equality-Sort-Range: status (E), queue (E, $in), priority+run_at (S), run_at (R).
    ([("status", 1), ("queue", 1), ("priority", 1), ("run_at", 1)], {"name": "claim"}),
    # Claim by a runner that serves every queue (no queue equality to lead with).
    ([("status", 1), ("priority", 1), ("run_at", 1)], {"name": "claim_any_queue"}),
    # Reaper: running jobs whose lease ran out.
    ([("status", 1), ("lease.until", 1)], {"name": "reap"}),
    # Queries: by task, by task and status, by status; each newest first.
    ([("task", 1), ("updated_at", -1)], {"name": "task_updated"}),
    ([("task", 1), ("status", 1), ("updated_at", -1)], {"name": "task_status"}),
    ([("status", 1), ("updated_at", -1)], {"name": "status_updated"}),
    # Dedupe: a key is held only while its job is in the key's scope (fields unset after).
    (
        [("task", 1), ("dedupe_active", 1)],
        {
            "name": "dedupe_active",
            "unique": True,
            "partialFilterExpression": {"dedupe_active": {"$exists": True}},
        },
    ),
    (
        [("task", 1), ("dedupe_pending", 1)],
        {
            "name": "dedupe_pending",
            "unique": True,
            "partialFilterExpression": {"dedupe_pending": {"$exists": True}},
        },
    ),
    # Repeating jobs, for schedules().
    (
        [("task", 1)],
        {"name": "repeating", "partialFilterExpression": {"repeat": {"$exists": True}}},
    ),
    # Retention: finished jobs carry expire_at; the server deletes them after it.
    ([("expire_at", 1)], {"name": "expire_at", "expireAfterSeconds": 0}),
]

SLOT_INDEXES: list[tuple[list[tuple[str, int]], dict[str, Any]]] = [
    ([("task", 1), ("index", 1)], {"name": "task_index"}),
    ([("task", 1), ("token", 1)], {"name": "task_token"}),
]


def new_token() -> str:
    """A fresh lease token."""
    return uuid.uuid4().hex


def _ms(value: datetime) -> datetime:
    """BSON datetimes keep milliseconds: round here so what we compare is what is stored."""
    return value.replace(microsecond=value.microsecond // 1000 * 1000)


class Store:
    """The job collection (and the concurrency-slot collection beside it)."""

    def __init__(
        self,
        database: Any,
        *,
        collection: str = "mongosched_jobs",
        write_concern: str | int | None = "majority",
        retries: int = 3,
        retry_pause: float = 0.1,
    ) -> None:
        self.database = database
        options: dict[str, Any] = {"codec_options": CodecOptions(tz_aware=True)}
        if write_concern is not None:
            options["write_concern"] = WriteConcern(w=write_concern)
        self.jobs: Collection[dict[str, Any]] = database.get_collection(collection, **options)
        self.slots: Collection[dict[str, Any]] = database.get_collection(
            f"{collection}_slots", **options
        )
        self.retries = retries
        self.retry_pause = retry_pause

    # Plumbing -----------------------------------------------------------------------
    def _retrying(self, what: str, op: Callable[[int], T]) -> T:
        """Run ``op(attempt)``; after a transient error run it again (attempt > 0),
        up to ``retries`` more times. ``op`` must be safe to repeat."""
        attempt = 0
        while True:
            try:
                return op(attempt)
            except TRANSIENT_ERRORS as exc:
                if attempt >= self.retries:
                    raise
                attempt += 1
                log.debug("%s: %s; retrying (%d/%d)", what, exc, attempt, self.retries)
                time.sleep(self.retry_pause * attempt)

    def ensure_indexes(self) -> None:
        """Create every index (idempotent: existing ones are left as they are)."""
        for collection, indexes in ((self.jobs, INDEXES), (self.slots, SLOT_INDEXES)):
            for keys, options in indexes:

                def create(_: int, c: Any = collection, k: Any = keys, o: Any = options) -> str:
                    return str(c.create_index(k, **o))

                self._retrying("create index", create)

    def clock_offset(self, local_now: Callable[[], datetime]) -> timedelta | None:
        """How far the server's clock (``localTime`` of ``hello``) is ahead of
        ``local_now()``, taken at the middle of the round trip. None where the server
        does not say (the embedded stand-in) or cannot be asked."""
        before = local_now()
        try:
            reply = self.database.command("hello")
        except (PyMongoError, NotImplementedError):
            return None
        after = local_now()
        server = reply.get("localTime")
        if not isinstance(server, datetime):
            return None
        if server.tzinfo is None:  # a database whose client is not tz_aware
            server = server.replace(tzinfo=timezone.utc)
        return server - (before + (after - before) / 2)

    def index_keys(self) -> list[list[str]]:
        """The key fields of each index on the job collection, in order."""
        info = self.jobs.index_information()
        return [[field for field, _ in spec["key"]] for spec in info.values()]

    # Scheduling -----------------------------------------------------------------------
    def insert(self, doc: dict[str, Any]) -> tuple[dict[str, Any], bool]:
        """Insert a job. Returns ``(document, created)``: when a dedupe key is held by
        another job, that job's document and ``False``."""
        for _ in range(10):
            try:
                self._retrying("insert", lambda _: self.jobs.insert_one(doc))
                return doc, True
            except DuplicateKeyError:
                existing = self._resolve_duplicate(doc)
                if existing is not None:
                    return existing, existing["_id"] == doc["_id"]
                # The job holding the key finished in between: the key is free again.
        raise RuntimeError(
            f"could not insert job for task {doc['task']!r}: dedupe key keeps changing"
        )

    def insert_many(self, docs: Sequence[dict[str, Any]]) -> list[tuple[dict[str, Any], bool]]:
        """Insert jobs in one round trip (unordered); each is resolved as :meth:`insert`."""
        if not docs:
            return []
        failed: dict[int, dict[str, Any]] = {}
        try:
            self._retrying("insert_many", lambda _: self.jobs.insert_many(docs, ordered=False))
        except BulkWriteError as exc:
            for error in exc.details.get("writeErrors", []):
                if error.get("code") != 11000:
                    raise
                failed[error["index"]] = docs[error["index"]]
        results: list[tuple[dict[str, Any], bool]] = []
        for index, doc in enumerate(docs):
            if index not in failed:
                results.append((doc, True))
                continue
            existing = self._resolve_duplicate(doc)
            results.append(
                self.insert(doc) if existing is None else (existing, existing["_id"] == doc["_id"])
            )
        return results

    def _resolve_duplicate(self, doc: Mapping[str, Any]) -> dict[str, Any] | None:
        """After a duplicate-key error: our own document (an insert repeated after a lost
        reply) or the job holding the dedupe key, else None."""
        own = self.jobs.find_one({"_id": doc["_id"]})
        if own is not None:
            return dict(own)
        for field in DEDUPE_FIELDS:
            if field in doc:
                holder = self.jobs.find_one({"task": doc["task"], field: doc[field]})
                if holder is not None:
                    return dict(holder)
        return None

    # Reads --------------------------------------------------------------------------------
    def get(self, job_id: Any) -> dict[str, Any] | None:
        return self._retrying("get", lambda _: self.jobs.find_one({"_id": job_id}))

    def find(
        self,
        query: Mapping[str, Any],
        *,
        sort: Sequence[tuple[str, int]] = (),
        skip: int = 0,
        limit: int = 0,
        projection: Mapping[str, Any] | None = None,
    ) -> list[dict[str, Any]]:
        kwargs: dict[str, Any] = {"skip": skip, "limit": limit}
        if sort:
            kwargs["sort"] = list(sort)
        if projection is not None:
            kwargs["projection"] = dict(projection)
        return self._retrying("find", lambda _: list(self.jobs.find(dict(query), **kwargs)))

    def count(self, query: Mapping[str, Any]) -> int:
        return int(self._retrying("count", lambda _: self.jobs.count_documents(dict(query))))

    def counts_by_task_status(self) -> list[dict[str, Any]]:
        pipeline = [{"$group": {"_id": {"task": "$task", "status": "$status"}, "n": {"$sum": 1}}}]
        return self._retrying("stats", lambda _: list(self.jobs.aggregate(pipeline)))

    def unknown_due_tasks(
        self, known: Iterable[str], now: datetime, limit: int = 20
    ) -> list[dict[str, Any]]:
        """Due pending jobs whose task is not in ``known``: ``[{_id: task, n: count}]``."""
        pipeline: list[dict[str, Any]] = [
            {"$match": {"status": PENDING, "run_at": {"$lte": now}, "task": {"$nin": list(known)}}},
            {"$group": {"_id": "$task", "n": {"$sum": 1}}},
            {"$sort": {"n": -1}},
            {"$limit": limit},
        ]
        return self._retrying("unknown tasks", lambda _: list(self.jobs.aggregate(pipeline)))

    # Claim, heartbeat, fenced writes --------------------------------------------------------
    def claim(
        self,
        *,
        owner: str,
        tasks: Sequence[str],
        queues: Sequence[str] | None,
        now: datetime,
        lease_duration: float,
        job_id: Any = None,
    ) -> dict[str, Any] | None:
        """Atomically take the first due pending job (by priority, then due time) among
        ``tasks`` and ``queues`` (None: every queue). Returns it as now running, or None.

        With ``job_id``, take that job if it is pending, due or not (eager mode)."""
        if not tasks:
            return None
        token = new_token()
        query: dict[str, Any] = {"status": PENDING}
        if job_id is not None:
            query["_id"] = job_id
        else:
            query["run_at"] = {"$lte": now}
            if queues is not None:
                query["queue"] = {"$in": list(queues)}
        query["task"] = {"$in": list(tasks)}
        update = {
            "$set": {
                "status": RUNNING,
                "lease": {
                    "owner": owner,
                    "token": token,
                    "until": _ms(now + timedelta(seconds=lease_duration)),
                    "heartbeat_at": now,
                },
                "started_at": now,
                "updated_at": now,
            },
            "$inc": {"attempts": 1},
            "$unset": {"dedupe_pending": ""},
        }

        def attempt(n: int) -> dict[str, Any] | None:
            if n > 0:  # the last try may have landed: look for our token first
                mine = self.jobs.find_one({"lease.token": token, "status": RUNNING})
                if mine is not None:
                    return dict(mine)
            return self.jobs.find_one_and_update(
                query, update, sort=CLAIM_SORT, return_document=ReturnDocument.AFTER
            )

        return self._retrying("claim", attempt)

    def unclaim(self, job_id: Any, token: str, now: datetime) -> bool:
        """Give back a claim that could not start (no concurrency slot), uncounted."""
        return self.transition(
            job_id,
            token,
            {
                "$set": {"status": PENDING, "lease": None, "updated_at": now},
                "$inc": {"attempts": -1},
            },
        )

    def renew(
        self, job_id: Any, token: str, now: datetime, until: datetime
    ) -> dict[str, Any] | None:
        """Extend a lease to ``until``. Returns ``{"cancel_requested": ...}``, or None if
        the lease is lost."""
        update = {"$set": {"lease.until": _ms(until), "lease.heartbeat_at": now}}
        return self._retrying(
            "heartbeat",
            lambda _: self.jobs.find_one_and_update(
                {"_id": job_id, "lease.token": token, "status": RUNNING},
                update,
                projection={"cancel_requested": True},
                return_document=ReturnDocument.AFTER,
            ),
        )

    def transition(self, job_id: Any, token: str, update: dict[str, Any]) -> bool:
        """A write by the lease holder (finish, fail, retry, next slot, progress).

        Fenced: it lands only while ``token`` holds the job's lease. Returns False when
        it does not (the lease was lost: another worker may own the job now).
        """
        write = new_token()
        update = {**update, "$set": {**update.get("$set", {}), "last_write": write}}
        fence = {"_id": job_id, "lease.token": token, "status": RUNNING}

        def attempt(n: int) -> bool:
            result = self.jobs.update_one(fence, update)
            if result.matched_count:
                return True
            if n > 0:  # a repeated write: did the first one land before its reply was lost?
                return (
                    self.jobs.find_one({"_id": job_id, "last_write": write}, {"_id": 1}) is not None
                )
            return False

        return self._retrying("transition", attempt)

    def progress(self, job_id: Any, token: str, progress: dict[str, Any]) -> bool:
        """Fenced write of a running job's progress."""
        result = self._retrying(
            "progress",
            lambda _: self.jobs.update_one(
                {"_id": job_id, "lease.token": token, "status": RUNNING},
                {"$set": {"progress": progress}},
            ),
        )
        return bool(result.matched_count)

    # Reaper -----------------------------------------------------------------------------------
    def expired(self, now: datetime, limit: int = 100) -> list[dict[str, Any]]:
        """Running jobs whose lease ran out before ``now``."""
        return self.find(
            {"status": RUNNING, "lease.until": {"$lt": now}},
            sort=[("lease.until", ASCENDING)],
            limit=limit,
        )

    def reap(self, job_id: Any, token: str, now: datetime, update: dict[str, Any]) -> bool:
        """Apply ``update`` to a job whose lease ``token`` expired, re-checking in the same
        write that it is still expired (a heartbeat that lands first wins).

        It does not touch ``last_write``: that field proves a *holder's* own write
        landed, and the reaper writes on behalf of no holder."""
        result = self._retrying(
            "reap",
            lambda _: self.jobs.update_one(
                {
                    "_id": job_id,
                    "status": RUNNING,
                    "lease.token": token,
                    "lease.until": {"$lt": now},
                },
                update,
            ),
        )
        return bool(result.matched_count)

    # Control by users ---------------------------------------------------------------------------
    def cancel_pending(self, job_id: Any, update: dict[str, Any]) -> dict[str, Any] | None:
        return self._retrying(
            "cancel",
            lambda _: self.jobs.find_one_and_update(
                {"_id": job_id, "status": PENDING}, update, return_document=ReturnDocument.AFTER
            ),
        )

    def request_cancel(self, job_id: Any, now: datetime) -> dict[str, Any] | None:
        return self._retrying(
            "cancel",
            lambda _: self.jobs.find_one_and_update(
                {"_id": job_id, "status": RUNNING},
                {"$set": {"cancel_requested": True, "updated_at": now}},
                return_document=ReturnDocument.AFTER,
            ),
        )

    def update_where(
        self, query: Mapping[str, Any], update: Mapping[str, Any]
    ) -> dict[str, Any] | None:
        """``find_one_and_update`` returning the document after the change."""
        return self._retrying(
            "update",
            lambda _: self.jobs.find_one_and_update(
                dict(query), dict(update), return_document=ReturnDocument.AFTER
            ),
        )

    def delete_many(self, query: Mapping[str, Any]) -> int:
        result = self._retrying("delete", lambda _: self.jobs.delete_many(dict(query)))
        return int(result.deleted_count)

    # Repeating schedules -------------------------------------------------------------------------
    def upsert_schedule(self, doc: dict[str, Any], now: datetime) -> bool:
        """Make a decorator-declared schedule exist exactly once, and carry changes of
        its rule, queue, priority or attempts over to an existing one. The next slot is
        recomputed (from ``doc``) only when the rule changed and the job is waiting.
        Returns True if the document was created."""
        job_id = doc["_id"]

        def create(_: int) -> bool:
            try:
                result = self.jobs.update_one({"_id": job_id}, {"$setOnInsert": doc}, upsert=True)
            except DuplicateKeyError:  # a racing upsert created it first
                return False
            return result.upserted_id is not None

        if self._retrying("upsert schedule", create):
            return True
        changed_rule = {"$ne": doc["repeat"]}
        self._retrying(
            "update schedule",
            lambda _: self.jobs.update_one(
                {"_id": job_id, "status": PENDING, "repeat": changed_rule},
                {"$set": {"run_at": doc["run_at"], "scheduled_for": doc["scheduled_for"]}},
            ),
        )
        fields = {k: doc[k] for k in ("repeat", "queue", "priority", "max_attempts")}
        self._retrying(
            "update schedule",
            lambda _: self.jobs.update_one(
                {"_id": job_id, "$or": [{k: {"$ne": v}} for k, v in fields.items()]},
                {"$set": {**fields, "updated_at": now}},
            ),
        )
        return False

    # Concurrency slots ---------------------------------------------------------------------------
    def ensure_slots(self, task: str, limit: int) -> None:
        """Create the slot documents ``0 .. limit-1`` of a task (idempotent)."""
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
            self._retrying("slots", lambda _: self.slots.insert_many(docs, ordered=False))
        except BulkWriteError as exc:
            if any(e.get("code") != 11000 for e in exc.details.get("writeErrors", [])):
                raise

    def take_slot(
        self,
        *,
        task: str,
        limit: int,
        token: str,
        job_id: Any,
        owner: str,
        now: datetime,
        lease_duration: float,
    ) -> bool:
        """Take a free (or expired) slot of ``task`` for the lease ``token``."""
        update = {
            "$set": {
                "token": token,
                "job": job_id,
                "owner": owner,
                "until": _ms(now + timedelta(seconds=lease_duration)),
            }
        }
        query = {
            "task": task,
            "index": {"$lt": limit},
            "$or": [{"token": None}, {"until": {"$lt": now}}],
        }

        def attempt(n: int) -> bool:
            if n > 0 and self.slots.find_one({"task": task, "token": token}) is not None:
                return True
            return self.slots.find_one_and_update(query, update) is not None

        return self._retrying("take slot", attempt)

    def renew_slot(self, task: str, token: str, until: datetime) -> bool:
        """Extend a held slot to ``until``; False if the slot is no longer held by ``token``."""
        result = self._retrying(
            "renew slot",
            lambda _: self.slots.update_one(
                {"task": task, "token": token}, {"$set": {"until": _ms(until)}}
            ),
        )
        return bool(result.matched_count)

    def release_slot(self, task: str, token: str) -> None:
        self._retrying(
            "release slot",
            lambda _: self.slots.update_one(
                {"task": task, "token": token},
                {"$set": {"token": None, "job": None, "owner": None, "until": None}},
            ),
        )

    def slot_holders(self, task: str, now: datetime) -> int:
        """Slots of ``task`` held by a live lease."""
        return self.slots.count_documents(
            {"task": task, "token": {"$ne": None}, "until": {"$gte": now}}
        )
