"""``App`` is composed, not assembled: it holds the objects that act for it, offers
their methods with their signatures and docstrings, and gives a runner a narrow view of
itself, never the app; the runner's plumbing is not part of the app's public surface."""

from __future__ import annotations

import inspect

import pytest

from mongosched import App
from mongosched._core.delegation import Delegated
from mongosched.operations.admin import AdminOperations
from mongosched.operations.bulk import BulkOperations
from mongosched.operations.jobs import JobOperations
from mongosched.operations.scheduling import SchedulingOperations
from mongosched.runner.host import RunnerHost

PLUMBING = ("attach", "detach", "emit_record", "listening", "bind_transaction", "reconfigure")


def test_app_is_no_assembly_of_mixins_and_keeps_the_runners_plumbing_off() -> None:
    assert App.__bases__ == (object,)
    assert [name for name in PLUMBING if hasattr(App, name)] == []


def test_a_runner_is_given_a_host_not_the_app() -> None:
    app = App("memory://")
    runner = app.runner(workers=1)
    assert isinstance(runner.app, RunnerHost) and runner.app.store is app.store
    assert runner.app.tasks is app.tasks


@pytest.mark.parametrize(
    "operations", [JobOperations, BulkOperations, AdminOperations, SchedulingOperations]
)
def test_the_app_offers_each_operation_with_its_signature_and_docstring(
    operations: type,
) -> None:
    public = [name for name, _ in inspect.getmembers(operations, inspect.isfunction)]
    offered = [name for name in public if not name.startswith("_") and hasattr(App, name)]
    assert offered, operations
    app = App("memory://")
    for name in offered:
        method = getattr(operations, name)
        assert getattr(App, name).__doc__ == method.__doc__
        own = list(inspect.signature(method).parameters.values())[1:]  # less self
        assert list(inspect.signature(getattr(app, name)).parameters.values()) == own


def test_a_delegated_method_must_be_named_as_its_operation() -> None:
    with pytest.raises(Exception) as caught:  # Python < 3.12 wraps it in a RuntimeError

        class Wrong:
            cancel_all = Delegated("_jobs", JobOperations.cancel)

    error = caught.value.__cause__ or caught.value
    assert isinstance(error, TypeError) and "must be named as its operation" in str(error)
