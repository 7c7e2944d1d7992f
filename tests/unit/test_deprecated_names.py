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


def test_app_workers_is_app_live_runners_and_warns() -> None:
    app = mongosched.App("memory://")
    runner = app.runner(name="r1", workers=3)
    runner.registration.refresh(force=True)
    live = app.live_runners()
    assert [(r.name, r.workers) for r in live] == [("r1", 3)]
    with pytest.warns(DeprecationWarning, match=r"App\.workers\(\).*App\.live_runners\(\)"):
        assert app.workers() == live
