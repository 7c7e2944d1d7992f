"""A lease's life on MongoDB, one job at a time (a part of
:class:`~mongosched.store.mongo.MongoStore`): the holder's fenced writes (renewals, its
slot, progress, its settlement) and the reaper's settlement of a lease that ran out.
The filters and updates are :mod:`~mongosched.store.mongo.updates`'s;
:mod:`~mongosched.store.mongo.claims` claims (one job or many) and settles many at
once over these.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any

from pymongo import ReturnDocument
from pymongo.errors import DuplicateKeyError

from mongosched._core.records import JobRecord, Renewal, Settlement
from mongosched.errors import MalformedJob
from mongosched.store import codec
from mongosched.store.mongo.connection import MongoConnection, patiently
from mongosched.store.mongo.documents import PENDING, RUNNING, ms, to_record
from mongosched.store.mongo.updates import (
    dedupe_hold,
    malformed_update,
    set_also,
    settle_update,
)
from mongosched.store.patience import Patience

__all__ = ["MongoLeases"]

log = logging.getLogger("mongosched.store")


class MongoLeases:
    """The lease holder's writes, and the reaper's."""

    def __init__(self, connection: MongoConnection) -> None:
        self.connection = connection

    def renew(
        self,
        job_id: Any,
        token: str,
        now: datetime,
        until: datetime,
        deadline: float | None = None,
    ) -> Renewal:
        doc = self.connection.retrying(
            "heartbeat",
            lambda _: self.connection.jobs.find_one_and_update(
                {"_id": job_id, "lease.token": token, "status": RUNNING},
                {"$set": {"lease.until": ms(until), "lease.heartbeat_at": now}},
                projection={"cancel_requested": True},
                return_document=ReturnDocument.AFTER,
            ),
            by=deadline,
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
            doc = self.connection.jobs.find_one_and_update(
                fence, update, return_document=ReturnDocument.AFTER
            )
            if doc is None and n > 0:  # repeated: did the first one land before its reply?
                doc = self.connection.jobs.find_one({"_id": job_id, "last_write": write})
            return doc

        return self.connection.retrying(what, attempt)

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

        return patiently(patience, self._settle, job, settlement, write)

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
            doc = write(settle_update(job.id, settlement, dedupe_hold(job), result, job), condition)
        except DuplicateKeyError:
            log.info(
                "job %s (%s): its dedupe key %r is held by another job; it waits without it",
                job.id,
                job.task,
                job.dedupe_key,
            )
            doc = write(settle_update(job.id, settlement, {}, result, job), condition)
        return None if doc is None else to_record(doc)

    def leases_expired(self, now: datetime, limit: int = 100) -> list[JobRecord]:
        """Running jobs whose lease ran out; one that cannot be processed is failed
        alone (``MalformedJob``) instead of being returned."""
        query = {"status": RUNNING, "lease.until": {"$lt": now}}
        docs = self.connection.retrying(
            "leases_expired",
            lambda _: list(
                self.connection.jobs.find(query, sort=[("lease.until", 1)], limit=limit)
            ),
        )
        records = []
        for doc in docs:
            try:
                records.append(to_record(doc, check=True))
            except MalformedJob as exc:
                self.fail_malformed({"_id": doc["_id"], **query}, str(exc), now)
        return records

    def quarantine(self, now: datetime, limit: int = 100) -> list[str]:
        """Fail the due pending jobs that cannot be claimed (their attempts are not a
        number); returns what was wrong with each."""
        query = {
            "status": PENDING,
            "run_at": {"$lte": now},
            "attempts": {"$not": {"$type": "number"}},
        }
        docs = self.connection.retrying(
            "quarantine", lambda _: list(self.connection.jobs.find(query, limit=limit))
        )
        reasons = []
        for doc in docs:
            reason = f"job {doc['_id']}: field 'attempts' is {doc.get('attempts')!r:.40}"
            self.fail_malformed({"_id": doc["_id"], **query}, reason, now)
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
            return self.connection.modify("reap", {**fence, **condition}, update)

        return self._settle(job, settlement, write)

    def fail_malformed(self, fence: dict[str, Any], reason: str, now: datetime) -> None:
        """Fail a job that cannot be processed, alone (if ``fence`` still matches)."""
        update = malformed_update(reason, now)
        result = self.connection.retrying(
            "malformed job", lambda _: self.connection.jobs.update_one(fence, update)
        )
        if result.matched_count:
            log.error("%s: failed alone, without running (MalformedJob)", reason)
