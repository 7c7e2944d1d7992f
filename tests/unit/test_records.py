"""records.assembled and records.evolved: the cheap ways of building the frozen values
(every job read and every outcome pays them) behave as ``__init__`` and ``replace``."""

from __future__ import annotations

import dataclasses
from datetime import datetime, timezone
from typing import Any

import pytest

from mongosched._core.records import JobRecord, JobStatus, LeaseInfo, assembled, evolved

NOW = datetime(2026, 1, 2, 3, 4, 5, 6000, tzinfo=timezone.utc)


def _values() -> dict[str, Any]:
    record = JobRecord(
        task="t",
        run_at=NOW,
        created_at=NOW,
        updated_at=NOW,
        id=7,
        args=(1, 2),
        kwargs={"a": 1},
        status=JobStatus.RUNNING,
        lease=LeaseInfo("me", "tok", NOW, NOW),
    )
    return {f.name: getattr(record, f.name) for f in dataclasses.fields(JobRecord)}


def test_assembled_is_what_init_builds() -> None:
    values = _values()
    built = assembled(JobRecord, values)
    assert type(built) is JobRecord
    assert built == JobRecord(**values)
    assert dataclasses.asdict(built) == dataclasses.asdict(JobRecord(**values))
    with pytest.raises(dataclasses.FrozenInstanceError):
        built.task = "other"  # type: ignore[misc]


def test_assembled_refuses_a_missing_or_unknown_field() -> None:
    values = _values()
    del values["concurrency_key"]
    with pytest.raises(TypeError, match="concurrency_key"):
        assembled(JobRecord, values)
    values = {**_values(), "colour": "red"}
    with pytest.raises(TypeError, match="colour"):
        assembled(JobRecord, values)


def test_evolved_is_what_replace_returns() -> None:
    record = assembled(JobRecord, _values())
    changed = evolved(record, status=JobStatus.COMPLETED, lease=None)
    assert changed == dataclasses.replace(record, status=JobStatus.COMPLETED, lease=None)
    assert record.status is JobStatus.RUNNING  # the original is untouched
    with pytest.raises(TypeError, match="colour"):
        evolved(record, colour="red")
