"""Tasks of the test app: found by autodiscovery (this is the app's tasks.py)."""

import os
import time

try:  # Django 6
    from django.tasks import task  # type: ignore[import-not-found]
except ImportError:
    from django_tasks import task

from mongosched import Event, current_job
from mongosched.contrib.django import app

# mongosched tasks -----------------------------------------------------------------------


@app.task(retry=0)
def add(x: int, y: int) -> int:
    return x + y


@app.on("runner:start")
def record_runner_start(event: Event) -> None:
    """Tests of the in-process runner count runner starts per process in this file."""
    log = os.environ.get("MONGOSCHED_DJANGO_RUNNER_LOG")
    if log:
        with open(log, "a") as f:
            f.write(f"{os.getpid()}\n")


# Django tasks-framework tasks (run through mongosched.contrib.django.TasksBackend) -------

ORDER: list[str] = []


@task
def multiply(a: int, b: int) -> int:
    return a * b


@task
def explode(message: str) -> None:
    raise LookupError(message)


@task
def record(label: str) -> str:
    ORDER.append(label)
    return label


@task(takes_context=True, queue_name="emails")
def with_context(context, tag: str) -> dict:  # type: ignore[no-untyped-def]
    return {"attempt": context.attempt, "id": context.task_result.id, "tag": tag}


@task
async def async_double(x: int) -> int:
    return 2 * x


@task
def keyed(key: str) -> dict:
    """A dict with that key (valid JSON whatever it is; BSON refuses a NUL in a key)."""
    return {key: 1}


@task
def echo(*args, **kwargs) -> dict:  # type: ignore[no-untyped-def]
    """What the task received, with each value's type."""
    return {"args": list(args), "kwargs": kwargs, "types": _types([args, kwargs])}


def _types(value):  # type: ignore[no-untyped-def]
    if isinstance(value, dict):
        return {str(k): _types(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_types(v) for v in value]
    return type(value).__name__


@task
def text(size: int) -> str:
    return "x" * size


@task
def wait_for_cancel() -> str:
    """Runs until its job is cancelled (at most 10 s)."""
    ctx = current_job()
    deadline = time.monotonic() + 10
    while ctx is not None and not ctx.is_cancelled() and time.monotonic() < deadline:
        time.sleep(0.01)
    return "stopped"
