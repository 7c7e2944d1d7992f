"""The embedded stand-in behind ``App("mongomock://")``.

An in-process, in-memory imitation of a MongoDB server built on `mongomock`_ (install
the ``mongosched[testing]`` extra). It is for tests and demos, never for production.

mongomock on its own is not safe to share between threads: two threads racing
``find_one_and_update`` can both "claim" the same document. A real server applies each
single-document operation atomically, and mongosched's guarantees rest on that. So every
collection operation here runs under one lock per embedded server, and cursors are read
to the end under that lock, which makes each operation atomic as a server's would be.

Servers are named: ``mongomock://`` and ``mongomock://name/dbname`` share one in-memory
server per name in the process, as two clients of the same real server share its data.

.. _mongomock: https://github.com/mongomock/mongomock
"""

from __future__ import annotations

import os
import threading
import weakref
from collections.abc import Callable, Iterator
from typing import Any
from urllib.parse import urlsplit

__all__ = [
    "EmbeddedClient",
    "embedded_client",
    "expire_by_any_id",
    "is_embedded",
    "parse_embedded_uri",
    "reset_embedded",
]

SCHEME = "mongomock"
DEFAULT_DATABASE = "mongosched"

# Methods whose result is a cursor: they are materialised under the lock.
_CURSOR_METHODS = frozenset({"find", "aggregate", "list_indexes", "find_raw_batches"})


def _import_mongomock() -> Any:
    try:
        import mongomock
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ImportError(
            "App('mongomock://') needs mongomock: pip install 'mongosched[testing]'"
        ) from exc
    expire_by_any_id(mongomock)
    return mongomock


def expire_by_any_id(mongomock: Any) -> None:
    """mongomock keys a document whose ``_id`` is itself a document by a hashable copy
    of it, but its TTL expiry deletes by the ``_id`` as stored, and fails (``TypeError:
    unhashable``) as soon as such a document expires. A server deletes it: so does this
    (flow-control limit documents have such ids and a TTL index)."""
    from mongomock import helpers
    from mongomock.store import CollectionStore

    delete = CollectionStore.__delitem__
    if getattr(delete, "by_any_id", False):
        return

    def by_any_id(self: Any, key: Any) -> None:
        delete(self, helpers.hashdict(key) if isinstance(key, dict) else key)

    by_any_id.by_any_id = True  # type: ignore[attr-defined]
    CollectionStore.__delitem__ = by_any_id


class _ServerLock:
    """The lock of one embedded server: re-entrant, and made afresh in a forked child.

    A thread of the parent may hold it at the moment of a fork; that thread does not
    exist in the child, so the child would wait for it forever."""

    def __init__(self) -> None:
        self._lock = threading.RLock()
        _locks.add(self)

    def __enter__(self) -> _ServerLock:
        self._lock.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self._lock.release()

    def _after_fork(self) -> None:
        self._lock = threading.RLock()


_locks: weakref.WeakSet[_ServerLock] = weakref.WeakSet()


class _Cursor:
    """A cursor whose query runs atomically, on first iteration.

    ``sort``, ``skip`` and ``limit`` are recorded and applied when the results are
    read, all under the server lock.
    """

    def __init__(self, lock: _ServerLock, make: Callable[[], Any]) -> None:
        self._lock = lock
        self._make = make
        self._chain: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = []
        self._docs: list[Any] | None = None

    def _record(self, name: str, *args: Any, **kwargs: Any) -> _Cursor:
        if self._docs is not None:
            raise RuntimeError("cursor already read")
        self._chain.append((name, args, kwargs))
        return self

    def sort(self, *args: Any, **kwargs: Any) -> _Cursor:
        return self._record("sort", *args, **kwargs)

    def skip(self, *args: Any, **kwargs: Any) -> _Cursor:
        return self._record("skip", *args, **kwargs)

    def limit(self, *args: Any, **kwargs: Any) -> _Cursor:
        return self._record("limit", *args, **kwargs)

    def batch_size(self, *args: Any, **kwargs: Any) -> _Cursor:
        return self

    def hint(self, *args: Any, **kwargs: Any) -> _Cursor:
        return self

    def _read(self) -> list[Any]:
        if self._docs is None:
            with self._lock:
                cursor = self._make()
                for name, args, kwargs in self._chain:
                    cursor = getattr(cursor, name)(*args, **kwargs)
                self._docs = list(cursor)
        return self._docs

    def __iter__(self) -> Iterator[Any]:
        return iter(self._read())

    def to_list(self, length: int | None = None) -> list[Any]:
        docs = self._read()
        return list(docs if length is None else docs[:length])

    def close(self) -> None:
        self._docs = []

    def __enter__(self) -> _Cursor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _plain_codec_options(options: Any) -> Any:
    from bson.codec_options import CodecOptions

    return CodecOptions(tz_aware=options.tz_aware, tzinfo=options.tzinfo)


