"""A fast in-memory MongoDB stand-in for benchmarks: the wire protocol on 127.0.0.1.

    python bench/stub_server.py [--port 0]     # prints its URI, serves until killed

What it is for: measuring a *client's* CPU per job (mongosched, in another process)
without the stand-in slowing the client down. tests/support/server.py is the test
stand-in (mockupdb decoding each message, mongomock scanning the collection on every
command: ~1 ms and more per command at a 10,000-job backlog); this one decodes with
``bson`` (C) and answers the commands mongosched sends from in-memory dicts with a few
indexes, built as queries ask for them:

* a hash index per field queried by equality (``_id``, ``status``, ``lease.token``...),
  so a fenced write or a read back by claim token touches one document;
* an ordered view per (equality field, value, sort) for sorted reads (the claim's
  ``status: pending`` sorted by priority and run_at), so a claim reads the first
  matching documents instead of sorting the backlog;
* unique indexes from ``createIndexes`` (with ``partialFilterExpression``) enforced on
  every write: duplicate-key errors as a server gives them.

Commands: hello/isMaster, ping, buildInfo, endSessions, find, getMore, killCursors,
findAndModify, insert, update (several statements, ``multi``, ``upsert``), delete,
count, distinct, aggregate (``bench/stub_query.py``), createIndexes, listIndexes,
dropIndexes, create, drop, dropDatabase, listCollections, listDatabases; and
``stubStats`` (commands received by name since the last ``{stubStats: 1, reset:
true}``): the benchmark's round-trip count. Each command runs atomically under one lock.

Checked against the store contract suite (every query and update mongosched makes)::

    python bench/stub_server.py &    # prints mongodb://127.0.0.1:PORT/
    MONGOSCHED_TEST_URI=mongodb://127.0.0.1:PORT/ pytest tests/contract -k mongodb

all pass but the three that read query plans with ``explain`` (a real server's).

Not a database: no persistence, transactions, auth or compression; no change streams
(refused as a standalone server refuses them, so runners poll);
OP_MSG (and OP_QUERY for the first handshake) only. Its own framing: the test
stand-in's comes from mockupdb, whose pure-Python request parsing is what makes it slow.
"""

from __future__ import annotations

import argparse
import bisect
import datetime as dt
import itertools
import selectors
import socket
import struct
import sys
import threading
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import bson
from bson import Int64, ObjectId

sys.path.insert(0, str(Path(__file__).resolve().parent))
import stub_query as q  # noqa: E402

__all__ = ["StubServer", "main"]

OP_REPLY, OP_QUERY, OP_MSG = 1, 2004, 2013
HEADER = struct.Struct("<iiii")
MAX_BSON = 16 * 1024 * 1024
FIRST_BATCH = 101
SETUP_COMMANDS = frozenset(
    {"hello", "ismaster", "ping", "buildinfo", "endsessions", "createindexes", "listindexes"}
)


class CommandFailed(Exception):
    def __init__(self, code: int, message: str, name: str = "") -> None:
        super().__init__(message)
        self.code, self.message, self.name = code, message, name

    def reply(self) -> dict[str, Any]:
        doc: dict[str, Any] = {"ok": 0.0, "errmsg": self.message, "code": self.code}
        if self.name:
            doc["codeName"] = self.name
        return doc


class Duplicate(CommandFailed):
    def __init__(self, ns: str, index: str, key: Any) -> None:
        super().__init__(
            11000,
            f"E11000 duplicate key error collection: {ns} index: {index} dup key: {key!r}",
            "DuplicateKey",
        )


def hkey(value: Any) -> Any:
    """A hashable key equal for values MongoDB's equality finds equal (1 and 1.0)."""
    kind = type(value)
    if kind is str or kind is ObjectId or kind is int:
        return value
    if value is q.MISSING:
        return None
    if isinstance(value, bool):
        return ("bool", value)
    if isinstance(value, (dict, list)):
        return ("doc", bson.encode({"v": value}))
    if isinstance(value, dt.datetime) and value.tzinfo is not None:
        return value.astimezone(dt.timezone.utc).replace(tzinfo=None)
    return value


