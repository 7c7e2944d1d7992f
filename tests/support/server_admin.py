"""Commands of the wire-protocol test server (tests/support/server.py) that are not
about documents: the handshake, databases, collections and indexes; and the error a
command replies with. A mixin of the server's ``Engine``."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timezone
from typing import Any

__all__ = ["AdminCommands", "CommandError"]

MAX_WIRE_VERSION = 17  # MongoDB 6.0; pymongo 4.20 needs 8 (4.2) or higher
MAX_BSON = 16 * 1024 * 1024


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


class AdminCommands:
    """The engine's handshake, admin and index commands (``self.client``: mongomock)."""

    client: Any
    streams: Any

    def _collection(self, db: str, cmd: Mapping[str, Any]) -> Any:
        raise NotImplementedError

    def _cursor_reply(
        self, ns: str, docs: list[dict[str, Any]], batch_size: int | None, single: bool = False
    ) -> dict[str, Any]:
        raise NotImplementedError

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
            **self.streams.hello(),
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
