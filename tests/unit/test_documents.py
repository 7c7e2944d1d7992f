"""Job documents read into records (:func:`mongosched.store.mongo.documents.to_record`), and
the claim updates a batched claim sends."""

from __future__ import annotations

import logging
from dataclasses import fields, replace
from datetime import datetime, timezone

import bson
import pytest
from bson import ObjectId, tz_util
from bson.raw_bson import RawBSONDocument

from mongosched._core import outcome
from mongosched._core.records import (
    ATTEMPTS_KEPT,
    ERRORS_KEPT,
    AttemptError,
    AttemptRecord,
    JobRecord,
    JobStatus,
    LeaseInfo,
    evolved,
    schedule_id,
)
from mongosched._core.transitions import claim_lease, claimed, claimed_under, ms
from mongosched._core.validate import MAX_TEXT
from mongosched.errors import MalformedJob
from mongosched.observe import logs
from mongosched.store.codec import (
    CODEC_OPTIONS,
    MAX_DOCUMENT_BYTES,
    MAX_PAYLOAD_BYTES,
    MAX_VALUE_BYTES,
    new_token,
)
from mongosched.store.mongo.documents import (
    attempt_document,
    attempt_error_document,
    error_document,
    logs_document,
    to_document,
    to_record,
)
from mongosched.store.mongo.updates import claim_update, claim_updates

T0 = datetime(2026, 1, 1, tzinfo=timezone.utc)


def test_a_document_without_optional_fields_reads_as_the_records_defaults() -> None:
    doc = {"_id": 1, "task": "t", "status": "pending", "run_at": T0.replace(tzinfo=None)}
    record = to_record(doc)
    assert record == JobRecord(task="t", run_at=T0, created_at=None, updated_at=None, id=1)  # type: ignore[arg-type]


def test_a_written_record_reads_back_the_same() -> None:
    record = JobRecord(
        task="t",
        run_at=T0,
        created_at=T0,
        updated_at=T0,
        id=ObjectId(),
        args=(1, "a"),
        kwargs={"k": 1},
        queue="q",
        priority=2,
        attempts=1,
        max_attempts=3,
        dedupe_key="d",
        dedupe_scope="active",
        depends_on=(1,),
        label="l",
        fair_key="f",
        fair_weight=2.0,
    )
    doc = to_document(record)
    read = to_record(doc)
    assert read == record
    assert read.kwargs is not doc["kwargs"]  # its own dict: the document is not shared


def test_optional_fields_present_are_read_and_a_scope_needs_its_key() -> None:
    naive = T0.replace(tzinfo=None)
    doc = {
        "_id": 1,
        "task": "t",
        "status": "running",
        "run_at": naive,
        "lease": {"owner": "o", "token": "x", "until": naive, "heartbeat_at": naive},
        "dedupe_scope": "active",  # without a key: none
        "expire_at": naive,
        "on_dependency_failure": None,
        "waiting_for": [2],
        "not_a_field": 1,
    }
    record = to_record(doc)
    assert record.status is JobStatus.RUNNING
    assert record.lease == LeaseInfo(owner="o", token="x", until=T0, heartbeat_at=T0)
    assert record.dedupe_scope is None
    assert record.delete_at == T0
    assert record.on_dependency_failure == "cancel"
    assert record.waiting_for == (2,)
    assert {f.name for f in fields(JobRecord)} == record.__dict__.keys()


def _claimed(**fields: object) -> dict[str, object]:
    doc = to_document(JobRecord(task="t", run_at=T0, created_at=T0, updated_at=T0, id=1))  # type: ignore[arg-type]
    doc.update(status="running", lease={"owner": "o", "token": "x", "until": T0})
    doc.update(fields)
    return doc


class Name(str):
    """A str of another type, as a custom document class might hold."""


@pytest.mark.parametrize(
    ("field", "value"),
    [("priority", True), ("attempts", 1.5), ("task", None), ("run_at", "2026-01-01")],
)
def test_a_claimed_field_of_a_wrong_type_is_malformed_naming_it(field: str, value: object) -> None:
    with pytest.raises(MalformedJob, match=f"field '{field}'"):
        to_record(_claimed(**{field: value}), check=True)


def test_a_claimed_field_of_a_subclass_of_its_type_passes_the_check() -> None:
    """The check looks up each field's exact type first; another (a subclass) is
    checked in full, and passes."""
    record = to_record(_claimed(task=Name("t"), priority=2.5), check=True)
    assert record.task == "t" and record.priority == 2.5


