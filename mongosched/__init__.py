"""mongosched: a MongoDB-backed job scheduler for Python.

Register functions with ``@app.task``, schedule them with ``task.schedule(...)``, and run
them with ``app.runner(...).start()`` or the ``mongosched worker`` command.
"""

from __future__ import annotations

from mongosched._core.records import ErrorInfo, JobStatus
from mongosched.app import App, Cancellation
from mongosched.chains import chain, group
from mongosched.errors import ArgumentError, Fail, MongoschedError
from mongosched.events import EVENTS, Event
from mongosched.job import Job, JobContext, current_job
from mongosched.retry import Retry
from mongosched.runner.runner import Runner
from mongosched.schedule import Cron, Every
from mongosched.task import JobSpec, Task
from mongosched.transaction import Transaction

__version__ = "0.1.0"

__all__ = [
    "EVENTS",
    "App",
    "ArgumentError",
    "Cancellation",
    "Cron",
    "ErrorInfo",
    "Event",
    "Every",
    "Fail",
    "Job",
    "JobContext",
    "JobSpec",
    "JobStatus",
    "MongoschedError",
    "Retry",
    "Runner",
    "Task",
    "Transaction",
    "__version__",
    "chain",
    "current_job",
    "group",
]
