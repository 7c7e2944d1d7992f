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

__all__ = ["MockServer", "CommandError"]

MAX_WIRE_VERSION = 17  # MongoDB 6.0; pymongo 4.20 needs 8 (4.2) or higher
MAX_BSON = 16 * 1024 * 1024
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


class CommandError(Exception):
    """A command failure, replied as ``{ok: 0, errmsg, code, codeName}``."""

    def __init__(self, code: int, errmsg: str, code_name: str = "", **extra: Any) -> None:
        super().__init__(errmsg)
        self.code = code
        self.errmsg = errmsg
        self.code_name = code_name
        self.extra = extra

    def reply(self) -> dict[str, Any]:
        doc = {"ok": 0, "errmsg": self.errmsg, "code": self.code, **self.extra}
        if self.code_name:
            doc["codeName"] = self.code_name
        return doc


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


class Engine:
    """Executes commands on one mongomock client, each atomically under ``lock``.
    The data outlives the listening socket: a restarted server keeps it."""

    def __init__(self) -> None:
        self.client = mongomock.MongoClient(tz_aware=True)
        self.lock = threading.RLock()
        self.cursors: dict[int, tuple[str, list[dict[str, Any]]]] = {}
        self._cursor_ids = itertools.count(1)
        self.started = datetime.now(timezone.utc)
        self.commands: dict[str, int] = {}
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

    # Handshake and admin ----------------------------------------------------------------
    def _hello(self, db: str, cmd: Mapping[str, Any]) -> dict[str, Any]:
        return {
            "helloOk": True,
            "ismaster": True,
            "isWritablePrimary": True,
            "maxBsonObjectSize": MAX_BSON,
            "maxMessageSizeBytes": 48_000_000,
            "maxWriteBatchSize": 100_000,
            "localTime": datetime.now(timezone.utc),
            "logicalSessionTimeoutMinutes": 30,
            "connectionId": 1,
            "minWireVersion": 0,
            "maxWireVersion": MAX_WIRE_VERSION,
            "readOnly": False,
        }

    def _build_info(self, db: str, cmd: Mapping[str, Any]) -> dict[str, Any]:
        return {"version": "6.0.0-mongomock", "versionArray": [6, 0, 0, 0], "bits": 64}

    def _drop_database(self, db: str, cmd: Mapping[str, Any]) -> dict[str, Any]:
        self.client.drop_database(db)
        return {"dropped": db}

    def _drop(self, db: str, cmd: Mapping[str, Any]) -> dict[str, Any]:
        name = cmd["drop"]
        if name not in self.client[db].list_collection_names():
            raise CommandError(26, f"ns not found: {db}.{name}", "NamespaceNotFound")
        self.client[db].drop_collection(name)
        return {"ns": f"{db}.{name}"}

    def _create(self, db: str, cmd: Mapping[str, Any]) -> dict[str, Any]:
        if cmd["create"] in self.client[db].list_collection_names():
            raise CommandError(
                48, f"Collection {db}.{cmd['create']} already exists", "NamespaceExists"
            )
        self.client[db].create_collection(cmd["create"])
        return {}

    def _list_collections(self, db: str, cmd: Mapping[str, Any]) -> dict[str, Any]:
        names = self.client[db].list_collection_names()
        docs = [
            {"name": n, "type": "collection", "options": {}, "info": {"readOnly": False}}
            for n in names
        ]
        if cmd.get("nameOnly"):
            docs = [{"name": d["name"], "type": "collection"} for d in docs]
        flt = cmd.get("filter") or {}
        if flt:
            docs = [d for d in docs if all(d.get(k) == v for k, v in flt.items())]
        return self._cursor_reply(
            f"{db}.$cmd.listCollections", docs, cmd.get("cursor", {}).get("batchSize")
        )

    def _list_databases(self, db: str, cmd: Mapping[str, Any]) -> dict[str, Any]:
        names = self.client.list_database_names()
        return {
            "databases": [{"name": n, "sizeOnDisk": 0, "empty": False} for n in names],
            "totalSize": 0,
        }

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
        for cursor_id in cmd.get("cursors", []):
            (killed if self.cursors.pop(int(cursor_id), None) else missing).append(cursor_id)
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
        for stage in pipeline:
            if next(iter(stage), None) in ("$out", "$merge"):
                raise CommandError(115, "$out/$merge are not supported here", "CommandNotSupported")
        docs = list(coll.aggregate(pipeline))
        cursor = cmd.get("cursor") or {}
        return self._cursor_reply(f"{db}.{coll.name}", docs, cursor.get("batchSize"))

    # Indexes ----------------------------------------------------------------------------------
    def _create_indexes(self, db: str, cmd: Mapping[str, Any]) -> dict[str, Any]:
        coll = self._collection(db, cmd)
        existed = coll.name in self.client[db].list_collection_names()
        before = len(coll.index_information()) if existed else 0
        for spec in cmd.get("indexes", []):
            keys = list(spec["key"].items())
            name = spec.get("name") or "_".join(f"{k}_{d}" for k, d in keys)
            info = coll.index_information() if existed else {}
            if name in info:  # as a server does: an existing index is left alone
                if [tuple(k) for k in info[name]["key"]] != keys:
                    raise CommandError(
                        86,
                        f"An existing index has the same name ({name}) but different keys",
                        "IndexKeySpecsConflict",
                    )
                continue
            options = {k: v for k, v in spec.items() if k not in ("key", "v", "ns")}
            options["name"] = name
            coll.create_index(keys, **options)
            existed = True
        after = len(coll.index_information())
        return {
            "createdCollectionAutomatically": not existed and after > 0,
            "numIndexesBefore": before,
            "numIndexesAfter": after,
        }

    def _index_docs(self, coll: Any) -> list[dict[str, Any]]:
        docs = []
        for name, info in coll.index_information().items():
            doc: dict[str, Any] = {"v": info.get("v", 2), "key": dict(info["key"]), "name": name}
            doc.update({k: v for k, v in info.items() if k not in ("v", "key")})
            docs.append(doc)
        return docs

    def _list_indexes(self, db: str, cmd: Mapping[str, Any]) -> dict[str, Any]:
        coll = self._collection(db, cmd)
        if coll.name not in self.client[db].list_collection_names():
            raise CommandError(26, f"ns does not exist: {db}.{coll.name}", "NamespaceNotFound")
        batch = (cmd.get("cursor") or {}).get("batchSize")
        return self._cursor_reply(f"{db}.{coll.name}", self._index_docs(coll), batch)

    def _drop_indexes(self, db: str, cmd: Mapping[str, Any]) -> dict[str, Any]:
        coll = self._collection(db, cmd)
        index = cmd.get("index")
        if index == "*":
            coll.drop_indexes()
        else:
            coll.drop_index(index if isinstance(index, str) else list(index.items()))
        return {}

    # Writes -------------------------------------------------------------------------------------
    def _insert(self, db: str, cmd: Mapping[str, Any]) -> dict[str, Any]:
        coll = self._collection(db, cmd)
        ordered = cmd.get("ordered", True)
        n, errors = 0, []
        for index, doc in enumerate(cmd.get("documents", [])):
            try:
                coll.insert_one(dict(doc))
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
                if _is_replacement(update):
                    if multi:
                        raise CommandError(
                            9,
                            "multi update is not supported for replacement-style update",
                            "FailedToParse",
                        )
                    result = coll.replace_one(query, dict(update), upsert=upsert)
                elif multi:
                    result = coll.update_many(query, dict(update), upsert=upsert)
                else:
                    result = coll.update_one(query, dict(update), upsert=upsert)
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
            if _is_replacement(update):
                coll.replace_one(by_id, dict(update))
            else:
                coll.update_one(by_id, dict(update))
            value = coll.find_one(by_id, projection) if new else before
            return {"lastErrorObject": {"n": 1, "updatedExisting": True}, "value": value}
        if remove or not upsert:
            return {"lastErrorObject": {"n": 0, "updatedExisting": False}, "value": None}
        if _is_replacement(update):
            result = coll.replace_one(query, dict(update), upsert=True)
        else:
            result = coll.update_one(query, dict(update), upsert=True)
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

    def __init__(self, port: int = 0, host: str = "127.0.0.1") -> None:
        self.host = host
        self.port = port
        self.engine = Engine()
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
        for conn in connections:
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
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
            try:
                conn.close()
            except OSError:
                pass


def main() -> None:
    """``python -m tests.support.server [PORT]``: serve until interrupted (prints the URI)."""
    import sys

    server = MockServer(int(sys.argv[1]) if len(sys.argv) > 1 else 0).start()
    print(server.uri(), flush=True)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        server.stop()


if __name__ == "__main__":
    main()
