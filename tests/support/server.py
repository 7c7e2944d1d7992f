"""A test-only MongoDB server: the wire protocol on 127.0.0.1, mongomock behind it.

Separate processes (worker subprocesses, the test itself) share one stand-in database
through it, with real pymongo clients, connection pools, timeouts and network errors.
``mockupdb`` parses the requests and encodes the replies; this module maps each
command onto a :class:`mongomock.MongoClient` and runs it atomically under one lock,
as a real server applies each single-document operation atomically.

Faults for tests: :meth:`MockServer.stop` / :meth:`MockServer.start` take the server
away and bring it back on the same port with its data; :meth:`MockServer.drop_connections`
resets every open connection; ``delay`` holds each reply back (after the command was
applied); :meth:`MockServer.drop_replies` applies the next commands and hangs up
instead of replying (a lost reply).

Not a database: no journal, no TTL monitor, no transactions, no auth, no
aggregation beyond what mongomock implements. It exists so that tests need no MongoDB.
"""

from __future__ import annotations

import functools
import itertools
import select
import socket
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from datetime import datetime, timezone
from typing import Any

import bson
import mongomock
from bson import Int64
from mockupdb import Command, OpMsg, mock_server_receive_request
from pymongo.errors import DuplicateKeyError, OperationFailure, WriteError

from tests.support.changestreams import ChangeStreams, hang_up
from tests.support.mongomock_db import expire_by_any_id
from tests.support.server_admin import AdminCommands, CommandError

expire_by_any_id(mongomock)

__all__ = ["MockServer", "CommandError"]

MAX_BATCH_BYTES = 4 * 1024 * 1024  # a getMore without batchSize returns up to this much
DEFAULT_FIRST_BATCH = 101
OP_MSG_MORE_TO_COME = 2

# Fields of a command that say how it runs, not what it does: tolerated, ignored.
_GENERIC = frozenset(
    {
        "$db",
        "lsid",
        "txnNumber",
        "writeConcern",
        "readConcern",
        "$readPreference",
        "$clusterTime",
        "maxTimeMS",
        "comment",
        "apiVersion",
        "apiStrict",
        "apiDeprecationErrors",
        "bypassDocumentValidation",
        "autocommit",
        "startTransaction",
    }
)


