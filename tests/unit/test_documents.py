"""Job documents read into records (:func:`mongosched.store.mongo.documents.to_record`)."""

from __future__ import annotations

from dataclasses import fields
from datetime import datetime, timezone

from bson import ObjectId

from mongosched._core.records import JobRecord, JobStatus, LeaseInfo
from mongosched.store.mongo.documents import to_document, to_record

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