class Collection:
    def __init__(self, ns: str) -> None:
        self.ns = ns
        self.docs: dict[Any, dict[str, Any]] = {}  # hkey(_id) -> document, insertion order
        self.seq: dict[Any, int] = {}
        self.by_seq: dict[int, dict[str, Any]] = {}
        self._next = itertools.count()
        self.hashes: dict[str, dict[Any, dict[Any, dict[str, Any]]]] = {}
        self.views: dict[tuple[str, Any, tuple[tuple[str, int], ...]], list[Any]] = {}
        self.indexes: dict[str, dict[str, Any]] = {"_id_": {"v": 2, "key": {"_id": 1}}}
        self.unique: dict[str, tuple[list[str], q.Matcher | None, dict[Any, Any]]] = {}
        self.multikey: set[str] = set()

    # Indexes ----------------------------------------------------------------------------------
    def _values(self, doc: Mapping[str, Any], field: str) -> list[Any]:
        value = q.get_path(doc, field)
        if not isinstance(value, list):
            return [hkey(value)]
        self.multikey.add(field)
        return [hkey(v) for v in [value, *value]]

    def count(self, query: Mapping[str, Any] | None) -> int | None:
        """The number of documents ``query`` matches from its index alone, when one
        field's equalities are the whole query (and no document holds an array there,
        which could sit in two of its buckets); else None."""
        pinned = q.equalities(query)
        if len(pinned) != 1 or len(query or {}) != 1:
            return None
        ((field, values),) = pinned.items()
        if field == "_id":
            return sum(hkey(v) in self.docs for v in set(map(hkey, values)))
        index = self.hash_index(field)
        if field in self.multikey:
            return None
        return sum(len(index.get(key, ())) for key in set(map(hkey, values)))

    def hash_index(self, field: str) -> dict[Any, dict[Any, dict[str, Any]]]:
        index = self.hashes.get(field)
        if index is None:
            index = self.hashes[field] = {}
            for key, doc in self.docs.items():
                for value in self._values(doc, field):
                    index.setdefault(value, {})[key] = doc
        return index

    def view(self, field: str, value: Any, spec: list[tuple[str, int]]) -> list[Any]:
        name = (field, hkey(value), tuple(spec))
        entries = self.views.get(name)
        if entries is None:
            keyed = q.doc_sort_key(spec)
            members = self.hash_index(field).get(hkey(value), {})
            entries = sorted((keyed(doc), self.seq[key]) for key, doc in members.items())
            self.views[name] = entries
        return entries

    def add_index(self, spec: Mapping[str, Any]) -> bool:
        name = spec["name"]
        if name in self.indexes:
            if dict(self.indexes[name]["key"]) != dict(spec["key"]):
                raise CommandFailed(
                    86, f"An existing index has the same name ({name})", "IndexKeySpecsConflict"
                )
            return False
        if spec.get("unique"):
            fields = list(spec["key"])
            partial = spec.get("partialFilterExpression")
            matcher = q.compile_filter(partial) if partial else None
            table: dict[Any, Any] = {}
            for key, doc in self.docs.items():
                ukey = self._unique_key(fields, matcher, doc)
                if ukey is not None:
                    if ukey in table:
                        raise Duplicate(self.ns, name, ukey)
                    table[ukey] = key
            self.unique[name] = (fields, matcher, table)
        self.indexes[name] = {"v": 2, **{k: v for k, v in spec.items() if k != "v"}}
        return True

    @staticmethod
    def _unique_key(fields: list[str], matcher: q.Matcher | None, doc: Mapping[str, Any]) -> Any:
        if matcher is not None and not matcher(doc):
            return None
        return tuple(hkey(q.get_path(doc, f)) for f in fields)

    # Writes -------------------------------------------------------------------------------------
    def write(self, key: Any, old: dict[str, Any] | None, new: dict[str, Any] | None) -> None:
        """Replace ``old`` by ``new`` (either may be None: an insert, a delete) in the
        documents and every index, after checking the unique indexes."""
        for name, (fields, matcher, table) in self.unique.items():
            ukey = None if new is None else self._unique_key(fields, matcher, new)
            if ukey is not None and table.get(ukey, key) != key:
                raise Duplicate(self.ns, name, ukey)
        if new is not None and old is None and key in self.docs:
            raise Duplicate(self.ns, "_id_", new.get("_id"))
        for _name, (fields, matcher, table) in self.unique.items():
            if old is not None:
                okey = self._unique_key(fields, matcher, old)
                if okey is not None and table.get(okey) == key:
                    del table[okey]
            if new is not None:
                ukey = self._unique_key(fields, matcher, new)
                if ukey is not None:
                    table[ukey] = key
        if old is None:
            self.seq[key] = next(self._next)
        seq = self.seq[key]
        for field, index in self.hashes.items():
            if old is not None and new is not None:
                before, after = q.get_path(old, field), q.get_path(new, field)
                if (before is after and type(before) is not list) or (
                    type(before) is str and before == after
                ):
                    index.setdefault(hkey(after), {})[key] = new  # same value, new document
                    continue
            if old is not None:
                for value in self._values(old, field):
                    members = index.get(value)
                    if members is not None:
                        members.pop(key, None)
                        if not members:
                            del index[value]
            if new is not None:
                for value in self._values(new, field):
                    index.setdefault(value, {})[key] = new
        for (field, value, spec), entries in self.views.items():
            keyed = q.doc_sort_key(list(spec))
            if old is not None and value in self._values(old, field):
                entry = (keyed(old), seq)
                at = bisect.bisect_left(entries, entry)
                if at < len(entries) and entries[at] == entry:
                    del entries[at]
            if new is not None and value in self._values(new, field):
                bisect.insort(entries, (keyed(new), seq))
        if new is None:
            self.docs.pop(key, None)
            self.seq.pop(key, None)
            self.by_seq.pop(seq, None)
        else:
            self.docs[key] = new
            self.by_seq[seq] = new

    def insert(self, doc: dict[str, Any]) -> None:
        if "_id" not in doc:
            doc = {"_id": ObjectId(), **doc}
        self.write(hkey(doc["_id"]), None, doc)

    # Reads ----------------------------------------------------------------------------------------
    def candidates(self, query: Mapping[str, Any] | None) -> Iterable[dict[str, Any]]:
        """The documents ``query`` can match, narrowed by its most selective equality."""
        pinned = q.equalities(query)
        if "_id" in pinned:
            found = (self.docs.get(hkey(v)) for v in pinned["_id"])
            return [d for d in found if d is not None]
        best: list[dict[Any, dict[str, Any]]] | None = None
        for field, values in pinned.items():
            index = self.hash_index(field)
            groups = [index.get(hkey(v), {}) for v in values]
            if best is None or sum(map(len, groups)) < sum(map(len, best)):
                best = groups
        if best is None:
            return list(self.docs.values())
        if len(best) == 1:
            return list(best[0].values())
        seen: dict[Any, dict[str, Any]] = {}
        for group in best:
            seen.update(group)
        return list(seen.values())

    def select(
        self,
        query: Mapping[str, Any] | None,
        sort: list[tuple[str, int]] | None = None,
        limit: int = 0,
        skip: int = 0,
    ) -> list[dict[str, Any]]:
        matcher = q.compile_filter(query)
        wanted = skip + limit if limit else 0
        if sort:
            pinned = {f: v[0] for f, v in q.equalities(query).items() if len(v) == 1 and f != "_id"}
            if pinned:
                field = min(pinned, key=lambda f: len(self.hash_index(f).get(hkey(pinned[f]), {})))
                by_seq = self.by_seq
                out = []
                for _, seq in self.view(field, pinned[field], sort):
                    doc = by_seq.get(seq)
                    if doc is not None and matcher(doc):
                        out.append(doc)
                        if wanted and len(out) >= wanted:
                            break
                return out[skip:]
            docs = sorted(
                (d for d in self.candidates(query) if matcher(d)), key=q.doc_sort_key(sort)
            )
            return docs[skip : wanted or None]
        out = []
        for doc in self.candidates(query):
            if matcher(doc):
                out.append(doc)
                if wanted and len(out) >= wanted:
                    break
        return out[skip:]


