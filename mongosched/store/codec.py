"""BSON for every store: what a payload, a result or an error may hold.

Both stores keep exactly what MongoDB keeps (the in-memory store round-trips values
through BSON too), so a payload that works in tests works in production. mongosched
never pickles.
"""

from __future__ import annotations

import os
import random
from collections.abc import Mapping, Sequence
from decimal import Decimal
from typing import Any

import bson
from bson import Decimal128, ObjectId
from bson.binary import UuidRepresentation
from bson.codec_options import CodecOptions, TypeCodec, TypeRegistry
from bson.errors import InvalidId

from mongosched._core import validate
from mongosched._core.records import SCHEDULE_ID_PREFIX, is_schedule_id, schedule_id
from mongosched.errors import ConfigurationError, InvalidJobId, ResultTooLarge, SerializationError

__all__ = [
    "CODEC_OPTIONS",
    "MAX_DOCUMENT_BYTES",
    "MAX_PAYLOAD_BYTES",
    "MAX_VALUE_BYTES",
    "OUTCOME_ROOM",
    "decode",
    "encode_payload",
    "encode_value",
    "is_schedule_id",
    "new_id",
    "new_token",
    "parse_id",
    "schedule_id",
]


class DecimalCodec(TypeCodec):
    """``decimal.Decimal`` stored as BSON Decimal128, read back as ``Decimal``."""

    python_type = Decimal
    bson_type = Decimal128

    def transform_python(self, value: Any) -> Decimal128:
        return Decimal128(value)

    def transform_bson(self, value: Any) -> Decimal:
        return value.to_decimal()  # type: ignore[no-any-return]


CODEC_OPTIONS: CodecOptions[Any] = CodecOptions(
    tz_aware=True,
    uuid_representation=UuidRepresentation.STANDARD,
    type_registry=TypeRegistry([DecimalCodec()]),
)
"""What every store reads and writes with: aware UTC datetimes, UUIDs in the standard
representation, ``Decimal`` as Decimal128 (round-tripping to the same types). BSON has no
tuples: a payload holding one is refused (it would reach the task as a list); a result's
tuples are read back as lists."""
MAX_DOCUMENT_BYTES = 16 * 1024 * 1024
"""The largest document MongoDB stores: a job's, with its payload and its outcome."""
MAX_VALUE_BYTES = 1024 * 1024
"""Largest result a job keeps (1 MiB as BSON): a result is a summary, not a data store."""
OUTCOME_ROOM = 1024 * 1024
"""What a job's document keeps free, beside its payload and its result, for what else a
run writes with its outcome, each part bounded where it is made: the log records kept
(``observe.logs.MAX_RECORDS`` and ``MAX_BYTES``), the error (``outcome.MAX_MESSAGE`` and
``MAX_TRACEBACK`` characters), the progress message (64 Ki characters), the attempts'
history, and the job's own fields. So an outcome write always fits, and a run never
loses its result to the size of its document."""
MAX_PAYLOAD_BYTES = MAX_DOCUMENT_BYTES - MAX_VALUE_BYTES - OUTCOME_ROOM
"""Largest payload a job takes (14 MiB as BSON): the rest of its document is for its
outcome."""

HINT = (
    "pass ids and plain data (str, int, float, bool, None, datetime, UUID, Decimal, bytes, "
    "list, dict); a date as a datetime or its isoformat()"
)


def encode_payload(task: str, args: Sequence[Any], kwargs: Mapping[str, Any]) -> bytes:
    """The payload as BSON, or :class:`SerializationError` naming the argument at fault
    (a tuple too: BSON would keep it as a list, so the task would get another type)."""
    named = [
        *((f"argument {i}", v) for i, v in enumerate(args)),
        *((f"keyword argument {k!r}", v) for k, v in kwargs.items()),
    ]
    for what, value in named:
        try:
            where = _tuple_in(value)
        except Exception as exc:  # a value too deep to walk, a mapping that raises
            raise _unencodable(task, what, value, exc) from None
        if where is not None:
            path = "".join(f"[{key!r}]" for key in reversed(where))
            raise SerializationError(
                f"task {task!r}: {what} holds a tuple{path}; it would come back as a list "
                "(BSON has no tuples): pass a list"
            )
    try:
        data = bson.encode(
            {"args": list(args), "kwargs": dict(kwargs)}, codec_options=CODEC_OPTIONS
        )
    except Exception as exc:
        for key in kwargs:
            if not isinstance(key, str):
                raise SerializationError(
                    f"task {task!r}: keyword argument names must be str, not {key!r}"
                ) from None
        for what, value in named:
            encode_value(task, what, value)
        raise _unencodable(task, "payload", {"args": args, "kwargs": kwargs}, exc) from None
    if len(data) > MAX_PAYLOAD_BYTES:
        raise SerializationError(
            f"task {task!r}: payload is {len(data)} bytes; the limit is {MAX_PAYLOAD_BYTES}"
        )
    return data


