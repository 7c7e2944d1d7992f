"""mongosched: a MongoDB-backed job scheduler for Python.

Register functions with ``@app.task``, schedule them with ``task.schedule(...)``, and run
them with ``app.runner(...).start()`` or the ``mongosched worker`` command.

Everything a user imports is here (``__all__``), with :mod:`mongosched.testing`,
:mod:`mongosched.observe`, :mod:`mongosched.dashboard` and :mod:`mongosched.contrib`.
The other subpackages (``_core``, ``runner``, ``operations``, ``store``) are internal.
"""

from __future__ import annotations

from mongosched._core.records import (
    AttemptError,
    AttemptRecord,
    ErrorInfo,
    JobStatus,
    LastRun,
    LeaseInfo,
    LogEntry,
    Pause,
    Progress,
    RunnerInfo,
    ScheduleEdit,
)
from mongosched.app import App, Cancellation
from mongosched.chains import chain, group
from mongosched.errors import (
    ArgumentError,
    ConfigurationError,
    DependencyFailed,
    Fail,
    HistoryTooLarge,
    InvalidJobId,
    InvalidSchedule,
    JobExpired,
    JobNotFound,
    JobStateError,
    JobTimeout,
    LeaseLost,
    MalformedJob,
    MongoschedError,
    NonDeterminismError,
    OutOfBounds,
    ResultTooLarge,
    ScheduleFinished,
    SerializationError,
    StepFailed,
    StoreError,
    StoreUnavailable,
    TaskNotRegistered,
    TransactionConflict,
    TransactionError,
    WaitTimeout,
    WatchUnavailable,
    WorkerShutdown,
    WorkflowError,
)
from mongosched.events import EVENTS, Event
from mongosched.job import Job, JobContext, current_job
from mongosched.limits import RateLimit
from mongosched.retry import RetryPolicy
from mongosched.runner.runner import Runner
from mongosched.schedule import Cron, Every, Misfire
from mongosched.task import JobSpec, Task
from mongosched.transaction import Transaction
from mongosched.workflow import Step, patched

__version__ = "0.1.0"

__all__ = [
    "EVENTS",
    "HistoryTooLarge",
    "NonDeterminismError",
    "Step",
    "StepFailed",
    "WorkflowError",
    "patched",
    "App",
    "ArgumentError",
    "AttemptError",
    "AttemptRecord",
    "Cancellation",
    "ConfigurationError",
    "Cron",
    "DependencyFailed",
    "ErrorInfo",
    "Event",
    "Every",
    "Fail",
    "InvalidJobId",
    "InvalidSchedule",
    "Job",
    "JobContext",
    "JobExpired",
    "JobNotFound",
    "JobSpec",
    "JobStateError",
    "JobStatus",
    "JobTimeout",
    "LastRun",
    "LogEntry",
    "LeaseInfo",
    "LeaseLost",
    "MalformedJob",
    "Misfire",
    "MongoschedError",
    "OutOfBounds",
    "Pause",
    "Progress",
    "RateLimit",
    "ResultTooLarge",
    "RetryPolicy",
    "Runner",
    "RunnerInfo",
    "ScheduleEdit",
    "ScheduleFinished",
    "SerializationError",
    "StoreError",
    "StoreUnavailable",
    "Task",
    "TaskNotRegistered",
    "Transaction",
    "TransactionConflict",
    "TransactionError",
    "WaitTimeout",
    "WatchUnavailable",
    "WorkerShutdown",
    "__version__",
    "chain",
    "current_job",
    "group",
]