def _aware(value: Any) -> Any:
    """mockupdb decodes BSON datetimes naive (UTC): make them aware, as the tz_aware
    codec of the store would, so comparisons inside mongomock never mix the two."""
    if isinstance(value, datetime):
        return value if value.tzinfo is not None else value.replace(tzinfo=timezone.utc)
    if isinstance(value, Mapping):
        return {k: _aware(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_aware(v) for v in value]
    return value


def _is_replacement(update: Any) -> bool:
    return isinstance(update, Mapping) and not any(str(k).startswith("$") for k in update)


def _write_error(index: int, exc: Exception) -> dict[str, Any]:
    if isinstance(exc, DuplicateKeyError):
        code, msg = 11000, f"E11000 duplicate key error ({exc})"
    elif isinstance(exc, (WriteError, OperationFailure)) and exc.code:
        code, msg = int(exc.code), str(exc)
    else:
        code, msg = 2, f"{type(exc).__name__}: {exc}"  # BadValue
    return {"index": index, "code": code, "errmsg": msg}


class Engine(AdminCommands):
    """Executes commands on one mongomock client, each atomically under ``lock``.
    The data outlives the listening socket: a restarted server keeps it."""

    def __init__(self) -> None:
        self.client = mongomock.MongoClient(tz_aware=True)
        self.lock = threading.RLock()
        self.cursors: dict[int, tuple[str, list[dict[str, Any]]]] = {}
        self._cursor_ids = itertools.count(1)
        self.started = datetime.now(timezone.utc)
        self.commands: dict[str, int] = {}
        self.streams = ChangeStreams()
        self._handlers: dict[str, Callable[[str, dict[str, Any]], dict[str, Any]]] = {
            "hello": self._hello,
            "ismaster": self._hello,
            "ping": lambda db, cmd: {},
            "buildinfo": self._build_info,
            "endsessions": lambda db, cmd: {},
            "find": self._find,
            "getmore": self._get_more,
            "killcursors": self._kill_cursors,
            "findandmodify": self._find_and_modify,
            "insert": self._insert,
            "update": self._update,
            "delete": self._delete,
            "createindexes": self._create_indexes,
            "listindexes": self._list_indexes,
            "dropindexes": self._drop_indexes,
            "count": self._count,
            "distinct": self._distinct,
            "aggregate": self._aggregate,
            "dropdatabase": self._drop_database,
            "drop": self._drop,
            "listcollections": self._list_collections,
            "listdatabases": self._list_databases,
            "create": self._create,
        }

    # Dispatch -----------------------------------------------------------------------
    def execute(self, db: str, command: Mapping[str, Any]) -> dict[str, Any]:
        """The reply document of ``command`` on database ``db`` (never raises)."""
        if not command:
            return CommandError(59, "empty command", "CommandNotFound").reply()
        name = next(iter(command))
        if self.streams.owns(command):  # waits for changes: not under the lock
            try:
                return {**self.streams.get_more(command), "ok": 1}
            except CommandError as exc:
                return exc.reply()
        handler = self._handlers.get(name.lower())
        if handler is None:
            return CommandError(59, f"no such command: '{name}'", "CommandNotFound").reply()
        cmd = {k: v for k, v in _aware(dict(command)).items() if k not in _GENERIC}
        try:
            with self.lock:
                self.commands[name] = self.commands.get(name, 0) + 1
                reply = handler(db, cmd)
        except CommandError as exc:
            return exc.reply()
        except DuplicateKeyError as exc:
            return CommandError(
                11000, f"E11000 duplicate key error ({exc})", "DuplicateKey"
            ).reply()
        except OperationFailure as exc:
            return CommandError(exc.code or 2, str(exc)).reply()
        except NotImplementedError as exc:
            return CommandError(
                115, f"not supported by mongomock: {exc}", "CommandNotSupported"
            ).reply()
        except Exception as exc:  # a mongomock gap or a bug here: say so to the client
            return CommandError(1, f"{type(exc).__name__}: {exc}", "InternalError").reply()
        reply.setdefault("ok", 1)
        return reply

    def _collection(self, db: str, cmd: Mapping[str, Any]) -> Any:
        name = next(iter(cmd.values()))
        if not isinstance(name, str):
            raise CommandError(
                73, f"collection name must be a string, not {name!r}", "InvalidNamespace"
            )
        return self.client[db][name]

    # Cursors ---------------------------------------------------------------------------------
    def _cursor_reply(
        self, ns: str, docs: list[dict[str, Any]], batch_size: int | None, single: bool = False
    ) -> dict[str, Any]:
        size = DEFAULT_FIRST_BATCH if batch_size is None else int(batch_size)
        first, rest = self._batch(docs, size)
        cursor_id = 0
        if rest and not single:
            cursor_id = next(self._cursor_ids)
            self.cursors[cursor_id] = (ns, rest)
        return {"cursor": {"id": Int64(cursor_id), "ns": ns, "firstBatch": first}}

    @staticmethod
    def _batch(docs: list[dict[str, Any]], size: int) -> tuple[list[Any], list[Any]]:
        """Up to ``size`` documents (0: no count limit) and at most MAX_BATCH_BYTES."""
        if size == 0:
            size = len(docs)
        taken, total = 0, 0
        for doc in docs[:size]:
            total += len(bson.encode(doc))
            if taken and total > MAX_BATCH_BYTES:
                break
            taken += 1
        return docs[:taken], docs[taken:]

    def _get_more(self, db: str, cmd: Mapping[str, Any]) -> dict[str, Any]:
        cursor_id = int(cmd["getMore"])
        entry = self.cursors.pop(cursor_id, None)
        if entry is None:
            raise CommandError(43, f"cursor id {cursor_id} not found", "CursorNotFound")
        ns, docs = entry
        batch, rest = self._batch(docs, int(cmd.get("batchSize") or 0))
        if rest:
            self.cursors[cursor_id] = (ns, rest)
        return {"cursor": {"id": Int64(cursor_id if rest else 0), "ns": ns, "nextBatch": batch}}

    def _kill_cursors(self, db: str, cmd: Mapping[str, Any]) -> dict[str, Any]:
        killed, missing = [], []
        streams = self.streams.kill(cmd.get("cursors", []))
        for cursor_id in cmd.get("cursors", []):
            found = cursor_id in streams or self.cursors.pop(int(cursor_id), None)
            (killed if found else missing).append(cursor_id)
        return {
            "cursorsKilled": killed,
            "cursorsNotFound": missing,
            "cursorsAlive": [],
            "cursorsUnknown": [],
        }

    # Reads -----------------------------------------------------------------------------------
    def _find(self, db: str, cmd: Mapping[str, Any]) -> dict[str, Any]:
        coll = self._collection(db, cmd)
        limit = int(cmd.get("limit") or 0)
        single = bool(cmd.get("singleBatch")) or limit < 0
        kwargs: dict[str, Any] = {"skip": int(cmd.get("skip") or 0), "limit": abs(limit)}
        if cmd.get("sort"):
            kwargs["sort"] = list(cmd["sort"].items())
        if cmd.get("projection"):
            kwargs["projection"] = dict(cmd["projection"])
        docs = list(coll.find(dict(cmd.get("filter") or {}), **kwargs))
        batch = cmd.get("batchSize")
        return self._cursor_reply(f"{db}.{coll.name}", docs, batch, single=single)

    def _count(self, db: str, cmd: Mapping[str, Any]) -> dict[str, Any]:
        coll = self._collection(db, cmd)
        kwargs = {k: int(cmd[k]) for k in ("skip", "limit") if cmd.get(k)}
        return {"n": coll.count_documents(dict(cmd.get("query") or {}), **kwargs)}

    def _distinct(self, db: str, cmd: Mapping[str, Any]) -> dict[str, Any]:
        coll = self._collection(db, cmd)
        return {"values": coll.distinct(cmd["key"], dict(cmd.get("query") or {}))}

    def _aggregate(self, db: str, cmd: Mapping[str, Any]) -> dict[str, Any]:
        coll = self._collection(db, cmd)
        pipeline = list(cmd.get("pipeline") or [])
        if pipeline and "$changeStream" in pipeline[0]:
            return self.streams.open(db, coll.name, pipeline, cmd.get("cursor") or {})  # type: ignore[no-any-return]
        for stage in pipeline:
            if next(iter(stage), None) in ("$out", "$merge"):
                raise CommandError(115, "$out/$merge are not supported here", "CommandNotSupported")
        docs = list(coll.aggregate(pipeline))
        cursor = cmd.get("cursor") or {}
        return self._cursor_reply(f"{db}.{coll.name}", docs, cursor.get("batchSize"))

    # Writes -------------------------------------------------------------------------------------
    def _insert(self, db: str, cmd: Mapping[str, Any]) -> dict[str, Any]:
        coll = self._collection(db, cmd)
        ordered = cmd.get("ordered", True)
        n, errors = 0, []
        for index, doc in enumerate(cmd.get("documents", [])):
            try:
                doc = dict(doc)
                coll.insert_one(doc)
                self.streams.inserted(db, coll.name, doc)
                n += 1
            except (DuplicateKeyError, WriteError, OperationFailure) as exc:
                errors.append(_write_error(index, exc))
                if ordered:
                    break
        reply: dict[str, Any] = {"n": n}
        if errors:
            reply["writeErrors"] = errors
        return reply

    def _update(self, db: str, cmd: Mapping[str, Any]) -> dict[str, Any]:
        coll = self._collection(db, cmd)
        ordered = cmd.get("ordered", True)
        n = modified = 0
        upserted, errors = [], []
        for index, spec in enumerate(cmd.get("updates", [])):
            query, update = dict(spec.get("q") or {}), spec.get("u")
            upsert, multi = bool(spec.get("upsert")), bool(spec.get("multi"))
            try:
                if isinstance(update, list):
                    raise CommandError(115, "pipeline updates are not supported here")
                if spec.get("arrayFilters"):
                    raise CommandError(115, "arrayFilters are not supported here")
                replace = _is_replacement(update)
                if replace and multi:
                    raise CommandError(
                        9,
                        "multi update is not supported for replacement-style update",
                        "FailedToParse",
                    )
                write = (
                    coll.replace_one if replace else coll.update_many if multi else coll.update_one
                )
                apply = functools.partial(write, query, dict(update), upsert=upsert)
                result = self.streams.track(db, coll, query, multi, replace, apply)
            except CommandError as exc:
                errors.append({"index": index, "code": exc.code, "errmsg": exc.errmsg})
                if ordered:
                    break
                continue
            except (DuplicateKeyError, WriteError, OperationFailure) as exc:
                errors.append(_write_error(index, exc))
                if ordered:
                    break
                continue
            if result.upserted_id is not None:
                n += 1
                upserted.append({"index": index, "_id": result.upserted_id})
            else:
                n += result.matched_count
                modified += result.modified_count
        reply: dict[str, Any] = {"n": n, "nModified": modified}
        if upserted:
            reply["upserted"] = upserted
        if errors:
            reply["writeErrors"] = errors
        return reply

    def _delete(self, db: str, cmd: Mapping[str, Any]) -> dict[str, Any]:
        coll = self._collection(db, cmd)
        n = 0
        for spec in cmd.get("deletes", []):
            query = dict(spec.get("q") or {})
            if int(spec.get("limit", 0)) == 1:
                n += coll.delete_one(query).deleted_count
            else:
                n += coll.delete_many(query).deleted_count
        return {"n": n}

    def _find_and_modify(self, db: str, cmd: Mapping[str, Any]) -> dict[str, Any]:
        coll = self._collection(db, cmd)
        query = dict(cmd.get("query") or {})
        sort = list((cmd.get("sort") or {}).items()) or None
        fields = cmd.get("fields")
        projection = dict(fields) if fields else None
        update, remove = cmd.get("update"), bool(cmd.get("remove"))
        new, upsert = bool(cmd.get("new")), bool(cmd.get("upsert"))
        if remove == (update is not None):
            raise CommandError(
                9, "Either an update or remove=true must be specified", "FailedToParse"
            )
        if isinstance(update, list):
            raise CommandError(115, "pipeline updates are not supported here")
        target = coll.find_one(query, {"_id": 1}, sort=sort)
        if target is not None:
            by_id = {"_id": target["_id"]}
            before = coll.find_one(by_id, projection)
            if remove:
                coll.delete_one(by_id)
                return {"lastErrorObject": {"n": 1}, "value": before}
            replace = _is_replacement(update)
            write = coll.replace_one if replace else coll.update_one
            self.streams.track(db, coll, by_id, False, replace, lambda: write(by_id, dict(update)))
            value = coll.find_one(by_id, projection) if new else before
            return {"lastErrorObject": {"n": 1, "updatedExisting": True}, "value": value}
        if remove or not upsert:
            return {"lastErrorObject": {"n": 0, "updatedExisting": False}, "value": None}
        write = coll.replace_one if _is_replacement(update) else coll.update_one
        result = self.streams.track(
            db, coll, query, False, False, lambda: write(query, dict(update), upsert=True)
        )
        value = coll.find_one({"_id": result.upserted_id}, projection) if new else None
        return {
            "lastErrorObject": {"n": 1, "updatedExisting": False, "upserted": result.upserted_id},
            "value": value,
        }


class _Quiet:
    """What mockupdb's request objects expect of their server: only logging."""

    verbose = False

    def _log(self, msg: str) -> None:
        pass


class MockServer:
    """The wire-protocol server. ``start()`` listens on ``port`` (0: a free one, kept
    for restarts); ``stop()`` closes the listener and every connection, keeping data."""

    def __init__(
        self, port: int = 0, host: str = "127.0.0.1", change_streams: bool = False
    ) -> None:
        self.host = host
        self.port = port
        self.engine = Engine()
        self.streams = self.engine.streams
        """Change streams (tests/support/changestreams.py): on, the server is a replica
        set's primary; off (the default), a standalone."""
        self.streams.enabled = change_streams
        self.delay = 0.0
        self._drop_replies = 0
        self._drop_commands: frozenset[str] | None = None
        self._faults_lock = threading.Lock()
        self._listener: socket.socket | None = None
        self._threads: list[threading.Thread] = []
        self._connections: set[socket.socket] = set()
        self._connections_lock = threading.Lock()
        self._stopping = threading.Event()
        self.requests = 0
        self.dropped_replies = 0

    # Lifecycle ---------------------------------------------------------------------------------
    @property
    def running(self) -> bool:
        return self._listener is not None

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    def uri(self, database: str = "", **options: Any) -> str:
        query = "&".join(f"{k}={v}" for k, v in options.items())
        return f"mongodb://{self.address}/{database}" + (f"?{query}" if query else "")

    def start(self) -> MockServer:
        if self._listener is not None:
            raise RuntimeError("server already running")
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind((self.host, self.port))
        listener.listen(128)
        self.port = listener.getsockname()[1]
        self.streams.address = self.address
        self._listener = listener
        self._stopping.clear()
        thread = threading.Thread(
            target=self._accept_loop,
            args=(listener,),
            name=f"mockserver-accept-{self.port}",
            daemon=True,
        )
        self._threads = [thread]
        thread.start()
        return self

    def stop(self) -> None:
        """Stop listening and close every connection (clients see the server gone)."""
        listener, self._listener = self._listener, None
        if listener is None:
            return
        self._stopping.set()
        listener.close()
        self.drop_connections()
        for thread in list(self._threads):
            thread.join(10)
        self._threads = []

    def restart(self) -> None:
        self.stop()
        self.start()

    def __enter__(self) -> MockServer:
        return self.start() if not self.running else self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # Faults ----------------------------------------------------------------------------------------
    def drop_connections(self) -> int:
        """Reset every open connection now; returns how many."""
        with self._connections_lock:
            connections = list(self._connections)
        hang_up(connections)
        return len(connections)

    def drop_replies(self, count: int, commands: Iterator[str] | list[str] | None = None) -> None:
        """Apply the next ``count`` commands (of these names, if given) and hang up
        instead of replying: the client cannot tell whether they landed."""
        with self._faults_lock:
            self._drop_replies = count
            self._drop_commands = (
                None if commands is None else frozenset(c.lower() for c in commands)
            )

    def _take_drop(self, name: str) -> bool:
        with self._faults_lock:
            if self._drop_replies <= 0:
                return False
            if self._drop_commands is not None and name.lower() not in self._drop_commands:
                return False
            self._drop_replies -= 1
            self.dropped_replies += 1
            return True

    # Serving ---------------------------------------------------------------------------------------
    def _accept_loop(self, listener: socket.socket) -> None:
        while not self._stopping.is_set():
            try:
                ready, _, _ = select.select([listener], [], [], 0.1)
                if not ready:
                    continue
                conn, _ = listener.accept()
            except (OSError, ValueError):  # closed by stop()
                return
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            with self._connections_lock:
                self._connections.add(conn)
            thread = threading.Thread(
                target=self._serve, args=(conn,), name=f"mockserver-conn-{self.port}", daemon=True
            )
            self._threads = [t for t in self._threads if t.is_alive()] + [thread]
            thread.start()

    def _serve(self, conn: socket.socket) -> None:
        quiet = _Quiet()
        try:
            while not self._stopping.is_set():
                request = mock_server_receive_request(conn, quiet)
                self.requests += 1
                if not isinstance(request, (OpMsg, Command)):
                    raise ConnectionError(f"unsupported legacy opcode {type(request).__name__}")
                command = dict(request.doc)
                if not self.streams.serving(conn, command):
                    break  # refusing change streams for now: hang up
                db = command.get("$db") or request.namespace or "admin"
                reply = self.engine.execute(db, command)
                name = next(iter(command), "")
                if self._take_drop(name):
                    break  # applied; the reply is lost with the connection
                if self.delay:
                    time.sleep(self.delay)
                if isinstance(request, OpMsg) and request.flags & OP_MSG_MORE_TO_COME:
                    continue  # unacknowledged write: no reply
                request.replies(reply)
        except (OSError, ConnectionError, ValueError, AssertionError, NotImplementedError):
            pass  # the client hung up, or we did
        finally:
            with self._connections_lock:
                self._connections.discard(conn)
            self.streams.closed(conn)
            try:
                conn.close()
            except OSError:
                pass


def main() -> None:
    """``python -m tests.support.server [PORT] [--change-streams]``: serve until
    interrupted (prints the URI); with ``--change-streams``, as a replica set."""
    import sys

    args = [a for a in sys.argv[1:] if a != "--change-streams"]
    streams = "--change-streams" in sys.argv[1:]
    server = MockServer(int(args[0]) if args else 0, change_streams=streams).start()
    print(server.uri(), flush=True)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        server.stop()


if __name__ == "__main__":
    main()
