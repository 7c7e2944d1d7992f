"""Exceptions raised by mongosched.

Everything a caller may want to catch derives from :class:`MongoschedError`. Two
exceptions are *raised into* task code by the runner and derive from
:class:`BaseException` instead, so that a task's own ``except Exception:`` does not
swallow them: :class:`JobTimeout` and :class:`WorkerShutdown`.
"""

from __future__ import annotations

__all__ = [
    "ArgumentError",
    "ConfigurationError",
    "DependencyFailed",
    "Fail",
    "InvalidSchedule",
    "JobNotFound",
    "JobStateError",
    "JobTimeout",
    "LeaseLost",
    "MalformedJob",
    "MongoschedError",
    "NonDeterminismError",
    "StepFailed",
    "HistoryTooLarge",
    "WorkflowError",
    "OutOfBounds",
    "InvalidJobId",
    "JobExpired",
    "ResultTooLarge",
    "ScheduleFinished",
    "SerializationError",
    "StoreError",
    "StoreUnavailable",
    "TaskNotRegistered",
    "TransactionConflict",
    "TransactionError",
    "WaitTimeout",
    "WatchUnavailable",
    "WorkerShutdown",
]


class MongoschedError(Exception):
    """Base class of every error mongosched raises to its caller."""


class ConfigurationError(MongoschedError, ValueError):
    """An option has a value mongosched cannot use.

    The message names the task (when there is one) and the option.
    """


class OutOfBounds(ConfigurationError):
    """A count, a text, a time or a duration is beyond what mongosched takes: a count
    above its maximum, a text longer than its maximum, a time outside the years it
    stores, a duration longer than a century. Checked where the value enters (the API,
    the command, the dashboard), before anything is written; the message names the
    field (and the task, where there is one) and the bound. The command exits 2 (a
    usage error); the dashboard answers 400."""


class InvalidSchedule(ConfigurationError):
    """A cron expression, timezone, interval or misfire setting is not valid."""


class TaskNotRegistered(MongoschedError, LookupError):
    """No task of that name is registered with the app."""


class SerializationError(MongoschedError, TypeError):
    """A payload or a result cannot be stored as BSON.

    mongosched never pickles: arguments, keyword arguments and return values must be
    BSON-encodable (``None``, ``bool``, ``int``, ``float``, ``str``, ``bytes``,
    ``datetime``, ``ObjectId``, ``Decimal128``, lists and dicts with string keys).
    """


class ArgumentError(MongoschedError, TypeError):
    """The arguments given for a job do not fit its task's function (too many, one
    missing, a keyword it does not take): run, the job could only fail, at every
    attempt, so it is not made. Raised where the job is made (``schedule()``,
    ``job()``, ``update_job()``); the message names the task, the problem and the
    function's parameters."""


class ResultTooLarge(SerializationError):
    """A task returned more than a job keeps (1 MiB as BSON by default). The job fails
    at once, without retrying: running it again would return as much."""


class MalformedJob(MongoschedError):
    """A stored job cannot be processed (a field of the wrong type, written by hand or
    by an older version; a rule that no longer computes). It is failed alone, with this
    error naming the field, and everything else goes on."""


class JobNotFound(MongoschedError, LookupError):
    """No job has that id."""


class InvalidJobId(JobNotFound, ValueError):
    """What was given as a job id cannot be one (not an id, nor its string form). It is
    never passed on into a query."""


class StoreError(MongoschedError):
    """The database refused or failed an operation (the driver's error is the cause)."""


class StoreUnavailable(StoreError, ConnectionError):
    """The database could not be reached in time. Nothing is known to have happened;
    repeating the call is safe."""


class TransactionConflict(StoreError):
    """The transaction conflicted with another write (or lost its connection) and
    was aborted: run it again. On MongoDB it is also a pymongo error labelled
    ``TransientTransactionError``, so pymongo's ``ClientSession.with_transaction``
    (and :meth:`mongosched.App.with_transaction`) run the callback again by
    themselves."""


class TransactionError(ConfigurationError):
    """A job cannot be scheduled in the session given: it is not a session of the
    app's own client, or it is not in a transaction (see :doc:`/transactions`)."""


class WatchUnavailable(StoreError):
    """The database cannot report changes as they happen (a standalone MongoDB server:
    change streams need a replica set or a sharded cluster; or a user without the
    ``changeStream`` privilege). Runners then find due jobs by polling."""


class JobStateError(MongoschedError):
    """The job is not in a state that allows the operation (for example, updating a
    job that is already running)."""


class ScheduleFinished(JobStateError):
    """A repeating schedule named by a pause, resume, trigger, edit or backfill has
    finished (its status is final): a backfill whose slots have all run, or a schedule
    that was cancelled or ended. The message names it and says why; a cancelled or
    failed one comes back with :meth:`App.retry_job <mongosched.App.retry_job>`.
    ``schedule`` is its id."""

    def __init__(self, message: str, schedule: object = None) -> None:
        super().__init__(message)
        self.schedule = schedule


class LeaseLost(MongoschedError):
    """A job's holder stopped renewing its lease (it crashed, hung or lost the
    network) and the lease expired: the error a reaped job records. Another runner may
    have taken the job over; the old holder's writes are refused (fencing)."""


class JobExpired(MongoschedError):
    """The error an expired job records: it had not started before its expiry
    (``configure(expires=...)``), or, after a failed attempt, its retry had not."""


class DependencyFailed(MongoschedError):
    """The error a job records when a job it depends on failed, was cancelled or
    expired, so it will never run (``configure(depends_on=...)``)."""


class WaitTimeout(MongoschedError, TimeoutError):
    """:meth:`mongosched.Job.wait` gave up before the job reached a final status."""


class Fail(MongoschedError):
    """Raise from a task to fail the job at once, without retrying.

    ``raise Fail("customer deleted")`` ends the job ``failed`` with that message,
    whatever attempts its retry policy has left.
    """


class WorkflowError(Fail):
    """A durable workflow cannot go on as written (see :doc:`/workflows`): it fails at
    once, never retried (running it again would meet the same history)."""


class NonDeterminismError(WorkflowError):
    """A workflow's replay met, at a recorded position, another step than the one its
    history holds there: its code changed under a workflow in flight without a
    :func:`~mongosched.workflow.patched` marker."""


class HistoryTooLarge(WorkflowError):
    """A workflow recorded more steps, or more bytes of results, than its history's
    bound allows."""


class StepFailed(WorkflowError):
    """A step's recorded final error, raised again on every replay that reaches it (a
    step ran out of retries): ``error_type`` and the message are the original's."""

    def __init__(self, message: str, error_type: str = "") -> None:
        super().__init__(message)
        self.error_type = error_type


class JobTimeout(BaseException):
    """Raised inside a task's thread when it has run longer than its ``timeout``.

    Derives from :class:`BaseException` so a broad ``except Exception`` in the task
    does not swallow it. A thread blocked inside C code (a socket read, ``time.sleep``)
    sees it only when that call returns.
    """


class WorkerShutdown(BaseException):
    """Raised inside a task's thread when its runner is stopped non-gracefully.

    The job goes back to ``pending`` so another runner runs it again.
    """
