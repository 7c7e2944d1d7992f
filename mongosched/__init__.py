"""mongosched: a MongoDB-backed job scheduler for Python.

Register functions with ``@app.task``, schedule them with ``task.schedule(...)``, and run
them with ``app.runner(...).start()`` or the ``mongosched worker`` command.
"""

from __future__ import annotations

from .app import App, Cancellation
from .chains import chain, group
from .errors import ArgumentError, Fail, MongoschedError
from .events import EVENTS, Event
from .job import Job, JobContext, current_job
from .records import ErrorInfo, JobStatus
from .retry import Retry
from .runner import Runner
from .schedule import Cron, Every
from .task import JobSpec, Task
from .transaction import Transaction

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
