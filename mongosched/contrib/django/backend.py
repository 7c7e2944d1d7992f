"""A backend for Django's tasks framework that stores tasks in MongoDB.

::

    TASKS = {"default": {"BACKEND": "mongosched.contrib.django.TasksBackend"}}

``@task`` functions enqueued with ``.enqueue()`` become mongosched jobs (of the task
:data:`~.taskrun.RUN_TASK`, with the Django task's import path as payload) in the
project's App, and run in its runners: ``manage.py mongosched worker`` or the
in-process runner. ``django.tasks`` (Django 6) is used when present, else the
``django-tasks`` package.

* ``supports_defer``: ``run_after`` becomes the job's ``run_at``.
* ``supports_priority``: Django's priority (-100 lowest .. 100 highest, default 0) maps
  onto mongosched's 1 (first) .. 10 (last), default 5, by :func:`to_mongosched_priority`,
  each of Django's 201 priorities to a place of its own: they run in Django's order.
* ``supports_get_result``: the result id is the job id; statuses map as
  pending → READY, running → RUNNING, completed → SUCCESSFUL, failed and cancelled →
  FAILED (a cancelled task's last error is :class:`TaskCancelled`). ``run_after``
  reads back as given.
* The arguments are bound to the function's parameters at ``enqueue()``: arguments it
  cannot take raise :class:`~mongosched.errors.ArgumentError` naming the task.
* Arguments and the return value are normalised as Django's own backends do (its
  ``normalize_json``, then a JSON round trip: a dict's integer keys become strings) and
  kept exactly, integers beyond 64 bits included (see :mod:`.payload`). What BSON
  cannot hold even so (a key with a NUL character, a lone surrogate; a return value of
  more than 1 MiB) raises :class:`~mongosched.errors.SerializationError` from
  ``enqueue()``, naming the task and the argument, or fails the task.
* Each job is labelled with the Django task's path (:attr:`~mongosched.Job.label`):
  the dashboard and ``mongosched jobs`` show it, ``get_jobs(label=...)`` and the
  dashboard's task filter find its jobs, and ``app.pause(task=path)`` holds that
  Django task's jobs alone (``resume`` releases them). ``errors`` holds one error per
  failed attempt (the last ten).
* ``task_enqueued`` is sent when the job is stored (in eager mode, before it runs);
  ``task_started`` and ``task_finished`` in the runner, around the function;
  ``task_finished`` reports the outcome that is stored.
* An exception fails the task (no retries: Django's semantics); a run cut short by a
  dead runner runs again (at-least-once), up to three attempts.
* The backend's ``QUEUES`` (default ``["default"]``) lists the queue names tasks may
  use; ``"QUEUES": []`` allows any. Queue names are mongosched queues.
"""

from __future__ import annotations

import dataclasses
import functools
import traceback
from datetime import datetime
from typing import Any

from django.utils import timezone
from django.utils.module_loading import import_string

from mongosched._core.arguments import Parameters
from mongosched._core.records import ErrorInfo, JobStatus
from mongosched.app import App
from mongosched.contrib.django.conf import get_app
from mongosched.contrib.django.framework import load
from mongosched.contrib.django.payload import loaded, normalized, stored
from mongosched.contrib.django.taskrun import RUN_TASK, enqueuing
from mongosched.errors import Fail, JobNotFound, MongoschedError, WorkerShutdown
from mongosched.job import Job, current_job
from mongosched.store.codec import encode_payload, encode_value

__all__ = ["STATUSES", "TaskCancelled", "TasksBackend", "to_mongosched_priority"]

fw = load()
BaseTaskBackend: Any = fw.BaseTaskBackend
Status: Any = fw.TaskResultStatus
TaskResultDoesNotExist: Any = fw.TaskResultDoesNotExist

STATUSES: dict[JobStatus, Any] = {
    JobStatus.PENDING: Status.READY,
    JobStatus.RUNNING: Status.RUNNING,
    JobStatus.COMPLETED: Status.SUCCESSFUL,
    JobStatus.FAILED: Status.FAILED,
    JobStatus.CANCELLED: Status.FAILED,
    JobStatus.WAITING: Status.READY,
    JobStatus.EXPIRED: Status.FAILED,
}


