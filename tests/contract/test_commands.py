"""The commands a batched claim sends as they are (``store/mongo/commands.py``): what they
carry, and what the store makes of the replies a server may give (a write concern not
met, a statement refused, a command too large, a batch cut short). On SecantusDB, the
wire stand-in and (with ``MONGOSCHED_TEST_URI``) a real MongoDB."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from decimal import Decimal
from typing import Any

import pytest
from bson.codec_options import TypeDecoder, TypeEncoder
from pymongo.errors import DocumentTooLarge

from mongosched._core.records import JobStatus
from mongosched.store.mongo import MongoStore, commands
from mongosched.store.mongo.documents import CLAIM_SORT

from .helpers import LATER, add, as_stored, batch, job, sec, settle_and_claim, succeeded

Send = Callable[[dict[str, Any]], Any]
"""Sends a command (as the store built it, or changed) and returns the reply."""


class _Sending:
    """The store's jobs collection, whose database hands every command to ``hook(command,
    send)``; the commands sent are kept in ``sent``."""

    def __init__(self, collection: Any, hook: Callable[[dict[str, Any], Send], Any]) -> None:
        self.collection = collection
        self.hook = hook
        self.sent: list[dict[str, Any]] = []

    @property
    def database(self) -> Any:
        sending, database = self, self.collection.database

        class Commands:
            def command(self, command: dict[str, Any], **options: Any) -> Any:
                def send(changed: dict[str, Any]) -> Any:
                    sending.sent.append(changed)
                    return database.command(changed, **options)

                return sending.hook(dict(command), send)

            def __getattr__(self, name: str) -> Any:
                return getattr(database, name)

        return Commands()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.collection, name)


@contextmanager
def sending(
    store: MongoStore, hook: Callable[[dict[str, Any], Send], Any] | None = None
) -> Iterator[_Sending]:
    original = store.connection.jobs
    wrapper = _Sending(original, hook or (lambda command, send: send(command)))
    store.connection.jobs = wrapper
    try:
        yield wrapper
    finally:
        store.connection.jobs = original


def names(wrapper: _Sending) -> list[str]:
    return [next(iter(command)) for command in wrapper.sent]


def test_the_commands_carry_the_claim_and_the_write_concern(mongo_store: MongoStore) -> None:
    """The candidates: the claim filter, its sort and limit, one batch, no read concern
    (the server's default); the claims: one unordered update of one statement per
    candidate, under the store's write concern (``majority``)."""
    add(mongo_store, *[job(args=(n,)) for n in range(5)])
    with sending(mongo_store) as sent:
        got = batch(mongo_store, 4)
    find, update = sent.sent
    assert names(sent) == ["find", "update"]
    assert find["find"] == update["update"] == mongo_store.connection.jobs.name
    assert find["limit"] == 4 and find["singleBatch"] is True and "readConcern" not in find
    assert list(find["sort"].items()) == list(CLAIM_SORT)
    assert find["filter"]["status"] == "pending"
    assert update["ordered"] is False and update["writeConcern"] == {"w": "majority"}
    assert [s["q"]["_id"] for s in update["updates"]] == [r.id for r in got]


def test_no_write_concern_is_sent_when_the_store_leaves_it_to_the_server(
    mongo_store: MongoStore,
) -> None:
    add(mongo_store, *[job(args=(n,)) for n in range(3)])
    store = MongoStore(
        database=mongo_store.connection.database,
        collection=mongo_store.connection.collection_name,
        write_concern=None,
    )
    with sending(store) as sent:
        assert len(batch(store, 4)) == 3
    assert names(sent) == ["find", "update"] and "writeConcern" not in sent.sent[1]


def test_a_batch_reads_uuids_and_decimals_as_themselves(mongo_store: MongoStore) -> None:
    """The candidates are decoded with the store's codec, its type decoders included
    (``Database.command`` alone would give a Decimal128)."""
    ident, amount = uuid.uuid4(), Decimal("12.3400")
    add(mongo_store, *[job(args=(ident,), kwargs={"amount": amount}) for _ in range(3)])
    got = batch(mongo_store, 3)
    assert len(got) == 3
    for record in got:
        assert record.args == (ident,) and isinstance(record.args[0], uuid.UUID)
        assert isinstance(record.kwargs["amount"], Decimal) and record.kwargs["amount"] == amount
        assert record == mongo_store.jobs.get(record.id)


def test_commands_keep_the_type_encoders_and_read_replies_without_decoders(
    mongo_store: MongoStore,
) -> None:
    """A statement holding a Decimal is encoded with the store's codec (stored as
    Decimal128, read back as a Decimal); the replies are read without the type decoders
    (pymongo would make new codec options for every reply read with them), with
    options made once."""
    jobs = mongo_store.connection.jobs
    (stored,) = add(mongo_store, job())
    amount = Decimal("1.50")
    updated = commands.update(jobs, [{"q": {"_id": stored.id}, "u": {"$set": {"x": amount}}}])
    assert updated.matched == 1 and not updated.errors
    assert jobs.find_one({"_id": stored.id})["x"] == amount
    wire = commands._wire(jobs.codec_options)
    assert wire is commands._wire(jobs.codec_options)
    for options in (wire.plain, wire.raw):
        codecs = options.type_registry.codecs
        assert codecs and all(isinstance(c, TypeEncoder) for c in codecs)
        assert not any(isinstance(c, TypeDecoder) for c in codecs)
        assert (
            options.tz_aware
            and options.uuid_representation == jobs.codec_options.uuid_representation
        )


def _unmet(command: dict[str, Any], send: Send) -> Any:
    """``command`` sent; an update's reply says its write concern was not met."""
    reply = send(command)
    if "update" in command:
        reply["writeConcernError"] = {"code": 64, "errmsg": "waiting for replication"}
    return reply


def test_a_write_concern_error_counts_as_a_miss(mongo_store: MongoStore) -> None:
    """A reply saying the write concern was not met: what landed is not known, so it is
    read back (the claims that did land are returned, as stored)."""

    add(mongo_store, *[job(args=(n,)) for n in range(4)])
    with sending(mongo_store, _unmet) as sent:
        got = batch(mongo_store, 4)
    assert names(sent) == ["find", "update", "find"]
    as_stored(mongo_store, got, (0,), (1,), (2,), (3,))


def test_a_refused_claim_is_logged_and_the_others_land(
    mongo_store: MongoStore, caplog: pytest.LogCaptureFixture
) -> None:
    """A write error refuses one statement of the unordered update, not the others: the
    refused job stays pending (logged), the others are claimed and read back."""

    def refuse_second(command: dict[str, Any], send: Send) -> Any:
        if "update" not in command:
            return send(command)
        statements = command["updates"]
        reply = send({**command, "updates": statements[:1] + statements[2:]})
        reply["writeErrors"] = [{"index": 1, "code": 2, "errmsg": "refused"}]
        return reply

    jobs = add(mongo_store, *[job(args=(n,)) for n in range(3)])
    with caplog.at_level(logging.WARNING, "mongosched"), sending(mongo_store, refuse_second) as s:
        got = batch(mongo_store, 3)
    assert names(s) == ["find", "update", "find"]
    assert [r.id for r in got] == [jobs[0].id, jobs[2].id]
    assert f"claim of job {jobs[1].id} refused" in caplog.text
    assert mongo_store.jobs.get(jobs[1].id).status is JobStatus.PENDING  # type: ignore[union-attr]


def test_statements_too_large_for_one_command_are_sent_in_several(
    mongo_store: MongoStore, caplog: pytest.LogCaptureFixture
) -> None:
    """A command holds 16 MiB (large results): the driver refuses a larger one before
    sending it, and the statements go in halves, each command on its own; a write error
    names its statement in the whole (here the last claim's)."""

    def small(command: dict[str, Any], send: Send) -> Any:
        if "update" not in command:
            return send(command)
        statements = command["updates"]
        if len(statements) > 2:
            raise DocumentTooLarge("command document too large")
        if statements[-1]["q"]["_id"] != last:
            return send(command)
        reply = send({**command, "updates": statements[:-1]})
        reply["writeErrors"] = [{"index": len(statements) - 1, "code": 2, "errmsg": "refused"}]
        return reply

    jobs = add(mongo_store, *[job(args=(n,)) for n in range(7)])
    last = jobs[-1].id
    finished = batch(mongo_store, 3)
    outcomes = [(r, succeeded(r, LATER + sec(1), result=n)) for n, r in enumerate(finished)]
    with caplog.at_level(logging.WARNING, "mongosched"), sending(mongo_store, small) as sent:
        settled, got = settle_and_claim(mongo_store, outcomes, 4, now=LATER + sec(1))
    sizes = [len(c["updates"]) for c in sent.sent if "update" in c]
    assert sizes == [1, 2, 2, 1]  # 7 = (1 + 2) + (2 + 2), the refused statement not sent
    assert names(sent)[-1] == "find"  # one refused: read back
    assert [r.args for r in got] == [(3,), (4,), (5,)]
    assert f"claim of job {last} refused" in caplog.text
    for record in [*settled, *got]:
        assert record == mongo_store.jobs.get(record.id)  # type: ignore[union-attr]
    assert [r.result for r in settled] == [0, 1, 2]  # type: ignore[union-attr]


def test_a_read_back_cut_short_reads_the_rest(mongo_store: MongoStore) -> None:
    """A batch holds 16 MiB: a read back that came back short (large jobs) reads the
    jobs it lacks with a cursor, so no claim that landed is taken for one that did not."""

    def short(command: dict[str, Any], send: Send) -> Any:
        if "find" in command and "_id" in command["filter"]:
            ids = command["filter"]["_id"]["$in"]
            return send({**command, "filter": {"_id": {"$in": ids[:-1]}}})
        return _unmet(command, send)

    add(mongo_store, *[job(args=(n,)) for n in range(4)])
    with sending(mongo_store, short) as sent:
        got = batch(mongo_store, 4)
    assert names(sent) == ["find", "update", "find"]  # and the rest through the collection
    as_stored(mongo_store, got, (0,), (1,), (2,), (3,))
