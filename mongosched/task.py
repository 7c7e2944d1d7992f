"""Tasks: what ``@app.task`` returns, and the options of one scheduling call."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Generic, ParamSpec, Protocol, TypeVar

from . import validate
from .errors import ConfigurationError, InvalidSchedule
from .records import JobRecord
from .retry import Retry
from .schedule import Cron, Every, Misfire, Rule
from .store import schedule_id

if TYPE_CHECKING:
    from .job import Job

__all__ = [
    "ConfiguredTask",
    "DEDUPE_SCOPES",
    "JobSpec",
    "SCHEDULE_OPTIONS",
    "Scheduler",
    "Task",
    "schedule_id",
]

P = ParamSpec("P")
R = TypeVar("R")

DEDUPE_SCOPES = ("active", "pending")
SCHEDULE_OPTIONS = frozenset(
    {"delay", "run_at", "priority", "queue", "dedupe_key", "dedupe_scope", "repeat"}
)
"""Keyword arguments of :meth:`Task.schedule` that are options, not payload."""


class Scheduler(Protocol):
    """What a task schedules through (an :class:`~mongosched.App`)."""

    def schedule_spec(self, spec: JobSpec) -> Job: ...


@dataclass(frozen=True)
class ScheduleOptions:
    """Options of one scheduling call; ``None`` means "the task's default"."""

    delay: float | timedelta | None = None
    run_at: datetime | None = None
    priority: int | None = None
    queue: str | None = None
    dedupe_key: str | None = None
    dedupe_scope: str = "active"
    repeat: Rule | None = None

    def merged(self, **options: Any) -> ScheduleOptions:
        unknown = set(options) - SCHEDULE_OPTIONS
        if unknown:
            raise ConfigurationError(
                f"unknown scheduling option(s): {', '.join(sorted(unknown))}; "
                f"known: {', '.join(sorted(SCHEDULE_OPTIONS))}"
            )
        return replace(self, **options)


@dataclass(frozen=True)
class JobSpec:
    """One job to schedule: made by :meth:`Task.job`, taken by :meth:`App.schedule_bulk`."""

    task: Task[Any, Any]
    args: tuple[Any, ...] = ()
    kwargs: dict[str, Any] = field(default_factory=dict)
    options: ScheduleOptions = field(default_factory=ScheduleOptions)

    def build(self, now: datetime) -> JobRecord:
        """The new job, its options validated (the store checks the payload when it
        inserts it). ``now`` comes from the app's clock."""
        return self.task.new_job(self.args, self.kwargs, self.options, now)


