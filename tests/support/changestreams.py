"""Change streams for the wire-protocol test server (tests/support/server.py).

With ``enabled`` the server says it is the primary of a one-member replica set
(``setName`` in ``hello``, so pymongo treats it as one) and serves ``aggregate`` with
a leading ``$changeStream`` stage: a cursor whose ``getMore`` waits, up to its
``maxTimeMS``, for the next change of that collection passing the rest of the
pipeline (``$match``, inclusion ``$project``). Events carry resume tokens (their
``_id``), every batch a ``postBatchResumeToken``, and ``resumeAfter``/``startAfter``
reopen a stream after any event still in the history (else ``ChangeStreamHistoryLost``).
Without ``enabled`` the server is a standalone: ``$changeStream`` fails with error
40573, as a real standalone's does.

Writes are recorded by :meth:`ChangeStreams.inserted` and :meth:`ChangeStreams.track`
(the engine's lock held): inserts and upserts as ``insert``, replacements as
``replace`` (with ``fullDocument``), updates as ``update`` with the top-level
``updatedFields``/``removedFields`` that differ (a field set to its own value is not
reported, as a server's oplog diff does not report it). Deletes are not recorded.

Faults: :meth:`ChangeStreams.drop` hangs up every stream connection (each waiting
``getMore`` ends) and, with ``refuse_for``, hangs up new streams for that long, so a
client resumes after a gap in which changes happened.
"""

from __future__ import annotations

import bisect
import copy
import itertools
import socket
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from datetime import datetime, timezone
from typing import Any

from bson import Int64, ObjectId, Timestamp
from mongomock.filtering import filter_applies

from tests.support.server_admin import CommandError

__all__ = ["ChangeStreams", "hang_up"]

HISTORY = 20_000  # events kept for resuming (at least; ``ChangeStreams.history``)
_STAGES = frozenset({"$match", "$project"})


def _error(code: int, message: str, name: str) -> Exception:
    return CommandError(code, message, name)


def token(seq: int) -> dict[str, str]:
    return {"_data": f"82{seq:016X}"}


def _seq_of(value: Any) -> int:
    data = value.get("_data") if isinstance(value, Mapping) else None
    if not isinstance(data, str) or not data.startswith("82"):
        raise _error(260, f"invalid resume token: {value!r}", "InvalidResumeToken")
    try:
        return int(data[2:], 16)
    except ValueError:
        raise _error(260, f"invalid resume token: {value!r}", "InvalidResumeToken") from None


def _project(doc: Mapping[str, Any], spec: Mapping[str, Any]) -> dict[str, Any]:
    """An inclusion projection of dotted paths (``_id`` kept)."""
    if any(not v for k, v in spec.items()):
        raise _error(115, "only inclusion projections are emulated", "CommandNotSupported")
    out: dict[str, Any] = {"_id": doc["_id"]}
    for path in spec:
        parts = path.split(".")
        value: Any = doc
        for part in parts:
            if not isinstance(value, Mapping) or part not in value:
                break
            value = value[part]
        else:
            target = out
            for part in parts[:-1]:
                target = target.setdefault(part, {})
            target[parts[-1]] = value
    return out


class _Cursor:
    def __init__(self, ns: str, position: int, stages: list[tuple[str, Any]]) -> None:
        self.ns = ns
        self.position = position  # the last event looked at
        self.stages = stages
        self.dead = False

    def passes(self, event: dict[str, Any]) -> dict[str, Any] | None:
        for name, spec in self.stages:
            if name == "$match":
                if not filter_applies(spec, event):
                    return None
            else:
                event = _project(event, spec)
        return event