class _Locked:
    """Wraps a mongomock object so that each method call holds the server lock."""

    def __init__(self, target: Any, lock: _ServerLock) -> None:
        object.__setattr__(self, "_target", target)
        object.__setattr__(self, "_lock", lock)

    def _wrap(self, value: Any) -> Any:
        mongomock = _import_mongomock()
        if isinstance(value, (mongomock.Collection, mongomock.Database, mongomock.MongoClient)):
            return type(self)(value, self._lock)  # db.client too: its databases stay locked
        return value

    def __getattr__(self, name: str) -> Any:
        value = getattr(self._target, name)
        mongomock = _import_mongomock()
        if not callable(value) or isinstance(value, (mongomock.Collection, mongomock.Database)):
            return self._wrap(value)
        lock = self._lock
        if name == "create_index":
            return self._create_index
        if name == "bulk_write":
            return self._bulk_write
        if name == "command" and isinstance(self._target, mongomock.Database):
            return self._command
        if name in ("get_collection", "with_options"):

            def plain(*args: Any, **kwargs: Any) -> Any:
                """mongomock keeps Python objects as they are (UUIDs, Decimals) and
                refuses codec options it does not implement: pass on only tz_aware."""
                options = kwargs.pop("codec_options", None)
                if options is not None:
                    kwargs["codec_options"] = _plain_codec_options(options)
                with lock:
                    return self._wrap(value(*args, **kwargs))

            return plain
        if name in _CURSOR_METHODS:

            def cursor_method(*args: Any, **kwargs: Any) -> _Cursor:
                return _Cursor(lock, lambda: value(*args, **kwargs))

            return cursor_method

        def method(*args: Any, **kwargs: Any) -> Any:
            args, kwargs = _plain(args), _plain(kwargs)
            with lock:
                return self._wrap(value(*args, **kwargs))

        return method

    def _create_index(self, keys: Any, **options: Any) -> str:
        """As a server does: an index that exists already is left alone. (mongomock
        re-checks uniqueness of existing documents ignoring ``partialFilterExpression``,
        so re-creating a partial unique index would fail on it.)"""
        if isinstance(keys, str):
            keys = [(keys, 1)]
        name = options.get("name") or "_".join(f"{k}_{d}" for k, d in keys)
        with self._lock:
            if name in self._target.index_information():
                return str(name)
            return str(self._target.create_index(keys, **options))

    def _bulk_write(self, requests: Any, ordered: bool = True, **options: Any) -> Any:
        """A bulk write, atomically, as pymongo 4 describes it to a server (mongomock's
        own does not know the options pymongo 4.10+ passes)."""
        from pymongo.errors import BulkWriteError
        from pymongo.results import BulkWriteResult

        ops = _BulkOps()
        for request in requests:
            request._add_to_bulk(ops)
        details = _apply(self._target, self._lock, _plain(ops.ops), ordered)
        if details["writeErrors"]:
            raise BulkWriteError(details)
        return BulkWriteResult(details, True)

    def _command(self, command: Any, *args: Any, **kwargs: Any) -> Any:
        """``Database.command``; mongomock cannot run ``find`` and ``update``, which the
        store sends as commands (store/commands.py): those run here, on the collection,
        atomically, and reply as a server does (raw when the codec options ask for it)."""
        from bson.raw_bson import RawBSONDocument

        name = command if isinstance(command, str) else next(iter(command))
        if name not in ("find", "update"):
            args, kwargs = _plain(args), _plain(kwargs)
            with self._lock:
                return self._target.command(_plain(command), *args, **kwargs)
        if isinstance(command, str) or args:
            raise NotImplementedError(f"the stand-in's {name}: pass the command as a document")
        options = kwargs.get("codec_options")
        cmd = _plain(dict(command))
        reply = self._find_command(cmd) if name == "find" else self._update_command(cmd)
        reply["ok"] = 1.0
        if options is not None and issubclass(options.document_class, RawBSONDocument):
            import bson

            from mongosched.store.codec import CODEC_OPTIONS

            return RawBSONDocument(bson.encode(reply, codec_options=CODEC_OPTIONS), options)
        return reply

    def _find_command(self, cmd: dict[str, Any]) -> dict[str, Any]:
        _only(cmd, "find", {"filter", "sort", "limit", "skip", "singleBatch", "readConcern"})
        limit = int(cmd.get("limit") or 0)
        options: dict[str, Any] = {"skip": int(cmd.get("skip") or 0), "limit": abs(limit)}
        if cmd.get("sort"):
            options["sort"] = list(cmd["sort"].items())
        with self._lock:
            collection = self._target.get_collection(cmd["find"])
            docs = list(collection.find(cmd.get("filter") or {}, **options))
        # Every document found in the first batch: the cursor is exhausted (id 0).
        namespace = f"{self._target.name}.{cmd['find']}"
        return {"cursor": {"firstBatch": docs, "id": 0, "ns": namespace}}

    def _update_command(self, cmd: dict[str, Any]) -> dict[str, Any]:
        _only(cmd, "update", {"updates", "ordered", "writeConcern"})
        ops: list[tuple[str, tuple[Any, ...]]] = []
        for statement in cmd["updates"]:
            _only(statement, "q", {"u", "upsert", "multi"})
            update = statement["u"]
            kind = "update" if any(str(k).startswith("$") for k in update) else "replace"
            args = (
                statement["q"],
                update,
                bool(statement.get("multi")),
                bool(statement.get("upsert")),
            )
            ops.append((kind, args))
        with self._lock:
            collection = self._target.get_collection(cmd["update"])
            details = _apply(collection, self._lock, ops, bool(cmd.get("ordered", True)))
        reply: dict[str, Any] = {
            "n": details["nMatched"] + details["nUpserted"],
            "nModified": details["nModified"],
        }
        if details["upserted"]:
            reply["upserted"] = details["upserted"]
        if details["writeErrors"]:
            reply["writeErrors"] = details["writeErrors"]
        return reply

    def __getitem__(self, name: str) -> Any:
        with self._lock:
            return self._wrap(self._target[name])

    def __eq__(self, other: object) -> bool:
        if isinstance(other, _Locked):
            return bool(self._target == other._target)
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self._target)

    def __repr__(self) -> str:
        return f"Embedded({self._target!r})"