class Engine:
    """The databases, the commands, one lock."""

    def __init__(self) -> None:
        self.dbs: dict[str, dict[str, Collection]] = {}
        self.lock = threading.Lock()
        self.cursors: dict[int, tuple[str, list[dict[str, Any]]]] = {}
        self._cursor_ids = itertools.count(1)
        self.commands: Counter[str] = Counter()
        self.handlers: dict[str, Callable[[str, dict[str, Any]], dict[str, Any]]] = {
            name.lower(): getattr(self, f"_{name}")
            for name in (
                "hello find getMore killCursors findAndModify insert update delete count "
                "distinct aggregate createIndexes listIndexes dropIndexes create drop "
                "dropDatabase listCollections listDatabases buildInfo stubStats"
            ).split()
        }
        self.handlers.update(
            ismaster=self._hello, ping=lambda db, c: {}, endsessions=lambda db, c: {}
        )

    def execute(self, db: str, command: dict[str, Any]) -> dict[str, Any]:
        name = next(iter(command), "")
        handler = self.handlers.get(name.lower())
        if handler is None:
            return CommandFailed(59, f"no such command: '{name}'", "CommandNotFound").reply()
        with self.lock:
            self.commands[name] += 1
            try:
                reply = handler(db, command)
            except CommandFailed as exc:
                return exc.reply()
            except q.QueryError as exc:
                return CommandFailed(2, str(exc), "BadValue").reply()
        reply.setdefault("ok", 1.0)
        return reply

    def collection(self, db: str, command: Mapping[str, Any], create: bool = True) -> Collection:
        name = next(iter(command.values()))
        if not isinstance(name, str):
            raise CommandFailed(73, f"collection name must be a string, not {name!r}")
        colls = self.dbs.setdefault(db, {})
        if name not in colls:
            if not create:
                return Collection(f"{db}.{name}")
            colls[name] = Collection(f"{db}.{name}")
        return colls[name]

    def _exists(self, db: str, name: str) -> bool:
        return name in self.dbs.get(db, {})

    # Admin ---------------------------------------------------------------------------------------
    def _hello(self, db: str, cmd: dict[str, Any]) -> dict[str, Any]:
        return {
            "helloOk": True,
            "ismaster": True,
            "isWritablePrimary": True,
            "maxBsonObjectSize": MAX_BSON,
            "maxMessageSizeBytes": 48_000_000,
            "maxWriteBatchSize": 100_000,
            "localTime": dt.datetime.now(dt.timezone.utc),
            "logicalSessionTimeoutMinutes": 30,
            "connectionId": 1,
            "minWireVersion": 0,
            "maxWireVersion": 17,
            "readOnly": False,
        }

    def _buildInfo(self, db: str, cmd: dict[str, Any]) -> dict[str, Any]:
        return {"version": "6.0.0-stub", "versionArray": [6, 0, 0, 0], "bits": 64}

    def _stubStats(self, db: str, cmd: dict[str, Any]) -> dict[str, Any]:
        counts = dict(self.commands)
        if cmd.get("reset"):
            self.commands.clear()
        return {"commands": counts, "setup": sorted(SETUP_COMMANDS)}

    def _create(self, db: str, cmd: dict[str, Any]) -> dict[str, Any]:
        if self._exists(db, cmd["create"]):
            raise CommandFailed(48, f"Collection {db}.{cmd['create']} already exists")
        self.collection(db, cmd)
        return {}

    def _drop(self, db: str, cmd: dict[str, Any]) -> dict[str, Any]:
        if not self._exists(db, cmd["drop"]):
            raise CommandFailed(26, "ns not found", "NamespaceNotFound")
        del self.dbs[db][cmd["drop"]]
        return {}

    def _dropDatabase(self, db: str, cmd: dict[str, Any]) -> dict[str, Any]:
        self.dbs.pop(db, None)
        return {"dropped": db}

    def _listCollections(self, db: str, cmd: dict[str, Any]) -> dict[str, Any]:
        docs = [{"name": n, "type": "collection", "options": {}} for n in self.dbs.get(db, {})]
        match = q.compile_filter(cmd.get("filter"))
        return self._cursor(f"{db}.$cmd.listCollections", [d for d in docs if match(d)], None)

    def _listDatabases(self, db: str, cmd: dict[str, Any]) -> dict[str, Any]:
        return {"databases": [{"name": n, "sizeOnDisk": 0, "empty": False} for n in self.dbs]}

    # Cursors -------------------------------------------------------------------------------------
    def _cursor(
        self, ns: str, docs: list[dict[str, Any]], size: int | None, single: bool = False
    ) -> dict[str, Any]:
        size = FIRST_BATCH if size is None else int(size) or len(docs)
        first, rest = docs[:size], docs[size:]
        cursor_id = 0
        if rest and not single:
            cursor_id = next(self._cursor_ids)
            self.cursors[cursor_id] = (ns, rest)
        return {"cursor": {"id": Int64(cursor_id), "ns": ns, "firstBatch": first}}

    def _getMore(self, db: str, cmd: dict[str, Any]) -> dict[str, Any]:
        cursor_id = int(cmd["getMore"])
        entry = self.cursors.pop(cursor_id, None)
        if entry is None:
            raise CommandFailed(43, f"cursor id {cursor_id} not found", "CursorNotFound")
        ns, docs = entry
        size = int(cmd.get("batchSize") or 0) or 10_000
        batch, rest = docs[:size], docs[size:]
        if rest:
            self.cursors[cursor_id] = (ns, rest)
        return {"cursor": {"id": Int64(cursor_id if rest else 0), "ns": ns, "nextBatch": batch}}

    def _killCursors(self, db: str, cmd: dict[str, Any]) -> dict[str, Any]:
        ids = [int(c) for c in cmd.get("cursors", [])]
        killed = [c for c in ids if self.cursors.pop(c, None) is not None]
        return {"cursorsKilled": killed, "cursorsNotFound": [c for c in ids if c not in killed]}

    # Reads ---------------------------------------------------------------------------------------
    def _find(self, db: str, cmd: dict[str, Any]) -> dict[str, Any]:
        coll = self.collection(db, cmd, create=False)
        limit = int(cmd.get("limit") or 0)
        sort = list((cmd.get("sort") or {}).items())
        docs = coll.select(cmd.get("filter"), sort, abs(limit), int(cmd.get("skip") or 0))
        projection = cmd.get("projection")
        docs = [q.project(d, projection) for d in docs]
        single = bool(cmd.get("singleBatch")) or limit < 0
        return self._cursor(coll.ns, docs, cmd.get("batchSize"), single)

    def _count(self, db: str, cmd: dict[str, Any]) -> dict[str, Any]:
        coll = self.collection(db, cmd, create=False)
        skip, limit = int(cmd.get("skip") or 0), int(cmd.get("limit") or 0)
        n = coll.count(cmd.get("query"))
        if n is None:
            n = len(coll.select(cmd.get("query"), None, limit, skip)) + skip
        n = max(0, n - skip)
        return {"n": min(n, limit) if limit else n}

    def _distinct(self, db: str, cmd: dict[str, Any]) -> dict[str, Any]:
        coll = self.collection(db, cmd, create=False)
        values: dict[Any, Any] = {}
        for doc in coll.select(cmd.get("query")):
            value = q.get_path(doc, cmd["key"])
            for v in value if isinstance(value, list) else [value]:
                if v is not q.MISSING:
                    values.setdefault(hkey(v), v)
        return {"values": list(values.values())}

    def _aggregate(self, db: str, cmd: dict[str, Any]) -> dict[str, Any]:
        coll = self.collection(db, cmd, create=False)
        pipeline = list(cmd.get("pipeline") or [])
        first = pipeline[0] if pipeline else {}
        if "$changeStream" in first:  # as a standalone server answers
            raise CommandFailed(
                40573, "The $changeStream stage is only supported on replica sets", "Location40573"
            )
        source = coll.select(first["$match"]) if "$match" in first else list(coll.docs.values())
        docs = q.aggregate(source, pipeline[1:] if "$match" in first else pipeline)
        return self._cursor(coll.ns, docs, (cmd.get("cursor") or {}).get("batchSize"))

    # Indexes -------------------------------------------------------------------------------------
    def _createIndexes(self, db: str, cmd: dict[str, Any]) -> dict[str, Any]:
        existed = self._exists(db, cmd["createIndexes"])
        coll = self.collection(db, cmd)
        before = len(coll.indexes)
        for spec in cmd.get("indexes", []):
            coll.add_index(spec)
        return {
            "createdCollectionAutomatically": not existed,
            "numIndexesBefore": before,
            "numIndexesAfter": len(coll.indexes),
        }

    def _listIndexes(self, db: str, cmd: dict[str, Any]) -> dict[str, Any]:
        if not self._exists(db, cmd["listIndexes"]):
            raise CommandFailed(26, "ns does not exist", "NamespaceNotFound")
        coll = self.collection(db, cmd)
        docs = [{"name": name, **spec} for name, spec in coll.indexes.items()]
        return self._cursor(coll.ns, docs, None)

    def _dropIndexes(self, db: str, cmd: dict[str, Any]) -> dict[str, Any]:
        coll = self.collection(db, cmd)
        index = cmd.get("index")
        names = [n for n in coll.indexes if n != "_id_"] if index == "*" else [index]
        for name in names:
            if isinstance(name, dict):
                name = next((n for n, s in coll.indexes.items() if s["key"] == name), None)
            if name not in coll.indexes:
                raise CommandFailed(27, f"index not found with name [{name}]", "IndexNotFound")
            del coll.indexes[name]
            coll.unique.pop(name, None)
        return {}

    # Writes -----------------------------------------------------------------------------------------
    def _insert(self, db: str, cmd: dict[str, Any]) -> dict[str, Any]:
        coll = self.collection(db, cmd)
        n, errors = 0, []
        for i, doc in enumerate(cmd.get("documents", [])):
            try:
                coll.insert(doc)
                n += 1
            except CommandFailed as exc:
                errors.append({"index": i, "code": exc.code, "errmsg": exc.message})
                if cmd.get("ordered", True):
                    break
        return {"n": n, **({"writeErrors": errors} if errors else {})}

    def _update_one(
        self, coll: Collection, query: Mapping[str, Any], update: Any, upsert: bool, multi: bool
    ) -> tuple[int, int, Any]:
        """Apply one update statement: (matched, modified, upserted id or None)."""
        if isinstance(update, list):
            raise CommandFailed(115, "pipeline updates are not supported here")
        now = dt.datetime.now(dt.timezone.utc)
        targets = coll.select(query, None, 0 if multi else 1)
        modified = 0
        for doc in targets:
            new = q.apply_update(doc, update, inserting=False, now=now)
            if new != doc:
                coll.write(hkey(doc["_id"]), doc, new)
                modified += 1
        if targets or not upsert:
            return len(targets), modified, None
        new = q.apply_update(q.upsert_seed(query), update, inserting=True, now=now)
        if "_id" not in new:
            new = {"_id": ObjectId(), **new}
        coll.insert(new)
        return 0, 0, new["_id"]

    def _update(self, db: str, cmd: dict[str, Any]) -> dict[str, Any]:
        coll = self.collection(db, cmd)
        n = modified = 0
        upserted, errors = [], []
        for i, spec in enumerate(cmd.get("updates", [])):
            try:
                matched, changed, new_id = self._update_one(
                    coll,
                    spec.get("q") or {},
                    spec.get("u"),
                    bool(spec.get("upsert")),
                    bool(spec.get("multi")),
                )
            except (CommandFailed, q.QueryError) as exc:
                code, message = (
                    (exc.code, exc.message) if isinstance(exc, CommandFailed) else (2, str(exc))
                )
                errors.append({"index": i, "code": code, "errmsg": message})
                if cmd.get("ordered", True):
                    break
                continue
            if new_id is not None:
                n += 1
                upserted.append({"index": i, "_id": new_id})
            n, modified = n + matched, modified + changed
        reply: dict[str, Any] = {"n": n, "nModified": modified}
        if upserted:
            reply["upserted"] = upserted
        if errors:
            reply["writeErrors"] = errors
        return reply

    def _delete(self, db: str, cmd: dict[str, Any]) -> dict[str, Any]:
        coll = self.collection(db, cmd)
        n = 0
        for spec in cmd.get("deletes", []):
            for doc in coll.select(spec.get("q") or {}, None, int(spec.get("limit", 0))):
                coll.write(hkey(doc["_id"]), doc, None)
                n += 1
        return {"n": n}

    def _findAndModify(self, db: str, cmd: dict[str, Any]) -> dict[str, Any]:
        coll = self.collection(db, cmd)
        query = cmd.get("query") or {}
        update, remove = cmd.get("update"), bool(cmd.get("remove"))
        if remove == (update is not None):
            raise CommandFailed(9, "Either an update or remove=true must be specified")
        found = coll.select(query, list((cmd.get("sort") or {}).items()) or None, 1)
        fields = cmd.get("fields")
        if found:
            before = found[0]
            if remove:
                coll.write(hkey(before["_id"]), before, None)
                return {"lastErrorObject": {"n": 1}, "value": q.project(before, fields)}
            now = dt.datetime.now(dt.timezone.utc)
            after = q.apply_update(before, update, inserting=False, now=now)
            coll.write(hkey(before["_id"]), before, after)
            value = after if cmd.get("new") else before
            return {
                "lastErrorObject": {"n": 1, "updatedExisting": True},
                "value": q.project(value, fields),
            }
        if remove or not cmd.get("upsert"):
            return {"lastErrorObject": {"n": 0, "updatedExisting": False}, "value": None}
        _, _, new_id = self._update_one(coll, query, update, True, False)
        value = coll.docs.get(hkey(new_id)) if cmd.get("new") else None
        return {
            "lastErrorObject": {"n": 1, "updatedExisting": False, "upserted": new_id},
            "value": None if value is None else q.project(value, fields),
        }


