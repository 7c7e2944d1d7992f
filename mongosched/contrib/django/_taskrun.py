"""The mongosched task that runs Django tasks-framework tasks (see :mod:`.backend`).

Registered on the project's App whether or not the backend is configured, so that
every worker can run jobs enqueued through ``django.tasks``; it imports the tasks
framework only when such a job runs.
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any

from ...retry import Retry

if TYPE_CHECKING:
    from ...app import App

RUN_TASK = "mongosched.contrib.django.run_task"
"""Name of the mongosched task every Django task's job runs under."""

RETRY = Retry(max_attempts=3, retry_on=())
"""Django's semantics: an exception fails the task at once (``retry_on=()``); but a
run cut short by a dead worker (expired lease) runs again, up to three attempts."""


def run_task(
    path: str,
    args: list[Any],
    kwargs: dict[str, Any],
    backend: str,
    django_priority: int = 0,
    run_after: datetime | None = None,
) -> Any:
    """Run the Django task at ``path`` through the backend ``backend``."""
    from .backend import run_enqueued

    return run_enqueued(path, args, kwargs, backend, django_priority, run_after)


def register(app: App) -> None:
    app.task(name=RUN_TASK, retry=RETRY)(run_task)
