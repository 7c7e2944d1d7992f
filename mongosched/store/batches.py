"""Claims in batches, for :class:`~mongosched.store.mongo.MongoStore` (part of it).

A batched claim takes up to ``limit`` due jobs in three round trips whatever the limit:

1. read the ids of the first ``limit`` candidates on the claim index (the claim's own
   filter and sort);
2. one unordered bulk write of one update per candidate, each re-checking the whole
   claim filter (still pending, still due, ...) and setting a lease under a token of
   its own, made before the call;
3. read back, by id and token, the jobs whose update landed.

Each job gets its own token, as a single claim would: every later write for it
(renewal, permit, settlement) is fenced on a token that names that one lease. A racing
claimer that read the same candidates loses those updates whose filter no longer
matches; nobody takes a job twice. After a network error the bulk write is repeated
(an update that landed no longer matches) and the read back finds what landed by
token.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from pymongo import UpdateOne
from pymongo.errors import BulkWriteError

from ..errors import MalformedJob
from ..records import JobRecord
from .documents import CLAIM_SORT, RUNNING, claim_query, claim_update, malformed_update, to_record
from .permits import MongoPermits

__all__ = ["MongoBatches"]

log = logging.getLogger("mongosched.store")


class MongoBatches(MongoPermits):
    """The batched operations of :class:`~mongosched.store.mongo.MongoStore`."""

    def claim_batch(
        self,
        *,
        owner: str,
        tasks: Sequence[str],
        queues: Sequence[str] | None,
        now: datetime,
        lease_duration: float,
        limit: int,
    ) -> list[JobRecord]:
        if not tasks or limit < 1:
            return []
        query = claim_query(tasks, queues, now)
        ids = self._retrying(
            "claim",
            lambda _: [
                doc["_id"]
                for doc in self.jobs.find(query, {"_id": True}, sort=CLAIM_SORT, limit=limit)
            ],
        )
        if not ids:
            return []
        tokens = {job_id: uuid.uuid4().hex for job_id in ids}
        updates = [
            UpdateOne({**query, "_id": job_id}, claim_update(owner, token, now, lease_duration))
            for job_id, token in tokens.items()
        ]

        def write(_: int) -> None:
            try:
                self.jobs.bulk_write(updates, ordered=False)
            except BulkWriteError as exc:  # the others landed: read back what did
                for error in exc.details.get("writeErrors", []):
                    log.warning("claim of job %s refused: %s", ids[error["index"]], error)

        self._retrying("claim", write)
        landed = {"_id": {"$in": ids}, "lease.token": {"$in": list(tokens.values())}}
        docs = self._retrying("claim", lambda _: list(self.jobs.find(landed)))
        mine = {
            doc["_id"]: doc
            for doc in docs
            if doc.get("status") == RUNNING and doc["lease"]["token"] == tokens[doc["_id"]]
        }
        records = []
        for job_id in ids:  # in claim order
            doc = mine.get(job_id)
            if doc is None:
                continue  # another claimer was first
            try:
                records.append(to_record(doc, check=True))
            except MalformedJob as exc:  # failed alone
                self._fail_malformed({"_id": job_id, "lease.token": tokens[job_id]}, str(exc), now)
        return records

    def _fail_malformed(self, fence: dict[str, Any], reason: str, now: datetime) -> None:
        """Fail a job that cannot be processed, alone (if ``fence`` still matches)."""
        update = malformed_update(reason, now)
        result = self._retrying("malformed job", lambda _: self.jobs.update_one(fence, update))
        if result.matched_count:
            log.error("%s: failed alone, without running (MalformedJob)", reason)