def _apply(
    collection: Any, lock: _ServerLock, ops: list[tuple[str, tuple[Any, ...]]], ordered: bool
) -> dict[str, Any]:
    """Apply the operations of a bulk write to a mongomock ``collection``, atomically;
    the totals, upserts and write errors as a server counts them."""
    from pymongo.errors import DuplicateKeyError, OperationFailure

    totals = {"nInserted": 0, "nMatched": 0, "nModified": 0, "nRemoved": 0, "nUpserted": 0}
    upserted: list[dict[str, Any]] = []
    errors: list[dict[str, Any]] = []
    with lock:
        for index, (kind, args) in enumerate(ops):
            try:
                if kind == "insert":
                    collection.insert_one(*args)
                    totals["nInserted"] += 1
                    continue
                if kind == "delete":
                    selector, limit = args
                    many = collection.delete_one if limit == 1 else collection.delete_many
                    totals["nRemoved"] += many(selector).deleted_count
                    continue
                selector, update, multi, upsert = args
                if kind == "replace":
                    result = collection.replace_one(selector, update, upsert=upsert)
                elif multi:
                    result = collection.update_many(selector, update, upsert=upsert)
                else:
                    result = collection.update_one(selector, update, upsert=upsert)
            except (DuplicateKeyError, OperationFailure) as exc:
                errors.append({"index": index, "code": exc.code or 2, "errmsg": str(exc)})
                if ordered:
                    break
                continue
            if result.upserted_id is not None:
                totals["nUpserted"] += 1
                upserted.append({"index": index, "_id": result.upserted_id})
            else:
                totals["nMatched"] += result.matched_count
                totals["nModified"] += result.modified_count
    return {**totals, "upserted": upserted, "writeErrors": errors, "writeConcernErrors": []}