class Task(Generic[P, R]):
    """A registered task: call :meth:`schedule` to run it in the background.

    Calling the task object itself runs the function inline, as if undecorated.
    """

    def __init__(
        self,
        app: Scheduler,
        fn: Callable[P, R],
        *,
        name: str | None = None,
        queue: str = "default",
        priority: int = 5,
        retry: Retry | int | None = None,
        timeout: float | timedelta | None = None,
        concurrency: int | None = None,
        cron: str | None = None,
        every: float | timedelta | None = None,
        timezone: str | None = None,
        misfire: str = "coalesce",
        misfire_grace: float | timedelta | None = None,
        max_catchup: int = 100,
    ) -> None:
        self.app = app
        self.fn = fn
        self.name = name or f"{fn.__module__}.{fn.__qualname__}"
        task = self.name
        if not isinstance(self.name, str) or not self.name:
            raise ConfigurationError(f"task name must be a non-empty str, not {name!r}")
        self.queue = validate.queue(queue, task=task)
        self.priority = validate.priority(priority, task=task)
        self.retry = Retry.coerce(retry, task=task)
        self.timeout = validate.seconds(
            timeout, what=f"task {task!r}: timeout", strict=True, allow_none=True
        )
        self.concurrency = (
            None
            if concurrency is None
            else validate.whole(concurrency, what=f"task {task!r}: concurrency")
        )
        self.rule = _rule_from_options(task, cron, every, timezone)
        self.misfire = _misfire(task, misfire, misfire_grace, max_catchup)
        self._check_signature()
        functools.update_wrapper(self, fn)

    # Calling and scheduling ----------------------------------------------------------
    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R:
        """Run the function inline, in this thread (no job is made)."""
        return self.fn(*args, **kwargs)

    def schedule(self, *args: Any, **kwargs: Any) -> Job:
        """Schedule a run; returns the :class:`~mongosched.Job`.

        Positional and keyword arguments are the payload passed to the function,
        except these scheduling options:

        ``delay`` (seconds or timedelta) or ``run_at`` (aware datetime): when it is
        due (default: now). ``priority`` (1 first … 10 last) and ``queue`` override
        the task's. ``dedupe_key`` with ``dedupe_scope`` ``"active"`` (no second job
        while one is pending or running: the existing job is returned) or
        ``"pending"`` (at most one waiting behind a running one). ``repeat``: a
        :class:`~mongosched.Cron` or :class:`~mongosched.Every` rule to run the job
        repeatedly until cancelled.
        """
        options = {k: kwargs.pop(k) for k in list(kwargs) if k in SCHEDULE_OPTIONS}
        return self.configure(**options).schedule(*args, **kwargs)

    def configure(self, **options: Any) -> ConfiguredTask:
        """The same task with scheduling options bound, for payloads whose own
        keyword names you would rather keep apart: ``task.configure(delay=5).schedule(x)``."""
        return ConfiguredTask(self, ScheduleOptions().merged(**options))

    def job(self, *args: Any, **kwargs: Any) -> JobSpec:
        """A job to pass to :meth:`App.schedule_bulk` (takes the same options as
        :meth:`schedule`)."""
        options = {k: kwargs.pop(k) for k in list(kwargs) if k in SCHEDULE_OPTIONS}
        return self.configure(**options).job(*args, **kwargs)

    # New jobs ----------------------------------------------------------------------------------
    def new_job(
        self,
        args: Sequence[Any],
        kwargs: Mapping[str, Any],
        options: ScheduleOptions,
        now: datetime,
    ) -> JobRecord:
        """A new job of this task (not yet stored), its options validated."""
        task = self.name
        queue = validate.queue(
            options.queue if options.queue is not None else self.queue, task=task
        )
        priority = validate.priority(
            options.priority if options.priority is not None else self.priority, task=task
        )
        due = _due_time(task, options, now)
        repeat: dict[str, Any] | None = None
        slot: datetime | None = None
        if options.repeat is not None:
            rule = options.repeat
            if not isinstance(rule, (Cron, Every)):
                raise ConfigurationError(
                    f"task {task!r}: repeat must be a Cron or Every rule, not {rule!r}"
                )
            explicit = options.delay is not None or options.run_at is not None
            due = slot = _first_slot(rule, due, explicit=explicit)
            repeat = {**rule.to_document(), "misfire": self.misfire.to_document()}
        key, scope = _dedupe(task, options.dedupe_key, options.dedupe_scope)
        return JobRecord(
            task=task,
            args=tuple(args),
            kwargs=dict(kwargs),
            queue=queue,
            priority=priority,
            run_at=due,
            max_attempts=self.retry.max_attempts,
            created_at=now,
            updated_at=now,
            repeat=repeat,
            scheduled_for=slot,
            dedupe_key=key,
            dedupe_scope=scope,
        )

    def schedule_record(self, now: datetime) -> JobRecord:
        """This task's own (decorator-declared) repeating schedule, as a new job."""
        assert self.rule is not None
        first = _first_slot(self.rule, now, explicit=False)
        return JobRecord(
            id=schedule_id(self.name),
            task=self.name,
            queue=self.queue,
            priority=self.priority,
            run_at=first,
            scheduled_for=first,
            max_attempts=self.retry.max_attempts,
            repeat=self.repeat_document(),
            created_at=now,
            updated_at=now,
        )

    def repeat_document(self) -> dict[str, Any] | None:
        """The repeat rule this task declares, as a job stores it, or None."""
        if self.rule is None:
            return None
        return {**self.rule.to_document(), "misfire": self.misfire.to_document()}

    def _check_signature(self) -> None:
        try:
            parameters = inspect.signature(self.fn).parameters
        except (TypeError, ValueError):  # builtins without a signature
            return
        clash = sorted(
            name
            for name, p in parameters.items()
            if name in SCHEDULE_OPTIONS
            and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD, p.POSITIONAL_ONLY)
        )
        if clash:
            raise ConfigurationError(
                f"task {self.name!r}: parameter(s) {', '.join(map(repr, clash))} collide with "
                f"scheduling options of schedule() ({', '.join(sorted(SCHEDULE_OPTIONS))}). "
                "Rename the parameter; scheduling options can also be bound apart from the "
                "payload with configure(), e.g. task.configure(delay=5).schedule(...)"
            )

    def __repr__(self) -> str:
        return f"<Task {self.name}>"


