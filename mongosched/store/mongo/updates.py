"""The writes that move a job document from one status to another: a claim's filter and
update, edits of unstarted jobs, settlements, and the documents and records those writes
leave when they land as fenced (computed instead of read back, see
:mod:`mongosched.store.mongo.claims`). The document's layout is
:mod:`mongosched.store.mongo.documents`.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

import bson
from bson.raw_bson import RawBSONDocument

from mongosched._core import ranks
from mongosched._core.records import (
    ATTEMPTS_KEPT,
    ERRORS_KEPT,
    ErrorInfo,
    JobRecord,
    JobStatus,
    PendingChanges,
    ScheduleChanges,
    Settlement,
    ended_attempt,
)
from mongosched._core.transitions import REPLACED, kept_until, may_expire, releases_hold
from mongosched.store.claimant import here
from mongosched.store.codec import CODEC_OPTIONS, new_token
from mongosched.store.mongo.documents import (
    DEDUPE_FIELDS,
    PENDING,
    RUNNING,
    attempt_document,
    attempt_error_document,
    aware,
    error_document,
    last_run_document,
    logs_document,
    missed_document,
    ms,
)

__all__ = [
    "claim_fence",
    "claim_query",
    "claim_update",
    "claim_updates",
    "dedupe_hold",
    "edit_fields",
    "malformed_update",
    "RAW_OPTIONS",
    "retry_update",
    "revised",
    "set_also",
    "settle_update",
    "unchanged_since_claim",
    "with_encoded",
]


def claim_query(
    tasks: Sequence[str], queues: Sequence[str] | None, now: datetime, job_id: Any = None
) -> dict[str, Any]:
    """The filter of a claim: pending jobs of ``tasks`` due by ``now`` in ``queues``
    (None: any), or the pending job ``job_id`` (due or not, any queue)."""
    query: dict[str, Any] = {"status": PENDING}
    if job_id is not None:
        query["_id"] = job_id
    else:
        query["run_at"] = {"$lte": now}
        if queues is not None:
            query["queue"] = {"$in": list(queues)}
    query["task"] = {"$in": list(tasks)}
    # A job whose attempts are not a number cannot be counted ($inc would fail the
    # whole claim): quarantine() fails it instead.
    query["attempts"] = {"$type": "number"}
    return query


def claim_update(owner: str, token: str, now: datetime, lease_duration: float) -> dict[str, Any]:
    """The update of a claim: running under a lease ``token`` until ``now +
    lease_duration`` (kept with this process's host and id), the attempt counted, a
    pending-scope dedupe key released."""
    now = ms(now)
    host, pid = here()
    lease = {
        "owner": owner,
        "token": token,
        "until": ms(now + timedelta(seconds=lease_duration)),
        "heartbeat_at": now,
        "host": host,
        "pid": pid,
    }
    return {
        "$set": {"status": RUNNING, "lease": lease, "started_at": now, "updated_at": now},
        "$inc": {"attempts": 1},
        "$unset": {DEDUPE_FIELDS["pending"]: ""},
    }


def claim_updates(
    owner: str, tokens: Sequence[str], now: datetime, lease_duration: float
) -> list[Mapping[str, Any]]:
    """The :func:`claim_update` of each lease token of a batched claim: encoded once
    and copied with each token in place of the first, as bytes, since encoding the
    same update again for every job was most of what its statement cost. Tokens have
    one length (:func:`~mongosched.store.codec.new_token`), so a copy stays well
    formed; when the first token's bytes are not found exactly once (never, for a
    random token), each update is built on its own."""
    first = tokens[0]
    encoded = bson.encode(
        claim_update(owner, first, now, lease_duration), codec_options=CODEC_OPTIONS
    )
    mark = first.encode()
    if encoded.count(mark) != 1 or any(len(token) != len(first) for token in tokens):
        return [claim_update(owner, token, now, lease_duration) for token in tokens]
    return [RawBSONDocument(encoded.replace(mark, token.encode())) for token in tokens]


def edit_fields(changes: PendingChanges | ScheduleChanges, now: datetime) -> dict[str, Any]:
    """The ``$set`` fields an edit of an unstarted job (a pending job's, a schedule's)
    begins with: ``updated_at``, and the priority, queue and due time it changes."""
    fields: dict[str, Any] = {"updated_at": ms(now)}
    if changes.priority is not None:
        fields["priority"] = changes.priority
    if changes.queue is not None:
        fields["queue"] = changes.queue
    if changes.run_at is not None:
        fields["run_at"] = ms(changes.run_at)
    return fields


def revised(fields: dict[str, Any]) -> dict[str, Any]:
    """``$set`` fields with a fresh ``rev``: what every write that changes an unstarted
    job's fields, or makes a job pending, sets, so that a batched claim's fence
    (:func:`claim_fence`) sees any change since it read the job."""
    fields["rev"] = new_token()
    return fields


def replacement(doc: Mapping[str, Any], holder: Mapping[str, Any]) -> dict[str, Any]:
    """The update a debounce makes to ``holder``, the waiting job holding ``doc``'s
    dedupe key: the fields of ``doc`` that
    :data:`~mongosched._core.transitions.REPLACED` names, set, and those ``doc`` has
    not, unset; a fair job ranked for its new priority and due time
    (:func:`~mongosched._core.ranks.edited_rank`); a label's hold released with the
    label (:func:`~mongosched._core.transitions.releases_hold`)."""
    fields = REPLACED
    update: dict[str, Any] = {"$set": revised({k: doc[k] for k in fields if k in doc})}
    if "rank" in holder:
        rank = ranks.edited_rank(
            holder["rank"],
            holder.get("fair_at"),
            doc["priority"],
            holder.get("aging"),
            aware(doc["run_at"]),
        )
        if rank != holder["rank"]:
            update["$set"]["rank"] = rank
    status = JobStatus(holder["status"])
    if releases_hold(status, "repeat" in holder, holder.get("label"), doc.get("label")):
        update["$set"]["status"] = JobStatus.PENDING.value
    unset = {k: "" for k in fields if k not in doc}
    if unset:
        update["$unset"] = unset
    return update


def replace_fields(held: dict[str, Any], doc: Mapping[str, Any]) -> None:
    """:func:`replacement` applied to ``held``, a document not yet stored (a debounce
    among the jobs of one insert)."""
    update = replacement(doc, held)
    held.update(update["$set"])
    for name in update.get("$unset", {}):
        held.pop(name, None)


def claim_fence(doc: Mapping[str, Any]) -> dict[str, Any]:
    """What a batched claim adds to the claim filter for a job it read: still that
    document, unchanged since (``rev``, see :func:`revised`; ``updated_at`` too), so
    that the claimed job is what was read, claimed
    (:func:`~mongosched._core.transitions.claimed`)."""
    return {"_id": doc["_id"], "updated_at": doc.get("updated_at"), "rev": doc.get("rev")}


def retry_update(now: datetime, repeating: bool, hold: Mapping[str, Any]) -> dict[str, Any]:
    """The update that runs a finished job again, as
    :func:`~mongosched._core.transitions.retried` says (``repeating``: the job has a
    repeat rule; ``hold``: its dedupe field, :func:`dedupe_hold`)."""
    now = ms(now)
    fields: dict[str, Any] = {
        "status": PENDING,
        "attempts": 0,
        "run_at": now,
        "updated_at": now,
        "result": None,
        **hold,
    }
    if repeating:
        fields["scheduled_for"] = now
    unset = dict.fromkeys(("finished_at", "expire_at", "cancel_requested", "expires_at"), "")
    return {"$set": revised(fields), "$unset": unset}


def dedupe_hold(job: JobRecord) -> dict[str, Any]:
    """The dedupe field a pending job holds, as ``$set`` fields."""
    if job.dedupe_key is None:
        return {}
    return {DEDUPE_FIELDS[job.dedupe_scope or "active"]: job.dedupe_key}


def malformed_update(reason: str, now: datetime) -> dict[str, Any]:
    """The update that fails a job that cannot be processed, alone."""
    error = ErrorInfo(type="MalformedJob", message=reason, module="mongosched.errors")
    return {
        "$set": {
            "status": JobStatus.FAILED.value,
            "lease": None,
            "error": error_document(error),
            "finished_at": now,
            "updated_at": now,
        },
        "$unset": {name: "" for name in DEDUPE_FIELDS.values()},
    }


def settle_update(
    job_id: Any,
    settlement: Settlement,
    restore: Mapping[str, Any],
    result: bytes | None = None,
    held: JobRecord | None = None,
) -> dict[str, Any]:
    """The update that applies ``settlement`` to job ``job_id``, as
    :func:`~mongosched._core.transitions.settled` says (``restore``: dedupe fields to
    hold again when the job goes back to pending; ``held``: the job as its lease's
    holder claimed it, whose attempt this ends).
    ``result``: the settlement's result as :func:`codec.encode_value` encoded it (for
    the size check), written as it is, not encoded again."""
    s = settlement
    fields: dict[str, Any] = {
        "status": s.status.value,
        "lease": None,
        "updated_at": s.now,
        "error": error_document(s.error),
    }
    if result is None:
        fields["result"] = s.result
    if s.attempts is not None:
        fields["attempts"] = s.attempts
    if s.run_at is not None:
        fields["run_at"] = ms(s.run_at)
    if s.scheduled_for is not None:
        fields["scheduled_for"] = s.scheduled_for
    if s.last_run is not None:
        fields["last_run"] = last_run_document(s.last_run)
    if s.missed is not None:
        fields["missed"] = missed_document(s.missed)
    if s.logs is not None:
        fields["logs"] = logs_document(s.logs)
    update: dict[str, Any] = {"$set": fields}
    if s.status is JobStatus.PENDING:
        revised(fields)
    if s.status.is_final:
        fields["finished_at"] = s.now
        if s.delete_at is not None and may_expire(job_id):
            # Without the job as claimed, the caller keeps its window (keep_window).
            delete_at = s.delete_at if held is None else kept_until(s.delete_at, held)
            fields["expire_at"] = ms(delete_at)
        update["$unset"] = {name: "" for name in DEDUPE_FIELDS.values()}
    else:
        fields.update(restore)
        update["$unset"] = {}
    update["$unset"].update(waiting_for="", unlinked="")  # a waiting job released or ended
    push: dict[str, Any] = {}
    if s.attempt_error is not None:  # the last ERRORS_KEPT, oldest first
        entry = attempt_error_document(s.attempt_error)
        push["errors"] = {"$each": [entry], "$slice": -ERRORS_KEPT}
    ended = None if held is None else ended_attempt(held, s)
    if ended is not None:  # the last ATTEMPTS_KEPT, oldest first
        push["history"] = {"$each": [attempt_document(ended)], "$slice": -ATTEMPTS_KEPT}
    if push:
        update["$push"] = push
    if result is not None:
        update["$set"] = with_encoded(fields, "result", result)
    return update


def keep_window(
    modify: Callable[[str, Mapping[str, Any], Mapping[str, Any]], dict[str, Any] | None],
    doc: dict[str, Any] | None,
) -> dict[str, Any] | None:
    """``doc``, a job just written final by a caller that did not have it as claimed (a
    cancel, a failed dependency), kept until its throttle window closes where its
    expiry came sooner (:func:`~mongosched._core.transitions.kept_until`): one more
    write (``modify``: ``MongoConnection.modify``), for such a job only."""
    if doc is None:
        return None
    until, expire_at = doc.get("dedupe_until"), doc.get("expire_at")
    if until is None or expire_at is None or until <= expire_at:
        return doc
    return modify("keep window", {"_id": doc["_id"]}, {"$max": {"expire_at": until}}) or doc


RAW_OPTIONS = CODEC_OPTIONS.with_options(document_class=RawBSONDocument)


def with_encoded(fields: Mapping[str, Any], name: str, encoded: bytes) -> RawBSONDocument:
    """``fields`` and ``name``, as one BSON document; ``name`` holds the value that
    ``encoded`` (the BSON of ``{"v": value}``) holds, copied, not encoded again."""
    head = bson.encode(fields, codec_options=CODEC_OPTIONS)
    # encoded: size (4 bytes), the value's type (1), "v\0" (2), the value, "\0" (1).
    element = encoded[4:5] + name.encode() + b"\x00" + encoded[7:-1]
    body = head[4:-1] + element
    return RawBSONDocument(struct.pack("<i", len(body) + 5) + body + b"\x00", RAW_OPTIONS)


def set_also(update: Mapping[str, Any], fields: Mapping[str, Any]) -> dict[str, Any]:
    """``update`` whose ``$set`` sets ``fields`` too (a raw ``$set`` stays raw)."""
    current = update.get("$set", {})
    if isinstance(current, RawBSONDocument):
        extra = bson.encode(fields, codec_options=CODEC_OPTIONS)
        body = bytes(current.raw)[4:-1] + extra[4:-1]
        merged: Any = RawBSONDocument(
            struct.pack("<i", len(body) + 5) + body + b"\x00", RAW_OPTIONS
        )
    else:
        merged = {**current, **fields}
    return {**update, "$set": merged}


def unchanged_since_claim(job: JobRecord) -> dict[str, Any]:
    """Conditions that hold while a running job is as its holder claimed it, but for
    its lease's renewals: nothing wrote to it (every such write sets ``updated_at``,
    but for progress, checked whole on its own). ``updated_at`` is in milliseconds: a
    write within the millisecond of the claim leaves it as claimed, so the fields such
    writes set are checked too (a cancel requested, dependents linked). A settlement
    landing under them leaves exactly
    :func:`~mongosched._core.transitions.settled` of ``job``."""
    fence: dict[str, Any] = {"updated_at": job.updated_at, "cancel_requested": {"$ne": True}}
    p = job.progress  # maybe a previous attempt's, of this one's millisecond: whole
    if p is None:
        fence["progress"] = None
    else:
        fence.update({"progress.at": p.at, "progress.value": p.value})
        fence["progress.message"] = p.message
    if not job.has_dependents:
        fence["has_dependents"] = {"$ne": True}
    return fence
