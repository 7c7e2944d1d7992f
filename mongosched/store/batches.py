"""Claims and settlements in batches, for :class:`~mongosched.store.mongo.MongoStore`
(part of it).

A batched claim takes up to ``limit`` due jobs in two round trips whatever the limit
(up to three jobs: one round trip each, one at a time):

1. read the first ``limit`` candidates on the claim index (the claim's own filter and
   sort);
2. one unordered bulk write of one update per candidate, each re-checking the whole
   claim filter (still pending, still due, ...) and that the job is still the document
   read (:func:`~mongosched.store.updates.claim_fence`: its ``rev``, which every
   write that changes an unstarted job's fields or makes a job pending sets afresh),
   and setting a lease under a token of its own, made before the call.

When every update landed at the first try, the claimed jobs are the documents read
with the claim applied (:func:`~mongosched.store.updates.claimed_document`). Otherwise
(a racing claimer took some, one changed meanwhile, a reply was lost and the write
repeated) a third round trip reads back, by id and token, the jobs whose update landed.

Each job gets its own token, as a single claim would: every later write for it
(renewal, permit, settlement) is fenced on a token that names that one lease. A racing
claimer that read the same candidates loses those updates whose filter no longer
matches; nobody takes a job twice. After a network error the bulk write is repeated
(an update that landed no longer matches) and the read back finds what landed by
token.

Several settlements are written in one unordered bulk write, each update fenced on its
own job's token (and on the job being as claimed), so one that misses never affects the
others; see :meth:`MongoBatches.settle_many`.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from pymongo import UpdateOne
from pymongo.errors import BulkWriteError

from ..errors import MalformedJob, SerializationError
from ..records import JobRecord, Settlement
from . import codec
from .documents import CLAIM_SORT, RUNNING, to_record
from .permits import MongoPermits
from .updates import (
    claim_fence,
    claim_query,
    claim_update,
    claimed_document,
    dedupe_hold,
    malformed_update,
    set_also,
    settle_update,
    settled_record,
    unchanged_since_claim,
)

__all__ = ["MongoBatches"]

log = logging.getLogger("mongosched.store")

BATCH_FROM = 3
"""A batched claim takes two round trips (three when one of its updates missed): up to
two jobs are claimed one at a time, one round trip each."""


def settled_result(task: str, settlement: Settlement) -> tuple[Any, bytes | None]:
    """The settlement's result as the job will hold it (as BSON gives it back), and
    encoded; :class:`SerializationError` when it cannot be stored."""
    if settlement.result is None:
        return None, None
    encoded = codec.encode_value(task, "return value", settlement.result)
    return codec.decode(encoded)["v"], encoded


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
        if limit < BATCH_FROM:  # fewer round trips (and less work) one at a time
            claimed: list[JobRecord] = []
            while len(claimed) < limit:
                record = self.claim(
                    owner=owner, tasks=tasks, queues=queues, now=now, lease_duration=lease_duration
                )
                if record is None:
                    break
                claimed.append(record)
            return claimed
        query = claim_query(tasks, queues, now)
        docs = self._retrying(
            "claim", lambda _: list(self.jobs.find(query, sort=CLAIM_SORT, limit=limit))
        )
        if not docs:
            return []
        ids = [doc["_id"] for doc in docs]
        tokens = {job_id: codec.new_token() for job_id in ids}
        updates = {
            job_id: claim_update(owner, token, now, lease_duration)
            for job_id, token in tokens.items()
        }
        ops = [UpdateOne({**query, **claim_fence(doc)}, updates[doc["_id"]]) for doc in docs]
        tries: list[int] = []

        def write(attempt: int) -> int:
            tries.append(attempt)
            try:
                return self.jobs.bulk_write(ops, ordered=False).matched_count
            except BulkWriteError as exc:  # the others landed: read back what did
                for error in exc.details.get("writeErrors", []):
                    log.warning("claim of job %s refused: %s", ids[error["index"]], error)
                return -1

        matched = self._retrying("claim", write)
        if matched == len(ops) and len(tries) == 1:  # every one landed, as read
            mine = {doc["_id"]: claimed_document(doc, updates[doc["_id"]]) for doc in docs}
        else:  # some were taken or changed meanwhile, or a reply was lost: read back
            landed = {"_id": {"$in": ids}, "lease.token": {"$in": list(tokens.values())}}
            mine = {
                doc["_id"]: doc
                for doc in self._retrying("claim", lambda _: list(self.jobs.find(landed)))
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

    def settle_many(
        self, items: Sequence[tuple[JobRecord, Settlement]]
    ) -> list[JobRecord | SerializationError | None]:
        """One unordered bulk write of every settlement, each fenced on its job's token
        and on the job being as claimed (:func:`unchanged_since_claim`): the records of
        those that landed are computed (:func:`settled_record`), not read back. Jobs whose
        write did not land (a cancel requested, progress written, a lease lost, a dedupe
        key taken meanwhile) are found by reading back the writes' ids, and settled one
        by one as :meth:`settle` does, which says which of those lost their lease.
        Repeating jobs are settled one by one too."""
        results: list[Any] = [None] * len(items)
        writes: dict[int, tuple[str, UpdateOne, Any]] = {}
        for n, (job, settlement) in enumerate(items):
            try:
                result, encoded = settled_result(job.task, settlement)
            except SerializationError as exc:
                results[n] = exc
                continue
            if job.repeat is not None:
                # Its slot is recorded right after the claim, maybe within the same
                # millisecond (updated_at unchanged): settled alone, below.
                continue
            token = job.lease.token if job.lease is not None else ""
            write = codec.new_token()
            update = set_also(
                settle_update(job.id, settlement, dedupe_hold(job), encoded), {"last_write": write}
            )
            fence = {"_id": job.id, "lease.token": token, "status": RUNNING}
            fence.update(unchanged_since_claim(job))
            writes[n] = (write, UpdateOne(fence, update), result)
        alone = [n for n in range(len(items)) if n not in writes and results[n] is None]
        for n in alone:
            results[n] = self.settle(*items[n])
        if not writes:
            return results
        ops = [op for _, op, _ in writes.values()]
        tries: list[int] = []

        def bulk(attempt: int) -> tuple[int, bool]:
            tries.append(attempt)
            try:
                return self.jobs.bulk_write(ops, ordered=False).matched_count, False
            except BulkWriteError as exc:  # a dedupe key taken: settled one by one below
                return int(exc.details.get("nMatched", 0)), True

        matched, refused = self._retrying("settle", bulk)
        if matched == len(ops) and not refused and len(tries) == 1:
            landed = set(writes)  # every write landed, as written
        else:
            ids = [items[n][0].id for n in writes]
            docs = self._retrying(
                "settle",
                lambda _: list(self.jobs.find({"_id": {"$in": ids}}, {"last_write": True})),
            )
            last = {doc["_id"]: doc.get("last_write") for doc in docs}
            landed = {n for n, (write, _, _) in writes.items() if last.get(items[n][0].id) == write}
        for n, (_, _, result) in writes.items():
            job, settlement = items[n]
            if n in landed:
                results[n] = settled_record(job, settlement, result)
            else:  # as alone: the cancel, the dedupe key, the lost lease are seen there
                results[n] = self.settle(job, settlement)
        return results

    # What MongoStore defines.
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
        raise NotImplementedError

    def settle(self, job: JobRecord, settlement: Settlement) -> JobRecord | None:
        raise NotImplementedError

    def _fail_malformed(self, fence: dict[str, Any], reason: str, now: datetime) -> None:
        """Fail a job that cannot be processed, alone (if ``fence`` still matches)."""
        update = malformed_update(reason, now)
        result = self._retrying("malformed job", lambda _: self.jobs.update_one(fence, update))
        if result.matched_count:
            log.error("%s: failed alone, without running (MalformedJob)", reason)
