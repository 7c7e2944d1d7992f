"""The MongoDB store's indexes: the job collection's and those of the collections beside
it (pauses, runners, the audit trail, permits, limits), each with why it exists.
``MongoConnection.prepare`` makes them; the workflows' are in :mod:`.workflows`."""

from __future__ import annotations

from typing import Any

from mongosched.store.mongo.documents import DEDUPE_FIELDS, RANKED, WINDOW_FIELD

__all__ = [
    "AUDIT_INDEXES",
    "INDEXES",
    "LIMIT_INDEXES",
    "PAUSE_INDEXES",
    "PERMIT_INDEXES",
    "RUNNER_INDEXES",
    "Index",
]

Index = tuple[list[tuple[str, int]], dict[str, Any]]
# Index names never change meaning: a changed index gets a new name (the server refuses
# new keys under an existing name). Dropped ones, for an upgrade note: claim,
# claim_any_queue (0.1: without the task).
INDEXES: list[Index] = [
    # Claim, Equality-Sort-Range: status (E), queue and task ($in: a few point ranges,
    # merged in sort order), priority+run_at (S), run_at (R). The task is in the index,
    # so a runner serving some tasks never examines other tasks' due jobs.
    (
        [("status", 1), ("queue", 1), ("task", 1), ("priority", 1), ("run_at", 1)],
        {"name": "claim_by_task"},
    ),
    # Claim by a runner that serves every queue (no queue to lead with).
    (
        [("status", 1), ("task", 1), ("priority", 1), ("run_at", 1)],
        {"name": "claim_by_task_any_queue"},
    ),
    # Ranked jobs (aging, fair shares): the same, sorted by rank; only they are in it.
    (
        [("status", 1), ("queue", 1), ("task", 1), ("rank", 1), ("run_at", 1)],
        {"name": "claim_ranked", "partialFilterExpression": RANKED},
    ),
    (
        [("status", 1), ("task", 1), ("rank", 1), ("run_at", 1)],
        {"name": "claim_ranked_any_queue", "partialFilterExpression": RANKED},
    ),
    # A fair key's latest start (the next job of that key starts after it).
    (
        [("task", 1), ("fair_key", 1), ("fair_at", 1)],
        {"name": "fair_key", "partialFilterExpression": {"fair_at": {"$exists": True}}},
    ),
    # A fair task's latest start among its claimed jobs (its fair clock: MongoJobs._rank).
    (
        [("task", 1), ("status", 1), ("fair_at", 1)],
        {"name": "fair_clock", "partialFilterExpression": {"fair_at": {"$exists": True}}},
    ),
    # The job due longest (stats(), the dashboard's lateness), and due jobs of any task.
    ([("status", 1), ("run_at", 1)], {"name": "due"}),
    # Purge: finished jobs by status and age.
    ([("status", 1), ("finished_at", 1)], {"name": "finished"}),
    # Reaper: running jobs whose lease ran out.
    ([("status", 1), ("lease.until", 1)], {"name": "reap"}),
    # Queries: by task, by task and status, by status; each newest first.
    ([("task", 1), ("updated_at", -1)], {"name": "task_updated"}),
    ([("task", 1), ("status", 1), ("updated_at", -1)], {"name": "task_status"}),
    ([("status", 1), ("updated_at", -1)], {"name": "status_updated"}),
    # Dedupe: a key is held only while its job is in the key's scope (fields unset after),
    # or for its throttle window (WINDOW_FIELD).
    *(
        (
            [("task", 1), (name, 1)],
            {"name": name, "unique": True, "partialFilterExpression": {name: {"$exists": True}}},
        )
        for name in (*DEDUPE_FIELDS.values(), WINDOW_FIELD)
    ),
    # Labelled jobs (a Django task's): by label and status, newest first; a pause or
    # resume of a label moves its jobs by label and status.
    (
        [("label", 1), ("status", 1), ("updated_at", -1)],
        {"name": "label_status", "partialFilterExpression": {"label": {"$exists": True}}},
    ),
    # Bulk operations (retry/cancel/purge by filter) walk the matches in _id order, a
    # batch at a time (keyset: _id > the last one). Equality-Sort-Range: the status
    # ($in: point ranges merged in _id order) and task (E), _id (S), then finished_at
    # (R: "finished before/after" is checked on the index keys, before any fetch). A
    # filter on queue, error type or creation time is checked on the fetched document:
    # each batch reads at most what it scans, and a walk scans each candidate once.
    ([("status", 1), ("_id", 1), ("finished_at", 1)], {"name": "bulk_by_status"}),
    (
        [("task", 1), ("status", 1), ("_id", 1), ("finished_at", 1)],
        {"name": "bulk_by_task"},
    ),
    # Repeating jobs, for schedules().
    (
        [("task", 1)],
        {"name": "repeating", "partialFilterExpression": {"repeat": {"$exists": True}}},
    ),
    # Retention: finished jobs carry expire_at (Job.delete_at); the server deletes them
    # after it. The field keeps its name: the TTL index is built on it.
    ([("expire_at", 1)], {"name": "expire_at", "expireAfterSeconds": 0}),
    # Flow control. The reaper's sweep of jobs past their expiry (pending, waiting).
    (
        [("status", 1), ("expires_at", 1)],
        {"name": "expiring", "partialFilterExpression": {"expires_at": {"$exists": True}}},
    ),
    # Waiting jobs by the dependencies they still wait for (released when one ends).
    (
        [("waiting_for", 1)],
        {"name": "waiting_for", "partialFilterExpression": {"waiting_for": {"$exists": True}}},
    ),
    # Waiting jobs whose scheduling call did not link their dependencies (the repair).
    (
        [("unlinked", 1), ("created_at", 1)],
        {"name": "unlinked", "partialFilterExpression": {"unlinked": {"$exists": True}}},
    ),
    # Finished jobs whose dependents were not yet released (the reaper's repair).
    (
        [("has_dependents", 1), ("finished_at", 1)],
        {"name": "dependents", "partialFilterExpression": {"has_dependents": {"$exists": True}}},
    ),
]

PAUSE_INDEXES: list[Index] = []  # a handful of documents, by _id
RUNNER_INDEXES: list[Index] = [
    # A runner that stopped refreshing its entry is deleted by the server after this.
    ([("expire_at", 1)], {"name": "expire_at", "expireAfterSeconds": 0}),
]

AUDIT_INDEXES: list[Index] = [
    # Newest first (the trail's one read), and retention: the server deletes an entry
    # after its expire_at.
    ([("at", -1), ("_id", -1)], {"name": "at"}),
    ([("expire_at", 1)], {"name": "expire_at", "expireAfterSeconds": 0}),
    # A job's entries (its page links to them), newest first; only entries of one job.
    (
        [("job", 1), ("at", -1)],
        {"name": "job", "partialFilterExpression": {"job": {"$exists": True}}},
    ),
]

PERMIT_INDEXES: list[Index] = [
    ([("task", 1), ("index", 1)], {"name": "task_index"}),
    ([("task", 1), ("token", 1)], {"name": "task_token"}),
]

LIMIT_INDEXES: list[Index] = [
    # A limit document (a rate log, a key's holders) is deleted once idle.
    ([("expire_at", 1)], {"name": "idle", "expireAfterSeconds": 0}),
]