def _tuple_in(value: Any) -> list[Any] | None:
    """Where in ``value`` a tuple is, as the keys leading to it from the innermost
    (``[]``: the value itself), or None."""
    if isinstance(value, tuple):
        return []
    if isinstance(value, list):
        items: Any = enumerate(value)
    elif isinstance(value, dict):
        items = value.items()
    else:
        return None
    for key, item in items:
        found = _tuple_in(item)
        if found is not None:
            found.append(key)
            return found
    return None


def encode_value(task: str, what: str, value: Any, limit: int = MAX_VALUE_BYTES) -> bytes:
    """``{"v": value}`` as BSON, or :class:`SerializationError` naming ``what`` (also
    when it is larger than ``limit`` bytes: :class:`ResultTooLarge`)."""
    try:
        data = bson.encode({"v": value}, codec_options=CODEC_OPTIONS)
    except Exception as exc:
        raise _unencodable(task, what, value, exc) from None
    if len(data) > limit:
        raise ResultTooLarge(
            f"task {task!r}: {what} is {len(data):,} bytes as BSON; the limit is {limit:,} "
            "(store large results elsewhere and return a reference)"
        )
    return data


def _unencodable(task: str, what: str, value: Any, exc: Exception) -> SerializationError:
    """The error for a value whose encoding raised ``exc``, whatever ``exc`` is: a type
    BSON has no form for, a value nested deeper than Python recurses
    (``RecursionError``), a string UTF-8 cannot hold, or the value's own code failing
    (a mapping whose ``__getitem__`` raises). Every encoding of a user's value in this
    module ends here, so no such failure leaves the codec as anything else."""
    return SerializationError(
        f"task {task!r}: {what} is not BSON-encodable ({type(value).__name__}; "
        f"{type(exc).__name__}: {_said(exc)}); {HINT}"
    )


def _said(exc: Exception) -> str:
    """What ``exc`` says, at most 300 characters (its text may repeat the value)."""
    try:
        text = str(exc)
    except Exception:  # an exception whose __str__ raises
        text = "?"
    return text if len(text) <= 300 else f"{text[:300]}..."


def decode(data: bytes) -> dict[str, Any]:
    return bson.decode(data, codec_options=CODEC_OPTIONS)


def new_id() -> ObjectId:
    """A fresh job id, made on the client before the insert."""
    return ObjectId()


_tokens = random.Random(os.urandom(32))


def _reseed_tokens() -> None:
    _tokens.seed(os.urandom(32))  # a forked child must not repeat its parent's tokens


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_reseed_tokens)


def new_token() -> str:
    """A fresh lease token or write id: 128 random bits as 32 hex digits, as unique as
    a UUID4's, without a system call each (a generator seeded from the system's
    randomness, reseeded in a forked child). Tokens fence writes; they are not
    secrets."""
    return f"{_tokens.getrandbits(128):032x}"


def parse_id(value: Any) -> Any:
    """A job id from what a user passed: an ObjectId, its 24-digit hex string, or the
    string id of a declared schedule (``schedule:<task>``). Anything else, an operator
    document above all, raises :class:`InvalidJobId` and never reaches a query."""
    if isinstance(value, ObjectId):
        return value
    if isinstance(value, str) and value:
        if len(value) == 24:
            try:
                return ObjectId(value)
            except InvalidId:
                pass
        if value.startswith(SCHEDULE_ID_PREFIX):
            try:
                return validate.text(value, what="a schedule's id", maximum=1024)
            except ConfigurationError:
                pass
    raise InvalidJobId(f"{value!r} is not a job id (an ObjectId or its 24-digit hex string)")
