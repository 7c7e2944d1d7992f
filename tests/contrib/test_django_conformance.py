"""The tasks-framework backend against what the framework's own backend tests check.

Covers, in our words, what the upstream backend tests (``django.tasks`` on Django 6, the
``django-tasks`` package before) check that tests/contrib/test_django.py does not: the backend
is the configured default; the framework's validation (priority, queue, naive
``run_after``, a task function that is not at module level), at ``using()`` and again
at ``enqueue()``; ``refresh()`` following a result from READY to SUCCESSFUL; the async
API (``aenqueue``, ``aget_result``, ``arefresh``); the error of a failed task (class
path, traceback); arguments normalised as Django's own backends do (a JSON round trip),
huge integers kept exactly, distinct priorities run in order; enqueueing inside a
database transaction.

Runs on the same test project, set up once per process (tests/djangoproject/fixtures.py).
"""

from __future__ import annotations

import asyncio
import functools
import importlib
import json
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

pytest.importorskip("django")
try:  # Django 6 has the tasks framework built in; 4.2 to 5.2 use the django-tasks package
    import django.tasks as tasks_framework  # type: ignore[import-not-found]
except ImportError:
    tasks_framework = pytest.importorskip("django_tasks")
FRAMEWORK = tasks_framework.__name__

from mongosched import App, JobStatus  # noqa: E402
from mongosched.testing import drain  # noqa: E402
from tests.djangoproject.fixtures import empty  # noqa: E402

pytest_plugins = ["tests.djangoproject.fixtures"]  # project: the test project

_exceptions = importlib.import_module(f"{FRAMEWORK}.exceptions")
# InvalidTask on Django 6, InvalidTaskError in the django-tasks package
InvalidTask: type[Exception] = (
    getattr(_exceptions, "InvalidTask", None) or _exceptions.InvalidTaskError
)


def framework_version() -> str:
    import django

    if FRAMEWORK == "django.tasks":
        return f"Django {django.__version__} (django.tasks)"
    from importlib.metadata import version

    return f"django-tasks {version('django-tasks')} on Django {django.__version__}"


@pytest.fixture
def app(project: App) -> Iterator[App]:
    """The project's App, with no jobs; runners stopped afterwards."""
    empty(project)
    yield project
    from mongosched.contrib.django import stop_runner

    stop_runner(graceful=False, timeout=5)
    for runner in list(project.runners):
        runner.stop(graceful=False, timeout=5)


# The backend is the configured default --------------------------------------------------------
def test_the_default_backend_is_ours(app: App) -> None:
    from mongosched.contrib.django import TasksBackend, get_app

    backend = tasks_framework.task_backends["default"]
    assert isinstance(backend, TasksBackend) and backend.alias == "default"
    assert tasks_framework.default_task_backend.alias == "default"
    assert backend.queues == {"default", "emails"}  # the backend's QUEUES
    assert backend.app is get_app() is app
    assert (
        backend.supports_defer,
        backend.supports_async_task,
        backend.supports_get_result,
        backend.supports_priority,
    ) == (True, True, True, True)

    from tests.djangoproject.testapp.tasks import multiply

    assert multiply.get_backend() is backend


# Validation ----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"priority": 101}, "priority"),
        ({"priority": -101}, "priority"),
        ({"queue_name": "not-a-queue"}, "Queue 'not-a-queue' is not valid"),
        ({"run_after": datetime(2030, 1, 1)}, "aware"),  # noqa: DTZ001 - naive on purpose
    ],
    ids=["priority-too-high", "priority-too-low", "unknown-queue", "naive-run-after"],
)
def test_invalid_task_options_are_refused(app: App, changes: dict[str, Any], message: str) -> None:
    from tests.djangoproject.testapp.tasks import multiply

    with pytest.raises(InvalidTask, match=message):
        multiply.using(**changes)
    # The backend validates again at enqueue(): a task changed after validation.
    task = multiply.using()
    for name, value in changes.items():
        object.__setattr__(task, name, value)
    with pytest.raises(InvalidTask, match=message):
        task.enqueue(1, 2)
    assert app.count_jobs() == 0