# The wire protocol ------------------------------------------------------------------------------------
def _parse_msg(body: bytes) -> tuple[int, dict[str, Any]]:
    """OP_MSG: flags, a body section (kind 0) and document sequences (kind 1)."""
    (flags,) = struct.unpack_from("<I", body)
    end = len(body) - (4 if flags & 1 else 0)
    pos, command = 4, {}
    while pos < end:
        kind = body[pos]
        pos += 1
        (size,) = struct.unpack_from("<i", body, pos)
        if kind == 0:
            command.update(bson.decode(body[pos : pos + size]))
        else:
            name_end = body.index(b"\x00", pos + 4)
            name = body[pos + 4 : name_end].decode()
            command[name] = bson.decode_all(body[name_end + 1 : pos + size])
        pos += size
    return flags, command


class StubServer:
    """Serves :class:`Engine` on ``host:port`` (0: a free port) from one thread, with a
    selector over the connections: no thread per connection, so no thread of the
    server waits for the GIL behind another (each switch would cost up to 5 ms)."""

    def __init__(self, port: int = 0, host: str = "127.0.0.1") -> None:
        self.engine = Engine()
        self.listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.listener.bind((host, port))
        self.listener.listen(256)
        self.host, self.port = self.listener.getsockname()
        self._buffers: dict[socket.socket, bytearray] = {}
        self._closed = False

    def uri(self) -> str:
        return f"mongodb://{self.host}:{self.port}/"

    def start(self) -> StubServer:
        threading.Thread(target=self.serve_forever, name="stub-server", daemon=True).start()
        return self

    def close(self) -> None:
        self._closed = True

    def serve_forever(self) -> None:
        selector = selectors.DefaultSelector()
        selector.register(self.listener, selectors.EVENT_READ)
        try:
            while not self._closed:
                for key, _ in selector.select(0.5):
                    sock = key.fileobj
                    assert isinstance(sock, socket.socket)
                    if sock is self.listener:
                        conn, _ = self.listener.accept()
                        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                        self._buffers[conn] = bytearray()
                        selector.register(conn, selectors.EVENT_READ)
                    elif not self._receive(sock):
                        selector.unregister(sock)
                        self._buffers.pop(sock, None)
                        sock.close()
        finally:
            selector.close()
            self.listener.close()

    def _receive(self, conn: socket.socket) -> bool:
        """Read what arrived and answer every complete message; False when closed."""
        try:
            data = conn.recv(1 << 20)
        except OSError:
            return False
        if not data:
            return False
        buffer = self._buffers[conn]
        buffer += data
        while len(buffer) >= 16:
            length, request_id, _, opcode = HEADER.unpack_from(buffer)
            if len(buffer) < length:
                break
            body = bytes(buffer[16:length])
            del buffer[:length]
            try:
                reply = self._answer(request_id, opcode, body)
                if reply:
                    conn.sendall(reply)
            except (OSError, ValueError, struct.error, bson.errors.BSONError):
                return False
        return True

    def _answer(self, request_id: int, opcode: int, body: bytes) -> bytes:
        if opcode == OP_MSG:
            flags, command = _parse_msg(body)
            reply = self.engine.execute(command.get("$db", "admin"), command)
            if flags & 2:  # moreToCome: an unacknowledged write, no reply
                return b""
            payload = struct.pack("<IB", 0, 0) + bson.encode(reply)
        elif opcode == OP_QUERY:  # the first handshake of some drivers
            name_end = body.index(b"\x00", 4)
            namespace = body[4:name_end].decode()
            command = bson.decode_all(body[name_end + 9 :])[0]
            command = command.get("$query", command)
            reply = self.engine.execute(namespace.split(".")[0], command)
            payload = struct.pack("<iqii", 0, 0, 0, 1) + bson.encode(reply)
            opcode = OP_REPLY
        else:
            raise ValueError(f"unsupported opcode {opcode}")
        return HEADER.pack(16 + len(payload), 0, request_id, opcode) + payload


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=0)
    options = parser.parse_args()
    server = StubServer(options.port)
    print(server.uri(), flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        server.close()


if __name__ == "__main__":
    main()
