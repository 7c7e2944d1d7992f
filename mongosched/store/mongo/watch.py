"""Watching the job collection with a change stream: the MongoDB side of
:class:`~mongosched.store.DueWatch`.

One change stream per watch, on the job collection, filtered on the server to the
changes that can make a job claimable and projected to the few fields a hint needs:

* an insert (or a replacement, or an upsert) of a *pending* job, in the watched queues;
* an update that sets ``status`` to pending (a retry, a job given back, a reaped job,
  a repeating job's next slot, a resumed one) or changes ``run_at`` (a job moved).

Heartbeats, claims and finishes do not pass the filter, so an idle watch costs one
``getMore`` every :data:`MAX_AWAIT` seconds. After a transient error the stream is
opened again where it left off (``resumeAfter`` its last resume token, which the
server also advances while nothing matches); when the server no longer has that point
of its history, the watch starts afresh and reports "claim now". A standalone server
(error 40573), a user without the ``changeStream`` privilege, or a database object that
cannot watch (mongomock) raises :class:`~mongosched.errors.WatchUnavailable`.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator, Mapping, Sequence
from datetime import datetime
from typing import Any

from pymongo.errors import ConnectionFailure, OperationFailure, PyMongoError

from mongosched._core.backoff import Backoff
from mongosched.errors import WatchUnavailable
from mongosched.store.due import DueHint
from mongosched.store.mongo.connection import MongoConnection
from mongosched.store.mongo.documents import PENDING, aware

__all__ = ["MAX_AWAIT", "MongoDueWatch", "due_pipeline"]

log = logging.getLogger("mongosched.store")

MAX_AWAIT = 0.5
"""Seconds the server holds an idle ``getMore`` (and so the longest a close waits)."""

# Codes that say this server or user cannot watch at all: a standalone server, no
# privilege, an unknown stage (no change streams), a command the server lacks.
UNAVAILABLE = frozenset({40573, 13, 40324, 115})
# Codes that say the resume point is gone: start afresh (and claim now).
HISTORY_LOST = frozenset({286, 280, 260})
PAUSE_MAX = 5.0


def due_pipeline(queues: Sequence[str] | None) -> list[dict[str, Any]]:
    """The change stream's stages after ``$changeStream``: the changes that can make a
    job claimable, and only the fields a hint needs (the resume token ``_id`` stays)."""
    inserted: dict[str, Any] = {
        "operationType": {"$in": ["insert", "replace"]},
        "fullDocument.status": PENDING,
    }
    if queues is not None:
        inserted["fullDocument.queue"] = {"$in": list(queues)}
    return [
        {
            "$match": {
                "$or": [
                    inserted,
                    {
                        "operationType": "update",
                        "updateDescription.updatedFields.status": PENDING,
                    },
                    {
                        "operationType": "update",
                        "updateDescription.updatedFields.run_at": {"$exists": True},
                    },
                ]
            }
        },
        {
            "$project": {
                "operationType": 1,
                "fullDocument.run_at": 1,
                "fullDocument.task": 1,
                "updateDescription.updatedFields.run_at": 1,
            }
        },
    ]


def hint_of(change: Mapping[str, Any]) -> DueHint:
    """What a change event says: when its job is due (if it says) and its task."""
    if change.get("operationType") == "update":
        fields = (change.get("updateDescription") or {}).get("updatedFields") or {}
        at = fields.get("run_at")
        return DueHint(at=aware(at) if isinstance(at, datetime) else None)
    doc = change.get("fullDocument") or {}
    at, task = doc.get("run_at"), doc.get("task")
    return DueHint(
        at=aware(at) if isinstance(at, datetime) else None,
        task=task if isinstance(task, str) else None,
    )


def _gist(exc: PyMongoError) -> str:
    """The server's message (not the reply document pymongo appends)."""
    details = getattr(exc, "details", None)
    message = details.get("errmsg") if isinstance(details, Mapping) else None
    return str(message or str(exc).split(", full error")[0].split(", Timeout:")[0])


def _kind(exc: BaseException) -> str:
    """``unavailable``, ``lost`` (the resume point) or ``transient``."""
    if isinstance(exc, OperationFailure) and not isinstance(exc, ConnectionFailure):
        if exc.code in UNAVAILABLE:
            return "unavailable"
        if exc.code in HISTORY_LOST:
            return "lost"
    return "transient"


class MongoDueWatch:
    """A change stream on the job collection (a :class:`~mongosched.store.DueWatch`)."""

    def __init__(
        self,
        connection: MongoConnection,
        queues: Sequence[str] | None,
        max_await: float = MAX_AWAIT,
    ) -> None:
        self._connection = connection
        self._pipeline = due_pipeline(queues)
        self._max_await_ms = max(1, int(max_await * 1000))
        self._closed = threading.Event()

    def close(self) -> None:
        self._closed.set()

    def _open(self, token: Mapping[str, Any] | None) -> Any:
        jobs = self._connection.jobs
        try:
            return jobs.watch(
                self._pipeline, resume_after=token, max_await_time_ms=self._max_await_ms
            )
        except (TypeError, AttributeError, NotImplementedError) as exc:  # not pymongo's
            raise WatchUnavailable(
                f"watch: {type(jobs).__name__} has no change streams ({exc})"
            ) from exc

    def __iter__(self) -> Iterator[DueHint]:
        token: Mapping[str, Any] | None = None
        failures, fresh = 0, True
        while not self._closed.is_set():
            stream = None
            try:
                stream = self._open(token)
                token = stream.resume_token or token
                if failures:
                    log.info("watching for due jobs again (resumed: %s)", token is not None)
                    failures = 0
                if fresh:  # a job may have become due before the stream was there
                    fresh = False
                    yield DueHint()
                while not self._closed.is_set():
                    change = stream.try_next()
                    token = stream.resume_token or token
                    if change is not None:
                        yield hint_of(change)
            except PyMongoError as exc:
                kind = _kind(exc)
                if kind == "unavailable":
                    raise WatchUnavailable(f"watch: {_gist(exc)}") from exc
                if kind == "lost":
                    log.warning("watch: stream lost its place (%s); starting afresh", _gist(exc))
                    token, fresh = None, True
                    continue
                failures += 1
                if failures == 1:
                    log.warning("watch: change stream failed (%s); resuming", _gist(exc))
                else:
                    log.debug("watch: change stream failed again (%s)", _gist(exc))
                self._closed.wait(Backoff(first=0.1, most=PAUSE_MAX).after(failures))
            finally:
                if stream is not None:
                    try:
                        stream.close()
                    except PyMongoError as exc:  # the server is gone: its cursor is too
                        log.debug("watch: closing the change stream: %s", exc)