def test_the_extreme_priorities_and_an_aware_run_after_are_valid(app: App) -> None:
    from tests.djangoproject.testapp.tasks import multiply

    later = datetime.now(timezone.utc) + timedelta(hours=1)
    results = [
        multiply.using(priority=100).enqueue(1, 1),
        multiply.using(priority=-100).enqueue(1, 1),
        multiply.using(queue_name="emails", run_after=later).enqueue(1, 1),
    ]
    jobs = [app.get_job(r.id) for r in results]
    assert [(j.priority, j.queue) for j in jobs if j is not None] == [
        (1, "default"),
        (10, "default"),
        (5, "emails"),
    ]


def test_a_task_function_not_at_module_level_is_refused(app: App) -> None:
    def nested(x: int) -> int:  # pragma: no cover - never runs
        return x

    with pytest.raises(InvalidTask, match="module level"):
        tasks_framework.task(nested)
    with pytest.raises(InvalidTask, match="module level"):
        tasks_framework.task(lambda: None)
    assert app.count_jobs() == 0


# Results -------------------------------------------------------------------------------------
def test_refresh_follows_the_job_from_ready_to_successful(app: App) -> None:
    Status = tasks_framework.TaskResultStatus

    from tests.djangoproject.testapp.tasks import multiply

    result = multiply.enqueue(3, 5)
    assert result.status == Status.READY and not result.is_finished
    assert result.started_at is None and result.finished_at is None
    assert result.attempts == 0 and result.errors == []
    with pytest.raises(ValueError):
        result.return_value  # noqa: B018 - not finished
    result.refresh()  # nothing ran: still READY
    assert result.status == Status.READY

    assert drain(app) == 1
    assert result.status == Status.READY  # a result changes only when refreshed
    result.refresh()
    assert result.status == Status.SUCCESSFUL and result.is_finished
    assert result.return_value == 15
    assert result.started_at is not None and result.finished_at is not None
    assert result.last_attempted_at is not None
    assert result.enqueued_at <= result.started_at <= result.finished_at
    assert result.attempts == 1 and len(result.worker_ids) == 1
    assert result.errors == []
    job = app.get_job(result.id)
    assert job is not None and job.status is JobStatus.COMPLETED


def test_the_async_api(app: App) -> None:
    Status = tasks_framework.TaskResultStatus
    backend = tasks_framework.default_task_backend

    from tests.djangoproject.testapp.tasks import async_double, multiply

    async def enqueue() -> tuple[Any, Any]:
        return await multiply.aenqueue(4, 5), await async_double.aenqueue(8)

    product, doubled = asyncio.run(enqueue())
    assert product.status == Status.READY and doubled.status == Status.READY
    assert {job.id for job in app.get_jobs(limit=0)} == {
        app.get_job(product.id).id,  # type: ignore[union-attr]
        app.get_job(doubled.id).id,  # type: ignore[union-attr]
    }
    assert drain(app) == 2

    async def read() -> tuple[Any, Any]:
        await product.arefresh()
        return await multiply.aget_result(product.id), await backend.aget_result(doubled.id)

    again, other = asyncio.run(read())
    assert product.status == Status.SUCCESSFUL and product.return_value == 20
    assert again.status == Status.SUCCESSFUL and again.return_value == 20
    assert other.status == Status.SUCCESSFUL and other.return_value == 16

    TaskResultDoesNotExist = _exceptions.TaskResultDoesNotExist
    with pytest.raises(TaskResultDoesNotExist):
        asyncio.run(backend.aget_result("0123456789abcdef01234567"))


def test_a_failed_task_s_error_has_the_class_path_and_the_traceback(app: App) -> None:
    Status = tasks_framework.TaskResultStatus

    from tests.djangoproject.testapp.tasks import explode

    result = explode.enqueue("lost key")
    assert drain(app) == 1
    for read in (lambda: explode.get_result(result.id), lambda: result):
        result.refresh()
        failed = read()
        assert failed.status == Status.FAILED and failed.is_finished
        assert len(failed.errors) == 1
        error = failed.errors[0]
        assert error.exception_class_path == "builtins.LookupError"
        assert error.exception_class is LookupError
        assert "Traceback (most recent call last)" in error.traceback
        assert "LookupError: lost key" in error.traceback
        assert "raise LookupError(message)" in error.traceback  # the task's own line
        assert failed.attempts == 1 and failed.finished_at is not None