class ConfiguredTask:
    """A task with scheduling options bound (see :meth:`Task.configure`)."""

    def __init__(self, task: Task[Any, Any], options: ScheduleOptions) -> None:
        self.task = task
        self.options = options

    def configure(self, **options: Any) -> ConfiguredTask:
        return ConfiguredTask(self.task, self.options.merged(**options))

    def job(self, *args: Any, **kwargs: Any) -> JobSpec:
        return JobSpec(self.task, tuple(args), dict(kwargs), self.options)

    def schedule(self, *args: Any, **kwargs: Any) -> Job:
        """Schedule with the bound options; every keyword argument is payload."""
        return self.task.app.schedule_spec(self.job(*args, **kwargs))

    def __repr__(self) -> str:
        return f"<ConfiguredTask {self.task.name} {self.options}>"


def _due_time(task: str, options: ScheduleOptions, now: datetime) -> datetime:
    if options.delay is not None and options.run_at is not None:
        raise ConfigurationError(f"task {task!r}: give either delay or run_at, not both")
    if options.run_at is not None:
        return validate.aware_datetime(options.run_at, task=task)
    if options.delay is not None:
        delay = validate.seconds(options.delay, what=f"task {task!r}: delay")
        return now + timedelta(seconds=delay)
    return now


def _first_slot(rule: Rule, start: datetime, *, explicit: bool) -> datetime:
    """First run of a repeating job: an explicit start time is a slot itself for
    ``Every`` (and the first cron slot at or after it); otherwise the next slot."""
    if explicit:
        if isinstance(rule, Every):
            return start
        return rule.next_after(start - timedelta(milliseconds=1))
    return rule.next_after(start)


def _dedupe(task: str, key: Any, scope: Any) -> tuple[str | None, str | None]:
    if key is None:
        return None, None
    if not isinstance(key, str) or not key:
        raise ConfigurationError(f"task {task!r}: dedupe_key must be a non-empty str, not {key!r}")
    if scope not in DEDUPE_SCOPES:
        raise ConfigurationError(
            f"task {task!r}: dedupe_scope must be 'active' or 'pending', not {scope!r}"
        )
    return key, scope


def _rule_from_options(
    task: str, cron: str | None, every: float | timedelta | None, timezone: str | None
) -> Rule | None:
    if cron is not None and every is not None:
        raise ConfigurationError(f"task {task!r}: give either cron or every, not both")
    if cron is not None:
        return Cron(cron, timezone or "UTC", task=task)
    if timezone is not None and every is None:
        raise ConfigurationError(f"task {task!r}: timezone applies only with cron")
    if every is not None:
        if timezone is not None:
            raise ConfigurationError(f"task {task!r}: timezone applies only with cron, not every")
        return Every(every, task=task)
    return None


def _misfire(task: str, policy: str, grace: float | timedelta | None, max_catchup: int) -> Misfire:
    try:
        return Misfire(policy=policy, grace=grace, max_catchup=max_catchup)
    except (ConfigurationError, ValueError, TypeError) as exc:
        raise InvalidSchedule(f"task {task!r}: {exc}") from None
