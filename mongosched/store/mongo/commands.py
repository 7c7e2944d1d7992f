"""Two commands sent to the server as they are, for the batched claim
(:mod:`~mongosched.store.mongo.claims`): a ``find`` of one batch, and an ``update`` of
many statements.

``collection.find`` and ``collection.bulk_write`` send the same commands, but build a
cursor, a bulk operation and a result object around them: about a third of the
client's CPU per call, which a runner with a backlog pays for every batch of jobs it
claims. These send the command document with
:meth:`~pymongo.database.Database.command` instead and honour what the collection
methods would:

* the collection's codec options (the statements are encoded with them, the
  documents found decoded with them, its type decoders included);
* the primary (``command`` does not follow a read preference; the job collection reads
  from the primary anyway);
* its read concern (``readConcern``) for a find, its write concern (``writeConcern``)
  for an update, each sent unless it is the server's default.

Both send their command with the collection's type encoders but read the reply
without its type decoders (:func:`_wire`): pymongo builds a new set of codec options
for every reply it reads with decoders, a large share of what a command costs the
client, and neither reply needs them (a find's is kept raw and decoded afterwards
with the collection's own).

Driver errors are left to the caller (``MongoConnection.retrying``). Neither command
is retried by the driver: a network error reaches the caller, who repeats it; an
update must therefore be safe to repeat (fenced: one that landed no longer matches).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import bson
from bson.codec_options import CodecOptions, TypeEncoder, TypeRegistry
from bson.raw_bson import RawBSONDocument
from pymongo import ReadPreference
from pymongo.errors import DocumentTooLarge

__all__ = ["Updated", "find_batch", "update"]


def find_batch(
    collection: Any,
    filter: Mapping[str, Any],
    *,
    sort: Sequence[tuple[str, int]] = (),
    limit: int = 0,
) -> list[dict[str, Any]]:
    """The documents of ``collection`` matching ``filter`` in ``sort`` order, up to
    ``limit`` (0: no limit), in one round trip: the server's first batch, its cursor
    closed (``singleBatch``). A batch holds at most 16 MiB: when the documents found
    are larger, it holds fewer than ``limit`` (those first in order)."""
    command: dict[str, Any] = {"find": collection.name, "filter": filter}
    if sort:
        command["sort"] = dict(sort)
    if limit:
        command["limit"] = limit
    command["singleBatch"] = True
    read_concern = collection.read_concern.document
    if read_concern:
        command["readConcern"] = read_concern
    # The reply stays raw, then is decoded whole with the collection's own options:
    # Database.command decodes without the type decoders (Decimal128, not Decimal).
    options = collection.codec_options
    reply = collection.database.command(
        command, read_preference=ReadPreference.PRIMARY, codec_options=_wire(options).raw
    )
    batch: list[dict[str, Any]] = bson.decode(reply.raw, codec_options=options)["cursor"][
        "firstBatch"
    ]
    return batch


class _EncodeOnly(TypeEncoder):
    """The encoding half of a type codec."""

    def __init__(self, codec: TypeEncoder) -> None:
        self.codec = codec

    @property
    def python_type(self) -> Any:
        return self.codec.python_type

    def transform_python(self, value: Any) -> Any:
        return self.codec.transform_python(value)


@dataclass(frozen=True)
class _Wire:
    """Codec options for a command and its reply (see the module)."""

    plain: CodecOptions[Any]
    """The collection's, its type registry holding only the encoders."""
    raw: CodecOptions[Any]
    """The same, its documents read raw."""


def _wire(options: CodecOptions[Any]) -> _Wire:
    """:class:`_Wire` options for a collection's ``options`` (made once: making codec
    options validates every option anew)."""
    global _last
    if _last is None or _last[0] is not options:
        registry = options.type_registry
        encoders = [
            _EncodeOnly(codec) for codec in registry.codecs if isinstance(codec, TypeEncoder)
        ]
        plain = options.with_options(
            type_registry=TypeRegistry(encoders, fallback_encoder=registry.fallback_encoder)
        )
        _last = (options, _Wire(plain, plain.with_options(document_class=RawBSONDocument)))
    return _last[1]


_last: tuple[CodecOptions[Any], _Wire] | None = None
"""The collection options last given to :func:`_wire`, and what it made of them."""


@dataclass
class Updated:
    """What an :func:`update` did."""

    matched: int = 0
    """How many statements' filters matched a document (``n``)."""
    errors: list[dict[str, Any]] = field(default_factory=list)
    """The write errors (``writeErrors``): each with the ``index`` of its statement,
    its ``code`` and ``errmsg``; the other statements were applied."""
    unknown: bool = False
    """Whether what landed is not known for sure: the write concern was not satisfied
    (``writeConcernError``) or asks for no acknowledgement."""


def update(collection: Any, statements: Sequence[Mapping[str, Any]]) -> Updated:
    """Apply ``statements`` (``{"q": filter, "u": update}`` each) to ``collection`` in
    one unordered ``update`` command: one round trip. A command may hold 16 MiB: more
    statements than that are sent in as many commands as they need."""
    concern = collection.write_concern
    command: dict[str, Any] = {"update": collection.name, "updates": statements, "ordered": False}
    if not concern.is_server_default:
        command["writeConcern"] = concern.document
    try:
        reply = collection.database.command(
            command,
            read_preference=ReadPreference.PRIMARY,
            codec_options=_wire(collection.codec_options).plain,
        )
    except DocumentTooLarge:  # raised before anything is sent
        if len(statements) < 2:
            raise
        half = len(statements) // 2
        first, second = update(collection, statements[:half]), update(collection, statements[half:])
        errors = first.errors + [{**e, "index": e["index"] + half} for e in second.errors]
        unknown = first.unknown or second.unknown
        return Updated(first.matched + second.matched, errors, unknown)
    return Updated(
        matched=int(reply.get("n", 0)),
        errors=list(reply.get("writeErrors") or ()),
        unknown=not concern.acknowledged or "writeConcernError" in reply,
    )