class ChangeStreams:
    """The change streams of one server (see the module)."""

    def __init__(self, enabled: bool = False) -> None:
        self.enabled = enabled
        self.history = HISTORY
        self.address = ""
        self._cond = threading.Condition()
        self._seqs: list[int] = []
        self._events: list[tuple[str, dict[str, Any]]] = []
        self._seq = 0
        self._cursors: dict[int, _Cursor] = {}
        self._ids = itertools.count(1 << 40)  # apart from the engine's cursor ids
        self._connections: set[socket.socket] = set()
        self._refuse_until = 0.0
        self.opened = 0
        self.resumed = 0
        self.killed = 0

    # The handshake -----------------------------------------------------------------------
    def hello(self) -> dict[str, Any]:
        if not self.enabled:
            return {}
        return {
            "setName": "rs0",
            "setVersion": 1,
            "hosts": [self.address],
            "primary": self.address,
            "me": self.address,
            "secondary": False,
            "electionId": ObjectId("7fffffff0000000000000001"),
        }

    # Recording writes (the engine's lock held) ------------------------------------------------
    def inserted(self, db: str, coll: str, doc: Mapping[str, Any]) -> None:
        if self.enabled:
            self._emit(db, coll, "insert", doc["_id"], {"fullDocument": copy.deepcopy(doc)})

    def track(
        self,
        db: str,
        coll: Any,
        query: Mapping[str, Any],
        multi: bool,
        replace: bool,
        apply: Callable[[], Any],
    ) -> Any:
        """Run ``apply`` (an update of ``coll`` by ``query``) and record what it changed."""
        if not self.enabled:
            return apply()
        if multi:
            before = list(coll.find(dict(query)))
        else:
            one = coll.find_one(dict(query))
            before = [] if one is None else [one]
        result = apply()
        for old in before:
            new = coll.find_one({"_id": old["_id"]})
            if new is None or new == old:
                continue
            if replace:
                self._emit(db, coll.name, "replace", new["_id"], {"fullDocument": new})
                continue
            updated = {k: v for k, v in new.items() if k not in old or old[k] != v}
            removed = [k for k in old if k not in new]
            description = {"updatedFields": updated, "removedFields": removed}
            self._emit(
                db,
                coll.name,
                "update",
                new["_id"],
                {"updateDescription": {**description, "truncatedArrays": []}},
            )
        upserted = getattr(result, "upserted_id", None)
        if upserted is not None:
            doc = coll.find_one({"_id": upserted})
            self._emit(db, coll.name, "insert", upserted, {"fullDocument": doc})
        return result

    def _emit(self, db: str, coll: str, op: str, key: Any, extra: dict[str, Any]) -> None:
        with self._cond:
            self._seq += 1
            seq = self._seq
            event = {
                "_id": token(seq),
                "operationType": op,
                "clusterTime": Timestamp(int(time.time()), seq % (1 << 31) + 1),
                "wallTime": datetime.now(timezone.utc),
                "ns": {"db": db, "coll": coll},
                "documentKey": {"_id": key},
                **extra,
            }
            self._seqs.append(seq)
            self._events.append((f"{db}.{coll}", event))
            if len(self._seqs) > 2 * self.history:
                del self._seqs[: self.history], self._events[: self.history]
            self._cond.notify_all()

    # Streams ---------------------------------------------------------------------------------
    def open(self, db: str, coll: str, pipeline: list[Any], cursor: Mapping[str, Any]) -> Any:
        """The reply to ``aggregate`` with ``pipeline`` (leading ``$changeStream``)."""
        if not self.enabled:
            raise _error(
                40573, "The $changeStream stage is only supported on replica sets", "Location40573"
            )
        options = dict(pipeline[0]["$changeStream"])
        if options.get("fullDocument", "default") != "default":
            raise _error(115, "only fullDocument 'default' is emulated", "CommandNotSupported")
        stages = []
        for stage in pipeline[1:]:
            name = next(iter(stage))
            if name not in _STAGES:
                raise _error(
                    115, f"{name} in a change stream is not emulated", "CommandNotSupported"
                )
            stages.append((name, stage[name]))
        with self._cond:
            resume = options.get("resumeAfter") or options.get("startAfter")
            position = self._seq
            if resume is not None:
                position = _seq_of(resume)
                if self._seqs and position < self._seqs[0] - 1 or position > self._seq:
                    raise _error(
                        286,
                        "Resume of change stream was not possible, as the resume point may no "
                        "longer be in the oplog",
                        "ChangeStreamHistoryLost",
                    )
                self.resumed += 1
            self.opened += 1
            cursor_id = next(self._ids)
            stream = self._cursors[cursor_id] = _Cursor(f"{db}.{coll}", position, stages)
            batch = self._collect(stream, int(cursor.get("batchSize") or 0))
            return self._reply(cursor_id, stream, batch, "firstBatch")

    def owns(self, command: Mapping[str, Any]) -> bool:
        """Whether ``command`` is a ``getMore`` of a change stream."""
        name = next(iter(command), "").lower()
        if name != "getmore":
            return False
        with self._cond:
            return int(command["getMore"]) in self._cursors

    def get_more(self, command: Mapping[str, Any]) -> dict[str, Any]:
        """The reply to a stream's ``getMore``: waits (without the engine's lock) up to
        ``maxTimeMS`` (default 1 s) for a matching change."""
        cursor_id = int(command["getMore"])
        deadline = time.monotonic() + float(command.get("maxTimeMS") or 1000) / 1000
        limit = int(command.get("batchSize") or 0)
        with self._cond:
            stream = self._cursors.get(cursor_id)
            if stream is None:
                raise _error(43, f"cursor id {cursor_id} not found", "CursorNotFound")
            while True:
                batch = self._collect(stream, limit)
                left = deadline - time.monotonic()
                if batch or stream.dead or left <= 0:
                    break
                self._cond.wait(left)
            if stream.dead:
                raise _error(43, f"cursor id {cursor_id} was killed", "CursorNotFound")
            return self._reply(cursor_id, stream, batch, "nextBatch")

    def _collect(self, stream: _Cursor, limit: int) -> list[dict[str, Any]]:
        batch: list[dict[str, Any]] = []
        start = bisect.bisect_right(self._seqs, stream.position)
        for seq, (ns, event) in zip(self._seqs[start:], self._events[start:], strict=True):
            stream.position = seq
            if ns == stream.ns:
                passed = stream.passes(event)
                if passed is not None:
                    batch.append(passed)
                    if limit and len(batch) >= limit:
                        break
        return batch

    def _reply(self, cursor_id: int, stream: _Cursor, batch: list[Any], key: str) -> Any:
        return {
            "cursor": {
                "id": Int64(cursor_id),
                "ns": stream.ns,
                key: batch,
                "postBatchResumeToken": token(stream.position),
            }
        }

    def kill(self, cursor_ids: list[Any]) -> list[Any]:
        """Kill the streams among ``cursor_ids``; returns those killed."""
        killed = []
        with self._cond:
            for cursor_id in cursor_ids:
                stream = self._cursors.pop(int(cursor_id), None)
                if stream is not None:
                    stream.dead = True
                    killed.append(cursor_id)
            self.killed += len(killed)
            self._cond.notify_all()
        return killed

    @property
    def open_streams(self) -> int:
        with self._cond:
            return len(self._cursors)

    # The connection (the server's side) ----------------------------------------------------
    def serving(self, conn: socket.socket, command: Mapping[str, Any]) -> bool:
        """Note a connection that serves a stream; False: hang up instead (refusing)."""
        name = next(iter(command), "").lower()
        pipeline = command.get("pipeline") if name == "aggregate" else None
        opening = bool(pipeline) and "$changeStream" in pipeline[0]
        if not opening and not self.owns(command):
            return True
        if opening and time.monotonic() < self._refuse_until:
            return False
        with self._cond:
            self._connections.add(conn)
        return True

    def closed(self, conn: socket.socket) -> None:
        with self._cond:
            self._connections.discard(conn)

    def drop(self, refuse_for: float = 0.0) -> int:
        """Hang up every stream connection (and kill their cursors: the client must
        resume); hang up new streams for ``refuse_for`` seconds. Returns how many."""
        self._refuse_until = time.monotonic() + refuse_for
        with self._cond:
            connections = list(self._connections)
            for stream in self._cursors.values():
                stream.dead = True
            self._cursors.clear()
            self._cond.notify_all()
        hang_up(connections)
        return len(connections)


def hang_up(connections: Iterable[socket.socket]) -> None:
    """Reset each of ``connections`` now (one already closed is skipped)."""
    for conn in connections:
        try:
            conn.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
