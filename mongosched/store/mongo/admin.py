"""The MongoDB store's :class:`~mongosched.store.control.Admin` part (of
:class:`~mongosched.store.mongo.MongoStore`), its writes and reads beyond one job at a
time: bulk writes by filter, a bounded batch of ids per write; pauses; schedule edits;
the registry of live runners; throughput.

Bulk writes take the ids a walk found (:meth:`select_ids`, keyset pagination in ``_id``
order on the ``bulk_*`` indexes) and re-state in the write itself what the job must
still be (its status), so a job that changed meanwhile is left alone.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any

from bson import ObjectId
from pymongo.errors import DuplicateKeyError

from mongosched._core.records import (
    IDLE_SCHEDULE_STATUSES,
    OPEN_STATUSES,
    AuditEntry,
    JobQuery,
    JobRecord,
    JobStatus,
    Pause,
    QueueBacklog,
    RunnerInfo,
    ScheduleChanges,
    Settlement,
)
from mongosched.errors import JobStateError
from mongosched.store import codec
from mongosched.store.mongo.connection import MongoConnection
from mongosched.store.mongo.documents import (
    FINAL,
    KEEPS_DEPENDENTS,
    PENDING,
    RUNNING,
    aware,
    edit_document,
    ms,
    query_document,
    to_record,
)
from mongosched.store.mongo.updates import (
    edit_fields,
    keep_window,
    retry_update,
    revised,
    settle_update,
)

__all__ = ["MongoAdmin"]

log = logging.getLogger("mongosched.store")

PAUSED = JobStatus.PAUSED.value
OPEN = [s.value for s in OPEN_STATUSES]
ID_TYPES = ("string", "objectId")
"""The types of job ids, in MongoDB's sort order: declared schedules' strings, then
ObjectIds. A range on ``_id`` matches one type only, so a walk takes them in turn."""


class MongoAdmin:
    """Bulk writes, pauses, schedule edits and the runner registry in MongoDB. A bulk
    retry retries the few jobs that hold a dedupe key or a schedule one at a time, with
    ``retry_finished`` (:meth:`MongoJobs.retry_finished
    <mongosched.store.mongo.jobs.MongoJobs.retry_finished>`)."""

    def __init__(
        self,
        connection: MongoConnection,
        retry_finished: Callable[[Any, JobStatus, datetime], JobRecord | None],
        insert: Callable[[Sequence[JobRecord]], list[tuple[JobRecord, bool]]],
    ) -> None:
        self.connection = connection
        self.retry_finished = retry_finished
        self.insert = insert

    # Bulk operations -------------------------------------------------------------------------
    def select_ids(self, query: JobQuery, *, after: Any = None, limit: int = 500) -> list[Any]:
        base = query_document(query)
        found: list[Any] = []
        for kind in ID_TYPES:
            if isinstance(after, ObjectId) and kind == "string":
                continue  # every string id sorts before this one
            condition: dict[str, Any] = {"$type": kind}
            if after is not None and _id_type(after) == kind:
                condition["$gt"] = after
            want = limit - len(found)

            def page(_: int, c: dict[str, Any] = condition, n: int = want) -> list[Any]:
                cursor = self.connection.jobs.find(
                    {**base, "_id": c}, {"_id": 1}, sort=[("_id", 1)], limit=n
                )
                return [doc["_id"] for doc in cursor]

            found.extend(self.connection.retrying("select", page))
            if len(found) >= limit:
                break
        return found

    def retry_many(self, ids: Sequence[Any], statuses: Sequence[JobStatus], now: datetime) -> int:
        if not ids:
            return 0
        fence = {"_id": {"$in": list(ids)}, "status": {"$in": [s.value for s in statuses]}}
        # Most jobs have no dedupe key to hold again and no slot to restart: one write.
        plain = {**fence, "dedupe_key": {"$exists": False}, "repeat": {"$exists": False}}
        retried = self._update_many("retry", plain, retry_update(now, False, {}))
        others = [{"dedupe_key": {"$exists": True}}, {"repeat": {"$exists": True}}]
        special = {**fence, "$or": others}
        rest = self.connection.retrying(
            "retry", lambda _: list(self.connection.jobs.find(special, {"_id": 1, "status": 1}))
        )
        for doc in rest:  # the few others one at a time, as retry_job does
            try:
                if self.retry_finished(doc["_id"], JobStatus(doc["status"]), now) is not None:
                    retried += 1
            except JobStateError as exc:
                log.warning("%s; not retried", exc)
        return retried

    def cancel_many(self, ids: Sequence[Any], settlement: Settlement) -> tuple[int, int]:
        if not ids:
            return 0, 0
        ids = list(ids)
        cancelled = 0
        plain = [i for i in ids if not codec.is_schedule_id(i)]
        declared = [i for i in ids if codec.is_schedule_id(i)]
        for group in (plain, declared):  # declared schedules get no expiry (tombstones)
            if not group:
                continue
            cancelled += self._update_many(
                "cancel",
                {"_id": {"$in": group}, "status": {"$in": OPEN}},
                settle_update(group[0], settlement, {}),
            )
            if settlement.delete_at is not None and group is plain:
                self._keep_windows(group, settlement.delete_at)
        running = {"_id": {"$in": ids}, "status": RUNNING, "cancel_requested": {"$ne": True}}
        mark = {"$set": {"cancel_requested": True, "updated_at": ms(settlement.now)}}
        return cancelled, self._update_many("cancel", running, mark)

    def _keep_windows(self, ids: list[Any], delete_at: datetime) -> None:
        """Jobs of ``ids`` just cancelled whose throttle window outlasts their expiry,
        kept until it closes (one read; a write for each such job only)."""
        query = {"_id": {"$in": ids}, "dedupe_until": {"$gt": ms(delete_at)}}
        docs = self.connection.retrying("cancel", lambda _: list(self.connection.jobs.find(query)))
        for doc in docs:
            keep_window(self.connection.modify, doc)

    def _update_many(self, what: str, query: dict[str, Any], update: dict[str, Any]) -> int:
        result = self.connection.retrying(
            what, lambda _: self.connection.jobs.update_many(query, update)
        )
        return int(result.modified_count)

    def purge_many(self, ids: Sequence[Any], statuses: Sequence[JobStatus]) -> int:
        doomed = [i for i in ids if not codec.is_schedule_id(i)]
        if not doomed:
            return 0
        final = [s.value for s in statuses if s.is_final]
        query = {"_id": {"$in": doomed}, "status": {"$in": final}, **KEEPS_DEPENDENTS}
        result = self.connection.retrying(
            "purge", lambda _: self.connection.jobs.delete_many(query)
        )
        return int(result.deleted_count)

    def finished_counts(self, since: datetime, bucket: float) -> dict[tuple[int, JobStatus], int]:
        since = ms(since)
        query = {
            "status": {"$in": [JobStatus.COMPLETED.value, JobStatus.FAILED.value]},
            "finished_at": {"$gte": since},
        }
        # Covered by the "finished" index (status, finished_at): no document is read.
        projection = {"_id": 0, "status": 1, "finished_at": 1}
        docs = self.connection.retrying(
            "throughput", lambda _: list(self.connection.jobs.find(query, projection))
        )
        counts: dict[tuple[int, JobStatus], int] = {}
        for doc in docs:
            n = int((aware(doc["finished_at"]) - since).total_seconds() // bucket)
            key = (n, JobStatus(doc["status"]))
            counts[key] = counts.get(key, 0) + 1
        return counts

    def open_counts(self) -> dict[tuple[str, str, JobStatus], int]:
        unfinished = [s.value for s in JobStatus if not s.is_final]
        pipeline: list[dict[str, Any]] = [
            {"$match": {"status": {"$in": unfinished}}},
            {
                "$group": {
                    "_id": {"queue": "$queue", "task": "$task", "status": "$status"},
                    "n": {"$sum": 1},
                }
            },
        ]
        rows = self.connection.retrying(
            "depth", lambda _: list(self.connection.jobs.aggregate(pipeline))
        )
        return {
            (r["_id"]["queue"], r["_id"]["task"], JobStatus(r["_id"]["status"])): r["n"]
            for r in rows
        }

    def backlog(self, now: datetime) -> dict[str, QueueBacklog]:
        now = ms(now)
        pending = {"$eq": ["$status", PENDING]}
        running = {"$eq": ["$status", RUNNING]}
        expired = {"$and": [running, {"$lt": ["$lease.until", now]}]}
        pipeline: list[dict[str, Any]] = [
            {
                "$match": {  # the "due" index, and the reaper's
                    "$or": [{"status": PENDING, "run_at": {"$lte": now}}, {"status": RUNNING}]
                }
            },
            {
                "$group": {
                    "_id": "$queue",
                    "due": {"$sum": {"$cond": [pending, 1, 0]}},
                    "oldest": {"$min": {"$cond": [pending, "$run_at", None]}},
                    "running": {"$sum": {"$cond": [running, 1, 0]}},
                    "expired": {"$sum": {"$cond": [expired, 1, 0]}},
                }
            },
        ]
        rows = self.connection.retrying(
            "backlog", lambda _: list(self.connection.jobs.aggregate(pipeline))
        )
        return {
            r["_id"]: QueueBacklog(
                int(r["due"]),
                None if r["oldest"] is None else aware(r["oldest"]),
                int(r["running"]),
                int(r["expired"]),
            )
            for r in rows
        }

    # Pauses -------------------------------------------------------------------------------------
    def add_pause(self, pause: Pause) -> bool:
        doc = {"kind": pause.kind, "name": pause.name, "since": ms(pause.since)}
        if pause.reason is not None:
            doc["reason"] = pause.reason

        def add(_: int) -> bool:
            try:
                result = self.connection.pauses_collection.update_one(
                    {"_id": pause_id(pause.kind, pause.name)}, {"$setOnInsert": doc}, upsert=True
                )
            except DuplicateKeyError:  # a racing pause made it first
                return False
            return result.upserted_id is not None

        return self.connection.retrying("pause", add)

    def remove_pause(self, kind: str, name: str) -> bool:
        result = self.connection.retrying(
            "resume",
            lambda _: self.connection.pauses_collection.delete_one({"_id": pause_id(kind, name)}),
        )
        return bool(result.deleted_count)

    def pauses(self) -> list[Pause]:
        order = [("kind", 1), ("name", 1)]
        docs = self.connection.retrying(
            "pauses", lambda _: list(self.connection.pauses_collection.find(sort=order))
        )
        return [Pause(d["kind"], d["name"], aware(d["since"]), d.get("reason")) for d in docs]

    def pending_queues(self) -> list[str]:
        # A DISTINCT_SCAN of the claim index (status, queue, ...): one key per queue.
        values = self.connection.retrying(
            "queues", lambda _: self.connection.jobs.distinct("queue", {"status": PENDING})
        )
        return sorted(v for v in values if isinstance(v, str))

    def task_names(self) -> list[str]:
        # A DISTINCT_SCAN of the task_updated index (task, ...): one key per task.
        values = self.connection.retrying("tasks", lambda _: self.connection.jobs.distinct("task"))
        return sorted(v for v in values if isinstance(v, str))

    def labels(self) -> list[str]:
        # A DISTINCT_SCAN of the label_status index (label, ...): one key per label.
        values = self.connection.retrying(
            "labels", lambda _: self.connection.jobs.distinct("label", {"label": {"$exists": True}})
        )
        return sorted(v for v in values if isinstance(v, str))

    def pause_label(self, label: str, now: datetime, ids: Sequence[Any] | None = None) -> int:
        query: dict[str, Any] = {"label": label, "status": PENDING}
        if ids is not None:
            query["_id"] = {"$in": list(ids)}
        update = {"$set": {"status": PAUSED, "updated_at": ms(now)}}
        moved = self._update_many("pause", query, update)
        if moved and not self._paused([pause_id("task", label)]):  # resumed meanwhile
            self.resume_label(label, now)
            return 0
        return moved

    def resume_label(self, label: str, now: datetime) -> int:
        query = {"label": label, "status": PAUSED}
        update = {"$set": revised({"status": PENDING, "updated_at": ms(now)})}
        return self._update_many("resume", query, update)

    def pause_schedules(self, ids: Sequence[Any], now: datetime) -> int:
        if not ids:
            return 0
        query = {"_id": {"$in": list(ids)}, "status": PENDING, "repeat": {"$exists": True}}
        update = {"$set": {"status": PAUSED, "updated_at": ms(now)}}
        moved = self._update_many("pause", query, update)
        if moved:
            paused = self._paused([pause_id("schedule", str(i)) for i in ids])
            resumed = [i for i in ids if pause_id("schedule", str(i)) not in paused]
            moved -= sum(self.resume_schedule(i, now) is not None for i in resumed)
        return moved

    def _paused(self, keys: Sequence[str]) -> set[str]:
        """Which of the pauses ``keys`` are stored. A pause's write comes first and its
        read of the pause after: a resume removes the pause before it moves the jobs
        back, so either the write's read sees the pause gone (and moves back what it
        paused) or the resume comes after the write and moves them back."""
        pauses = self.connection.pauses_collection
        docs = self.connection.retrying(
            "pauses", lambda _: list(pauses.find({"_id": {"$in": list(keys)}}, {"_id": 1}))
        )
        return {str(doc["_id"]) for doc in docs}

    def resume_unpaused(self, now: datetime) -> int:
        pauses = self.pauses()
        labels = [p.name for p in pauses if p.kind == "task"]
        schedules = {p.name for p in pauses if p.kind == "schedule"}
        # Labelled jobs on the label_status index, one range per label not paused.
        query = {
            "label": {"$exists": True, "$nin": labels},
            "status": PAUSED,
            "repeat": {"$exists": False},
        }
        update = {"$set": revised({"status": PENDING, "updated_at": ms(now)})}
        released = self._update_many("resume", query, update)
        held = {"repeat": {"$exists": True}, "status": PAUSED}  # a few: the paused schedules
        docs = self.connection.retrying(
            "resume", lambda _: list(self.connection.jobs.find(held, {"_id": 1, "label": 1}))
        )
        for doc in docs:
            if str(doc["_id"]) not in schedules and doc.get("label") not in labels:
                released += self.resume_schedule(doc["_id"], now) is not None
        return released

    def resume_schedule(self, job_id: Any, now: datetime) -> JobRecord | None:
        update = {"$set": revised({"status": PENDING, "updated_at": ms(now)})}
        doc = self.connection.modify("resume", {"_id": job_id, "status": PAUSED}, update)
        return None if doc is None else to_record(doc)

    def insert_runs(
        self, schedule_id: Any, jobs: Sequence[JobRecord]
    ) -> list[tuple[JobRecord, bool]] | None:
        # Stored first, the schedule read after: no insert can follow the read.
        stored = self.insert(jobs)
        unfinished = {"_id": schedule_id, "status": {"$nin": FINAL}}
        if self.connection.retrying(
            "schedule", lambda _: self.connection.jobs.find_one(unfinished, {"_id": 1})
        ):
            return stored
        made = [run.id for run, created in stored if created]
        fence = {"_id": {"$in": made}, "status": PENDING}
        withdrawn = self.connection.retrying(
            "withdraw runs", lambda _: self.connection.jobs.delete_many(fence)
        ).deleted_count
        if withdrawn < len(made):  # a runner took one in the moment between: it runs
            log.warning(
                "schedule %s finished as %d job(s) were made to run its slots; %d started "
                "before they could be withdrawn",
                schedule_id,
                len(made),
                len(made) - withdrawn,
            )
            return stored
        return None

    def update_schedule(
        self, job: JobRecord, changes: ScheduleChanges, now: datetime
    ) -> JobRecord | None:
        fields = edit_fields(changes, now)
        if changes.run_at is not None:
            fields["scheduled_for"] = fields["run_at"]
        if changes.repeat is not None:
            fields["repeat"] = dict(changes.repeat)
        if changes.edit is not None:
            fields["edit"] = edit_document(changes.edit)
        fence = {
            "_id": job.id,
            "status": {"$in": [s.value for s in IDLE_SCHEDULE_STATUSES]},
            "updated_at": ms(job.updated_at),
        }
        doc = self.connection.modify("edit schedule", fence, {"$set": revised(fields)})
        return None if doc is None else to_record(doc)

    # Live runners -------------------------------------------------------------------------------
    def save_runner(self, runner: RunnerInfo, expire_at: datetime) -> None:
        doc = {
            "_id": runner.id,
            "name": runner.name,
            "host": runner.host,
            "pid": runner.pid,
            "queues": None if runner.queues is None else list(runner.queues),
            "tasks": list(runner.tasks),
            "workers": runner.workers,
            "in_flight": runner.in_flight,
            "started_at": ms(runner.started_at),
            "last_seen": ms(runner.last_seen),
            "version": runner.version,
            "expire_at": ms(expire_at),
        }
        self.connection.retrying(
            "register runner",
            lambda _: self.connection.runners_collection.replace_one(
                {"_id": runner.id}, doc, upsert=True
            ),
        )

    def remove_runner(self, runner_id: str) -> None:
        self.connection.retrying(
            "unregister runner",
            lambda _: self.connection.runners_collection.delete_one({"_id": runner_id}),
        )

    # The audit trail -----------------------------------------------------------------------
    def record_audit(self, entry: AuditEntry, expire_at: datetime | None) -> None:
        doc: dict[str, Any] = {
            "_id": ObjectId(),  # made before the write: a repeated write keeps it once
            "at": ms(entry.at),
            "actor": entry.actor,
            "via": entry.via,
            "action": entry.action,
            "target": entry.target,
            "count": entry.count,
            "detail": entry.detail,
            "known_by": entry.known_by,
        }
        if entry.job is not None:
            doc["job"] = entry.job
        if expire_at is not None:
            doc["expire_at"] = ms(expire_at)
        audit = self.connection.audit_collection
        self.connection.retrying(
            "audit", lambda _: audit.replace_one({"_id": doc["_id"]}, doc, upsert=True)
        )

    def audit_entries(self, now: datetime, limit: int = 100, job: Any = None) -> list[AuditEntry]:
        query: dict[str, Any] = {"$or": [{"expire_at": {"$gt": ms(now)}}, {"expire_at": None}]}
        if job is not None:
            query["job"] = job
        sort = [("at", -1), ("_id", -1)]
        audit = self.connection.audit_collection
        docs = self.connection.retrying(
            "audit entries", lambda _: list(audit.find(query, sort=sort, limit=limit))
        )
        return [
            AuditEntry(
                at=aware(d["at"]),
                actor=str(d.get("actor", "")),
                via=str(d.get("via", "")),
                action=str(d.get("action", "")),
                target=str(d.get("target", "")),
                count=d.get("count"),
                detail=d.get("detail"),
                job=d.get("job"),
                known_by=d.get("known_by"),
            )
            for d in docs
        ]

    def runners(self, now: datetime) -> list[RunnerInfo]:
        query = {"expire_at": {"$gt": ms(now)}}
        docs = self.connection.retrying(
            "runners",
            lambda _: list(
                self.connection.runners_collection.find(query, sort=[("name", 1), ("_id", 1)])
            ),
        )
        return [_runner(doc) for doc in docs]


def pause_id(kind: str, name: str) -> str:
    """The id of a stored pause."""
    return f"{kind}:{name}"


def _id_type(value: Any) -> str | None:
    if isinstance(value, str):
        return "string"
    if isinstance(value, ObjectId):
        return "objectId"
    return None


def _runner(doc: dict[str, Any]) -> RunnerInfo:
    queues = doc.get("queues")
    return RunnerInfo(
        id=str(doc["_id"]),
        name=str(doc.get("name", "")),
        host=str(doc.get("host", "")),
        pid=int(doc.get("pid") or 0),
        queues=None if queues is None else tuple(queues),
        tasks=tuple(doc.get("tasks") or ()),
        workers=int(doc.get("workers") or 0),
        in_flight=int(doc.get("in_flight") or 0),
        started_at=aware(doc.get("started_at")),
        last_seen=aware(doc.get("last_seen")),
        version=str(doc.get("version", "")),
    )
