"""The old spellings of renamed public names still work for one release, and warn."""

from __future__ import annotations

import pytest

import mongosched
from mongosched import RunnerInfo
from mongosched._core import records


def test_workerinfo_is_runnerinfo_and_warns() -> None:
    for module in (mongosched, records):
        with pytest.warns(DeprecationWarning, match=r"WorkerInfo is deprecated.*RunnerInfo"):
            old = module.WorkerInfo
        assert old is RunnerInfo


def test_an_unknown_name_is_still_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="WorkerInfos"):
        _ = mongosched.WorkerInfos  # type: ignore[attr-defined]