def _only(command: dict[str, Any], name: str, fields: set[str]) -> None:
    """Refuse what the stand-in's emulation of command ``name`` does not implement."""
    unknown = set(command) - fields - {name}
    if unknown:
        raise NotImplementedError(f"the stand-in's {name}: {', '.join(sorted(unknown))}")


def _plain(value: Any) -> Any:
    """``value`` with every raw BSON document in it decoded (pymongo sends one as it is;
    mongomock would keep it raw)."""
    from bson.raw_bson import RawBSONDocument

    from mongosched.store.codec import CODEC_OPTIONS

    if isinstance(value, RawBSONDocument):
        import bson

        return bson.decode(bytes(value.raw), codec_options=CODEC_OPTIONS)
    if isinstance(value, dict):
        plain = {k: _plain(v) for k, v in value.items()}
        changed = any(plain[k] is not v for k, v in value.items())
        return plain if changed else value  # the caller's own (mongomock may add an _id)
    if isinstance(value, (list, tuple)):
        items = [_plain(v) for v in value]
        changed = any(a is not b for a, b in zip(items, value, strict=True))
        return type(value)(items) if changed else value
    return value


class _BulkOps:
    """Collects the operations of a bulk write as pymongo's requests describe them."""

    def __init__(self) -> None:
        self.ops: list[tuple[str, tuple[Any, ...]]] = []

    def add_insert(self, document: Any) -> None:
        self.ops.append(("insert", (document,)))

    def add_update(
        self, selector: Any, update: Any, multi: bool, upsert: bool, **options: Any
    ) -> None:
        self.ops.append(("update", (selector, update, multi, upsert)))

    def add_replace(self, selector: Any, replacement: Any, upsert: bool, **options: Any) -> None:
        self.ops.append(("replace", (selector, replacement, False, upsert)))

    def add_delete(self, selector: Any, limit: int, **options: Any) -> None:
        self.ops.append(("delete", (selector, limit)))


class EmbeddedClient:
    """A client of one named embedded server. Databases and collections it hands out
    apply each operation atomically."""

    def __init__(self, server: str = "default") -> None:
        mongomock = _import_mongomock()
        self.server = server
        self.lock, client = _server(server, mongomock)
        self._client = client

    def get_database(self, name: str = DEFAULT_DATABASE, **options: Any) -> Any:
        return _Locked(self._client.get_database(name, **options), self.lock)

    def __getitem__(self, name: str) -> Any:
        return self.get_database(name)

    def drop_database(self, name: str) -> None:
        with self.lock:
            self._client.drop_database(name)

    def list_database_names(self) -> list[str]:
        with self.lock:
            return list(self._client.list_database_names())

    def close(self) -> None:
        """Nothing to release: the data lives as long as the process."""

    def __repr__(self) -> str:
        return f"EmbeddedClient(server={self.server!r})"


_servers: dict[str, tuple[_ServerLock, Any]] = {}
_servers_lock = threading.Lock()


def _server(name: str, mongomock: Any) -> tuple[_ServerLock, Any]:
    with _servers_lock:
        if name not in _servers:
            _servers[name] = (_ServerLock(), mongomock.MongoClient(tz_aware=True))
        return _servers[name]


def _after_fork_in_child() -> None:
    global _servers_lock
    _servers_lock = threading.Lock()
    for lock in list(_locks):
        lock._after_fork()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def reset_embedded(server: str | None = None) -> None:
    """Forget the data of one embedded server (or of all of them)."""
    with _servers_lock:
        if server is None:
            _servers.clear()
        else:
            _servers.pop(server, None)


def parse_embedded_uri(uri: str) -> tuple[str, str] | None:
    """``(server, database)`` for a ``mongomock://`` URI, else ``None``."""
    parts = urlsplit(uri)
    if parts.scheme != SCHEME:
        return None
    server = parts.hostname or "default"
    database = parts.path.lstrip("/") or DEFAULT_DATABASE
    return server, database


def embedded_client(server: str = "default") -> EmbeddedClient:
    """A client of the named embedded server (created on first use)."""
    return EmbeddedClient(server)


def is_embedded(database: Any) -> bool:
    """Whether ``database`` is a database of the embedded stand-in."""
    return isinstance(database, _Locked)
