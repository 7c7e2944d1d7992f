"""The mongosched task that runs Django tasks-framework tasks (see :mod:`.backend`).

Registered on the project's App (by :func:`.conf.get_app`) whether or not the backend
is configured, so that every runner can run jobs enqueued through ``django.tasks``; it
imports the tasks framework only when such a job runs.

Imports go one way: :mod:`.backend` imports this module (and :mod:`.conf`, which
imports it too); this module imports neither. A job finds the backend that enqueued it
through the tasks framework's registry of backends, by its alias, and runs through it
when that backend is a :class:`JobBackend`.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from mongosched.errors import ConfigurationError, Fail
from mongosched.events import Event
from mongosched.job import Job, current_job
from mongosched.retry import RetryPolicy

if TYPE_CHECKING:
    from mongosched.app import App

__all__ = ["RETRY", "RUN_TASK", "Enqueue", "JobBackend", "enqueuing", "register", "run_task"]

RUN_TASK = "mongosched.contrib.django.run_task"
"""Name of the mongosched task every Django task's job runs under."""

RETRY = RetryPolicy(retries=2, retry_on=())
"""Django's semantics: an exception fails the task at once (``retry_on=()``); but a
run cut short by a dead runner (expired lease) runs again, up to three attempts."""


@runtime_checkable
class JobBackend(Protocol):
    """What a tasks backend offers to run the jobs of :data:`RUN_TASK` it enqueued
    (:class:`~.backend.TasksBackend` has it; :func:`run_task` refuses a backend that
    has not)."""

    def run_job(self, job_id: Any) -> Any:
        """Run the Django task of the running job ``job_id``; its return value."""

    def created(self, job: Job, task: Any) -> None:
        """The job that enqueues ``task`` was just stored, before anything ran it (an
        eager App runs it inside ``schedule()``): see :func:`enqueuing`."""


class Enqueue:
    """One enqueue under way in this thread: the job it created, once stored, and
    what :meth:`JobBackend.created` raised (to raise from the enqueue)."""

    def __init__(self, backend: JobBackend, task: Any) -> None:
        self.backend = backend
        self.task = task
        self.job: Job | None = None
        self.error: BaseException | None = None


_local = threading.local()


@contextmanager
def enqueuing(backend: JobBackend, task: Any) -> Iterator[Enqueue]:
    """While ``backend`` schedules the job of ``task`` in this thread: the App's
    ``job:created`` event (sent before an eager App runs the job) reaches
    ``backend.created``."""
    current, previous = Enqueue(backend, task), getattr(_local, "enqueue", None)
    _local.enqueue = current
    try:
        yield current
    finally:
        _local.enqueue = previous


def announce_created(event: Event) -> None:
    """``job:created`` listener: hand the job of the enqueue under way in this thread
    to its backend, once."""
    current: Enqueue | None = getattr(_local, "enqueue", None)
    job = event.job
    if current is None or current.job is not None or job is None or job.task != RUN_TASK:
        return
    current.job = job
    try:
        current.backend.created(job, current.task)
    except BaseException as exc:  # the enqueue raises it (listeners' errors are logged)
        current.error = exc


def run_task(
    path: str,
    args: list[Any],
    kwargs: dict[str, Any],
    backend: str,
    django_priority: int = 0,
    run_after: str | datetime | None = None,
) -> Any:
    """Run the Django task at ``path`` through the backend ``backend`` (the job's
    payload says how it was enqueued; the backend reads it from the job)."""
    ctx = current_job()
    if ctx is None:  # called inline, outside a runner
        raise ConfigurationError(f"{RUN_TASK} runs only inside a mongosched job")
    from mongosched.contrib.django.framework import load

    instance = load().task_backends[backend]
    if not isinstance(instance, JobBackend):
        raise Fail(
            f"task backend {backend!r} is {type(instance).__name__}, not TasksBackend; "
            f"cannot run {path}"
        )
    return instance.run_job(ctx.id)


def register(app: App) -> None:
    """Register :data:`RUN_TASK` on ``app``, and the listener of :func:`enqueuing`."""
    app.task(name=RUN_TASK, retry=RETRY)(run_task)
    app.on("job:created", announce_created)