# Arguments, results and priorities as Django's own backends treat them ---------------------
def test_huge_integers_are_kept_exactly_in_arguments_and_results(app: App) -> None:
    """Valid JSON, beyond BSON's 64-bit integers: kept exactly, as ints, both ways (a
    dict that looks like the backend's own tagging included)."""
    Status = tasks_framework.TaskResultStatus

    from tests.djangoproject.testapp.tasks import echo

    big, small = 2**70, -(2**80)
    args = [big, small, {"n": big, "items": [2**64, 2**63 - 1, -(2**63)]}]
    tricky = {"__mongosched_int__": "5", "__mongosched_dict__": {"x": big}}
    result = echo.enqueue(*args, key=big, tricky=tricky)
    assert result.args == args and result.kwargs == {"key": big, "tricky": tricky}
    assert drain(app) == 1
    for read in (lambda: echo.get_result(result.id), lambda: result):
        result.refresh()
        done = read()
        assert done.status == Status.SUCCESSFUL, done.errors
        assert done.args == args and done.kwargs == {"key": big, "tricky": tricky}
        assert done.return_value["args"] == args
        assert done.return_value["kwargs"] == {"key": big, "tricky": tricky}
        assert done.return_value["types"][0][:2] == ["int", "int"]  # what the task got
        assert done.return_value["types"][1]["tricky"] == {
            "__mongosched_int__": "str",
            "__mongosched_dict__": {"x": "int"},
        }


def test_arguments_are_normalised_as_django_s_own_backends_do(app: App) -> None:
    """Django's normalisation then a JSON round trip, as a backend storing JSON does:
    a dict's integer keys become strings, tuples lists, bytes text."""
    from tests.djangoproject.testapp.tasks import echo

    normalize = importlib.import_module("mongosched.contrib.django.framework").load()
    value = {1: "a", 2: {3: ("b", b"c")}, "t": (1, 2.5, None, True)}
    expected = json.loads(json.dumps(normalize.normalize_json(value)))
    assert expected == {"1": "a", "2": {"3": ["b", "c"]}, "t": [1, 2.5, None, True]}
    result = echo.enqueue(value, k={4: None})
    assert result.args == [expected] and result.kwargs == {"k": {"4": None}}
    assert drain(app) == 1
    result.refresh()
    assert result.return_value["args"] == [expected]
    assert result.return_value["kwargs"] == {"k": {"4": None}}


def test_distinct_priorities_run_in_django_s_order(app: App) -> None:
    from tests.djangoproject.testapp.tasks import ORDER, record

    ORDER.clear()
    priorities = [1, 25, -1, 100, 0, -100, 80, 99, -99, 2]
    for priority in priorities:  # enqueued out of order
        record.using(priority=priority).enqueue(str(priority))
    assert drain(app) == len(priorities)
    assert ORDER == [str(p) for p in sorted(priorities, reverse=True)]


# Transactions --------------------------------------------------------------------------------
def test_enqueue_in_a_transaction_stores_the_job_at_once(app: App) -> None:
    """The job is in MongoDB, not in the SQL transaction: it is stored at enqueue(), and
    a rollback does not undo it; to enqueue on commit, use ``transaction.on_commit``."""
    from django.db import transaction

    from tests.djangoproject.testapp.tasks import multiply

    class Rollback(Exception):
        pass

    with pytest.raises(Rollback), transaction.atomic():
        kept = multiply.enqueue(1, 2)
        assert app.get_job(kept.id) is not None
        raise Rollback
    assert app.get_job(kept.id) is not None

    enqueued: list[Any] = []
    with transaction.atomic():
        transaction.on_commit(lambda: enqueued.append(multiply.enqueue(2, 3)))
        assert enqueued == [] and app.count_jobs() == 1
    assert len(enqueued) == 1 and app.get_job(enqueued[0].id) is not None

    with pytest.raises(Rollback), transaction.atomic():
        transaction.on_commit(functools.partial(multiply.enqueue, 3, 4))
        raise Rollback
    assert app.count_jobs() == 2  # rolled back: never enqueued
    assert drain(app) == 2


def test_enqueue_on_commit(app: App) -> None:
    base = importlib.import_module(f"{FRAMEWORK}.backends.base").BaseTaskBackend
    if not hasattr(base, "enqueue_on_commit") and "enqueue_on_commit" not in (
        getattr(tasks_framework.task_backends["default"], "options", {}) or {}
    ):
        pytest.skip(f"{framework_version()} has no enqueue_on_commit option")
    pytest.fail("enqueue_on_commit is supported by this framework version: test it")
