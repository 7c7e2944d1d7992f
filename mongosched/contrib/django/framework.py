"""Django's tasks framework, wherever it comes from: ``django.tasks`` (Django 6) if
present, else the ``django-tasks`` package (``django_tasks``, same interface).

Loaded on first use of :func:`load` only: a project that does not use the tasks
framework never imports it. Depends on no other module of mongosched.
"""

from __future__ import annotations

import functools
import importlib
from dataclasses import dataclass
from typing import Any

__all__ = ["Framework", "load"]


@dataclass(frozen=True)
class Framework:
    """The names mongosched uses from the tasks framework (untyped: the framework
    ships no types everywhere it runs)."""

    root: str
    """``"django.tasks"`` or ``"django_tasks"``."""
    BaseTaskBackend: Any
    Task: Any
    TaskContext: Any
    TaskError: Any
    TaskResult: Any
    TaskResultStatus: Any
    TaskResultDoesNotExist: Any
    task_enqueued: Any
    task_started: Any
    task_finished: Any
    task_backends: Any
    normalize_json: Any


@functools.cache
def load() -> Framework:
    """The tasks framework (imported on the first call; ImportError without one)."""
    try:
        importlib.import_module("django.tasks")
        root = "django.tasks"
    except ImportError:
        root = "django_tasks"
    base = importlib.import_module(f"{root}.base")
    exceptions = importlib.import_module(f"{root}.exceptions")
    signals = importlib.import_module(f"{root}.signals")
    try:
        normalize = importlib.import_module("django.utils.json").normalize_json
    except (ImportError, AttributeError):
        normalize = importlib.import_module("django_tasks.utils").normalize_json
    return Framework(
        root=root,
        BaseTaskBackend=importlib.import_module(f"{root}.backends.base").BaseTaskBackend,
        Task=base.Task,
        TaskContext=base.TaskContext,
        TaskError=base.TaskError,
        TaskResult=base.TaskResult,
        TaskResultStatus=base.TaskResultStatus,
        TaskResultDoesNotExist=exceptions.TaskResultDoesNotExist,
        task_enqueued=signals.task_enqueued,
        task_started=signals.task_started,
        task_finished=signals.task_finished,
        task_backends=importlib.import_module(root).task_backends,
        normalize_json=normalize,
    )