def test_ms_makes_any_utc_zone_timezone_utc_and_converts_others() -> None:
    bson_utc = datetime(2026, 1, 1, 12, 0, 0, 123456, tzinfo=tz_util.utc)
    kept = ms(bson_utc)
    assert kept.tzinfo is timezone.utc and kept == T0.replace(hour=12, microsecond=123000)
    plus_one = datetime(2026, 1, 1, 13, 0, 0, 123000, tzinfo=tz_util.FixedOffset(60, "+1"))
    assert ms(plus_one) == kept and ms(plus_one).tzinfo is timezone.utc
    assert ms(kept) is kept  # already so: returned as it is


def test_a_job_at_every_bound_fits_a_document_with_its_outcome() -> None:
    """The payload limit leaves room for the result and for all a run writes beside
    it, each at its bound and in four-byte characters: logs, errors, progress."""
    wide = "\U0001f600"  # four bytes in UTF-8

    def deep(n: int) -> None:
        if n:
            deep(n - 1)
        raise ValueError(wide * (1 << 20))

    try:
        deep(500)
    except ValueError as exc:
        error = outcome.error_info(exc)
    name = wide * MAX_TEXT
    record = JobRecord(
        task=name,
        run_at=T0,
        created_at=T0,
        updated_at=T0,
        id=schedule_id(name),
        args=(b"p" * (MAX_PAYLOAD_BYTES - 64),),
        queue=name,
        label=name,
        dedupe_key=name,
        rate_key=name,
        concurrency_key=name,
        fair_key=name,
    )
    capture = logs.Capture(replace(record, attempts=1), logging.INFO)
    for _ in range(logs.MAX_RECORDS + 1):
        capture.add(logging.LogRecord(name, logging.INFO, "", 0, wide * 2000, (), None))
    attempt = AttemptRecord(1, name, name, 1, T0, T0, JobStatus.PENDING)
    doc = to_document(record)
    doc.update(
        result=b"r" * (MAX_VALUE_BYTES - 64),
        error=error_document(error),
        errors=[attempt_error_document(AttemptError(1, T0, error))] * ERRORS_KEPT,
        logs=logs_document(capture.result() or ()),
        history=[attempt_document(attempt)] * ATTEMPTS_KEPT,
        progress={"value": 0.5, "message": wide * 65536, "at": T0},
    )
    assert len(bson.encode(doc, codec_options=CODEC_OPTIONS)) <= MAX_DOCUMENT_BYTES


def test_a_batched_claims_updates_are_one_update_each_under_its_own_token() -> None:
    """claim_updates encodes the claim update once and gives each job a copy under its
    own token: each reads back as claim_update with that token. When the first token's
    bytes are found elsewhere in the update too (a runner named after it), each update
    is built on its own, still with its own token."""
    now = datetime(2026, 5, 1, 12, 0, 0, 123000, tzinfo=timezone.utc)
    tokens = [new_token() for _ in range(4)]
    for owner in ("host:1:abc", f"runner-{tokens[0]}"):
        updates = claim_updates(owner, tokens, now, 30.0)
        assert len(updates) == len(tokens)
        for token, update in zip(tokens, updates, strict=True):
            expected = claim_update(owner, token, now, 30.0)
            as_sent = bson.decode(
                bson.encode({"u": update}, codec_options=CODEC_OPTIONS), CODEC_OPTIONS
            )
            assert as_sent["u"] == bson.decode(
                bson.encode(expected, codec_options=CODEC_OPTIONS), CODEC_OPTIONS
            )
            assert as_sent["u"]["$set"]["lease"]["token"] == token
        raw = owner == "host:1:abc"
        assert all(isinstance(update, RawBSONDocument) == raw for update in updates)


def test_a_batched_claims_records_are_each_claimed_under_a_copy_of_one_lease() -> None:
    """A batched claim makes one lease (claim_lease) and gives each job a copy under
    its own token: each record is what claimed() makes of the job alone, its times in
    whole milliseconds."""
    now = datetime(2026, 5, 1, 12, 0, 0, 123456, tzinfo=timezone.utc)
    pending = JobRecord(task="t", run_at=T0, created_at=T0, updated_at=T0, id=1, attempts=1)  # type: ignore[arg-type]
    lease = claim_lease("host:1:abc", "", now, 30.0, ("host", 1))
    for token in (new_token(), new_token()):
        record = claimed_under(pending, evolved(lease, token=token))
        assert record == claimed(pending, "host:1:abc", token, now, 30.0, ("host", 1))
        assert record.lease is not None and record.lease.token == token
        assert record.started_at == record.updated_at == ms(now) != now
        assert record.attempts == 2 and record.status is JobStatus.RUNNING