class TaskCancelled(MongoschedError):
    """The error a cancelled task's result carries: the tasks framework has no
    cancelled status, so it reads FAILED, with this as its last error (never raised)."""


def to_mongosched_priority(priority: int) -> float:
    """Django's priority (-100 .. 100, higher runs first, default 0) as mongosched's
    (1 .. 10, lower runs first, default 5), strictly in Django's order: 100 → 1,
    0 → 5, -100 → 10, linear between (1 → 4.96, 25 → 4, 99 → 1.04; -1 → 5.05, -20 → 6,
    -99 → 9.95). Whole numbers come back as ints."""
    clamped = max(-100, min(100, priority))
    # Steps of 0.04 and 0.05: two decimals keep each apart, without float noise.
    value = round(5 - clamped / 25 if clamped >= 0 else 5 - clamped / 20, 2)
    return int(value) if value.is_integer() else value


class TasksBackend(BaseTaskBackend):  # type: ignore[misc]  # framework untyped
    """Django tasks backend storing tasks as mongosched jobs (see the module doc)."""

    supports_defer = True
    supports_async_task = True
    supports_get_result = True
    supports_priority = True

    @property
    def app(self) -> App:
        return get_app()

    # Enqueueing ----------------------------------------------------------------------
    def enqueue(self, task: Any, args: Any, kwargs: Any) -> Any:
        self.validate_task(task)
        given_args, given_kwargs = normalized(list(args)), normalized(dict(kwargs))
        # The function is called with the context first, when it takes one.
        taken = [None, *given_args] if task.takes_context else given_args
        parameters(task.func, task.module_path).bind(taken, given_kwargs)
        payload_args, payload_kwargs = stored(given_args), stored(given_kwargs)
        # The store checks the payload too, but would name the job's own arguments.
        encode_payload(task.module_path, payload_args, payload_kwargs)
        options: dict[str, Any] = {
            "queue": task.queue_name,
            "priority": to_mongosched_priority(task.priority),
            "label": task.module_path,  # shown, filtered and paused by (see the module doc)
        }
        run_after = task.run_after
        if run_after is not None:
            aware = run_after if timezone.is_aware(run_after) else timezone.make_aware(run_after)
            options["run_at"] = aware  # (naive only with USE_TZ = False)
        with enqueuing(self, task) as under_way:
            job = (
                self.app.get_task(RUN_TASK)
                .configure(**options)
                .schedule(
                    path=task.module_path,
                    args=payload_args,
                    kwargs=payload_kwargs,
                    backend=self.alias,
                    django_priority=task.priority,
                    # as given (a stored datetime keeps milliseconds only)
                    run_after=None if run_after is None else run_after.isoformat(),
                )
            )
        if under_way.error is not None:
            raise under_way.error
        if under_way.job is None:  # pragma: no cover - the App always reports a new job
            self.created(job, task)
        return self._result(job, task=task)

    def created(self, job: Job, task: Any) -> None:
        """``task_enqueued``, as soon as the job is stored (before an eager App runs
        it); see :func:`.taskrun.enqueuing`."""
        fw.task_enqueued.send(sender=type(self), task_result=self._result(job, task=task))

    # Results ---------------------------------------------------------------------------
    def get_result(self, result_id: str) -> Any:
        try:
            job = self.app.get_job(result_id)
        except JobNotFound:  # InvalidJobId included: what cannot be a job id
            job = None
        if job is None or job.task != RUN_TASK:
            raise TaskResultDoesNotExist(result_id)
        return self._result(job)

    def _task_of(self, job: Job) -> Any:
        """The Django Task a job runs, configured as it was enqueued."""
        kw = job.kwargs
        task = import_string(kw["path"])
        if not isinstance(task, fw.Task):
            raise TypeError(f"{kw['path']} is not a task (decorate it with @task)")
        return task.using(
            priority=kw.get("django_priority", 0),
            queue_name=job.queue,
            run_after=_run_after(kw.get("run_after")),
            backend=kw.get("backend", self.alias),
        )

    def _result(self, job: Job, *, task: Any = None) -> Any:
        """The job as a Django ``TaskResult``."""
        kw = job.kwargs
        status = STATUSES[job.status]
        errors = [_task_error(a.error) for a in job.errors]  # one per failed attempt
        last = job.error
        kept = bool(job.errors) and job.errors[-1].error == last
        if last is not None and not kept and job.status is not JobStatus.COMPLETED:
            errors.append(_task_error(last))
        if job.status is JobStatus.CANCELLED:
            errors.append(_cancelled(job.finished_at))
        worker = job.lease.owner if job.lease is not None else "mongosched"
        result = fw.TaskResult(
            task=task if task is not None else self._task_of(job),
            id=str(job.id),
            status=status,
            enqueued_at=job.created_at,
            started_at=job.started_at,
            finished_at=job.finished_at,
            last_attempted_at=job.started_at,
            args=loaded(kw.get("args", [])),
            kwargs=loaded(kw.get("kwargs", {})),
            backend=kw.get("backend", self.alias),
            errors=errors,
            # mongosched keeps only the current lease holder, not a history: one entry
            # per attempt, so that ``attempts`` is right.
            worker_ids=[worker] * job.attempts,
        )
        if status == Status.SUCCESSFUL:
            object.__setattr__(result, "_return_value", loaded(job.result))
        return result

    # Running (in the runner) -----------------------------------------------------------
    def run_job(self, job_id: Any) -> Any:
        """Body of :data:`~.taskrun.RUN_TASK` (see :func:`.taskrun.run_task`): run the
        Django task of the running job ``job_id``, sending the framework's signals."""
        job = self.app.get_job(job_id)
        if job is None:  # pragma: no cover - deleted while running
            raise Fail(f"job {job_id} vanished")
        return self._run(job)

    def _run(self, job: Job) -> Any:
        task = self._task_of(job)
        running = self._result(job, task=task)
        fw.task_started.send(sender=type(self), task_result=running)
        try:
            if task.takes_context:
                value = task.call(
                    fw.TaskContext(task_result=running), *running.args, **running.kwargs
                )
            else:
                value = task.call(*running.args, **running.kwargs)
            value = normalized(value)
            kept = stored(value)
            encode_value(task.module_path, "return value", kept)  # what the store refuses
        except WorkerShutdown:
            raise  # back to pending: not finished
        except BaseException as exc:
            error = fw.TaskError(
                exception_class_path=f"{type(exc).__module__}.{type(exc).__qualname__}",
                traceback=mongosched_traceback(exc),
            )
            self._finished(running, Status.FAILED, errors=[*running.errors, error])
            raise
        ctx = current_job()
        if ctx is not None and ctx.cancel_reason == "cancelled":  # ends cancelled
            cancelled = _cancelled(timezone.now())
            self._finished(running, Status.FAILED, errors=[*running.errors, cancelled])
        else:
            self._finished(running, Status.SUCCESSFUL, value=value)
        return kept

    def _finished(self, running: Any, status: Any, *, value: Any = None, **changes: Any) -> None:
        result = dataclasses.replace(running, status=status, finished_at=timezone.now(), **changes)
        if status == Status.SUCCESSFUL:
            object.__setattr__(result, "_return_value", value)
        fw.task_finished.send(sender=type(self), task_result=result)


@functools.lru_cache(maxsize=1024)
def parameters(func: Any, name: str) -> Parameters:
    """The parameters of a Django task's function, read once."""
    return Parameters(func, name)


def mongosched_traceback(exc: BaseException) -> str:
    return "".join(traceback.format_exception(exc))


def _class_path(error: ErrorInfo) -> str:
    """Import path of the exception class a job failed with (a job reaped after its
    runner died records :class:`~mongosched.errors.LeaseLost`)."""
    return error.path if error.module else "builtins.Exception"


def _cancelled(when: datetime | None) -> Any:
    at = f" at {when.isoformat()}" if when is not None else ""
    return fw.TaskError(
        exception_class_path=f"{TaskCancelled.__module__}.{TaskCancelled.__qualname__}",
        traceback=f"{TaskCancelled.__qualname__}: the task was cancelled{at}",
    )


def _run_after(value: Any) -> datetime | None:
    """``run_after`` as enqueued: stored as ISO text (jobs of earlier versions hold a
    datetime, to the millisecond)."""
    return datetime.fromisoformat(value) if isinstance(value, str) else value


def _task_error(error: ErrorInfo) -> Any:
    return fw.TaskError(
        exception_class_path=_class_path(error),
        traceback=error.traceback or str(error),
    )
