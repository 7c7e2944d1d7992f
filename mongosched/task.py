"""Tasks: what ``@app.task`` returns, and the options of one scheduling call."""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Generic, Literal, ParamSpec, Protocol, TypedDict, TypeVar

from mongosched._core import options as checks
from mongosched._core import validate
from mongosched._core.arguments import Binding, Parameters
from mongosched._core.options import DEDUPE_SCOPES
from mongosched._core.records import JobRecord, JobStatus
from mongosched.errors import ConfigurationError, OutOfBounds
from mongosched.job import Job
from mongosched.limits import KeySpec, RateSpec, key_spec
from mongosched.limits import rate_limit as rate_limit_of
from mongosched.observe import tracing
from mongosched.observe.logs import capture_level
from mongosched.retry import RetryPolicy
from mongosched.schedule import Rule
from mongosched.store import schedule_id

if TYPE_CHECKING:
    # Only for the type checker: ``Unpack`` is in ``typing`` from Python 3.11.
    from typing_extensions import Unpack

    from mongosched.store import Session
    from mongosched.transaction import Transaction

__all__ = [
    "ConfiguredTask",
    "DEDUPE_SCOPES",
    "JobSpec",
    "SCHEDULE_OPTIONS",
    "ScheduleOptions",
    "Scheduler",
    "TASK_OPTIONS",
    "Task",
    "TaskOptions",
    "schedule_id",
]

P = ParamSpec("P")
R = TypeVar("R")

TRANSACTION_TIMEOUT = 60.0
"""The timeout of a transactional task that sets none: MongoDB aborts a transaction
older than this by default (its ``transactionLifetimeLimitSeconds``)."""
DEPENDENCY_FAILURE = ("cancel", "run")


class ScheduleOptions(TypedDict, total=False):
    """The options of :meth:`Task.configure` (each optional; unset: the task's default).

    ``delay`` (seconds or timedelta) or ``run_at`` (aware datetime): when the job is due
    (default: now). ``priority`` (1 first … 10 last; a fraction sorts between) and
    ``queue`` override the task's.
    ``dedupe_key`` with ``dedupe_scope`` ``"active"`` (the default: no second job while
    one is pending or running; the existing job is returned) or ``"pending"`` (at most
    one waiting behind a running one). ``dedupe_window`` (a timedelta or seconds): the
    key stays taken that long after the job was scheduled, even once it finished
    (throttle: at most one job per key per window). ``dedupe="replace"`` (debounce):
    scheduling again while the key's job is pending replaces its arguments and due time
    (the last call wins); a running one is not touched, and a new job waits behind it
    (the ``"pending"`` scope). ``repeat``: a :class:`~mongosched.Cron` or
    :class:`~mongosched.Every` rule to run the job repeatedly until cancelled.
    ``label``: the name the job shows as, and is listed, filtered (``get_jobs(label=)``)
    and paused (``pause(task=)``) by, where a task runs other code on the job's behalf
    (the Django tasks backend labels each job with the Django task's path).

    Flow control (see :doc:`/flow-control`): ``expires`` (a timedelta from now, or an
    aware datetime): if the job has not started by then it ends ``expired``, never run.
    ``timeout`` (seconds or timedelta): how long a run may take, overriding the task's.
    ``depends_on`` (a :class:`~mongosched.Job`, a job id, or a list of them): the job
    waits until all of them completed; ``on_dependency_failure`` ``"cancel"`` (the
    default: it ends cancelled if one fails, is cancelled or expires) or ``"run"``.

    ``session``: a :class:`~mongosched.transaction.Transaction` (``app.transaction()``)
    or a pymongo ``ClientSession`` of the app's client, in a transaction: the job
    exists if and only if that transaction commits (see :doc:`/transactions`).
    """

    delay: float | timedelta
    run_at: datetime
    priority: float
    queue: str
    dedupe_key: str
    dedupe_scope: Literal["active", "pending"]
    dedupe_window: float | timedelta
    dedupe: Literal["keep", "replace"]
    repeat: Rule
    expires: timedelta | datetime
    timeout: float | timedelta
    depends_on: Any
    on_dependency_failure: Literal["cancel", "run"]
    session: Transaction | Session
    label: str


SCHEDULE_OPTIONS = frozenset(ScheduleOptions.__optional_keys__)
"""The names of :class:`ScheduleOptions` (what :meth:`Task.configure` takes)."""


class TaskOptions(TypedDict, total=False):
    """The options of ``@app.task(...)`` (see :meth:`mongosched.App.task`), for
    wrappers that pass them on, as the Flask extension's ``@sched.task(...)``.
    A repeating task gives ``repeat`` (a :class:`~mongosched.Cron` or
    :class:`~mongosched.Every` rule, as :meth:`Task.configure` takes), or its
    shorthands ``cron`` (with ``timezone``) or ``every``."""

    name: str | None
    queue: str
    priority: float
    retry: RetryPolicy | int | None
    timeout: float | timedelta | None
    concurrency: int | None
    repeat: Rule | None
    cron: str | None
    every: float | timedelta | None
    timezone: str | None
    misfire: str
    misfire_grace: float | timedelta | None
    max_catchup: int
    jitter: float | timedelta | None
    overlap: str
    pause_after: int | None
    rate_limit: RateSpec | None
    rate_key: str | Callable[..., Any] | None
    concurrency_key: str | Callable[..., Any] | None
    transactional: bool
    aging: float | timedelta | None
    fair_key: str | Callable[..., Any] | None
    fair_weights: Mapping[str, float] | None
    capture_logs: bool | int


TASK_OPTIONS = frozenset(TaskOptions.__optional_keys__)
"""The names of :class:`TaskOptions` (what ``@app.task(...)`` takes)."""


def task_options(options: Mapping[str, Any]) -> TaskOptions:
    """``options`` as the options of ``@app.task(...)``, unknown names refused (the
    type checker sees them, but not every caller is type-checked)."""
    validate.known_names(options, TASK_OPTIONS, what="unknown task option")
    checked: TaskOptions = TaskOptions(**options)  # type: ignore[typeddict-item]
    return checked


class Scheduler(Protocol):
    """What a task schedules through (an :class:`~mongosched.App`)."""

    def schedule_spec(self, spec: JobSpec) -> Job[Any]: ...

    def schedule_bulk(self, specs: Iterable[JobSpec], *, session: Any = None) -> list[Job[Any]]: ...


@dataclass(frozen=True)
class BoundOptions:
    """The :class:`ScheduleOptions` bound so far; ``None`` means "the task's default"."""

    delay: float | timedelta | None = None
    run_at: datetime | None = None
    priority: float | None = None
    queue: str | None = None
    dedupe_key: str | None = None
    dedupe_scope: str | None = None
    dedupe_window: float | timedelta | None = None
    dedupe: str = "keep"
    repeat: Rule | None = None
    expires: timedelta | datetime | None = None
    timeout: float | timedelta | None = None
    depends_on: Any = None
    on_dependency_failure: str = "cancel"
    session: Any = None
    label: str | None = None

    def merged(self, options: Mapping[str, Any]) -> BoundOptions:
        """These options with ``options`` bound over them (unknown names refused: the
        type checker sees them, but not every caller is type-checked)."""
        validate.known_names(options, SCHEDULE_OPTIONS, what="unknown scheduling option")
        return replace(self, **options)


@dataclass(frozen=True)
class JobSpec:
    """One job to schedule: made by :meth:`Task.job` (or ``task.configure(...).job(...)``),
    taken by :meth:`App.schedule_bulk`. Its arguments are bound to the task function's
    parameters when it is made: :class:`~mongosched.errors.ArgumentError` if the
    function cannot take them."""

    task: Task[Any, Any]
    args: tuple[Any, ...] = ()
    kwargs: dict[str, Any] = field(default_factory=dict)
    options: BoundOptions = field(default_factory=BoundOptions)
    binding: Binding = field(init=False, repr=False, compare=False)
    """Where each parameter's value is in ``args`` and ``kwargs``."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "binding", self.task.parameters.bind(self.args, self.kwargs))

    def build(self, now: datetime) -> JobRecord:
        """The new job, its options validated (the store checks the payload when it
        inserts it). ``now`` comes from the app's clock."""
        return self.task.new_job(self.args, self.kwargs, self.options, now, self.binding)


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
        priority: float = 5,
        retry: RetryPolicy | int | None = None,
        timeout: float | timedelta | None = None,
        concurrency: int | None = None,
        repeat: Rule | None = None,
        cron: str | None = None,
        every: float | timedelta | None = None,
        timezone: str | None = None,
        misfire: str = "coalesce",
        misfire_grace: float | timedelta | None = None,
        max_catchup: int = 100,
        jitter: float | timedelta | None = None,
        overlap: str = "skip",
        pause_after: int | None = None,
        rate_limit: RateSpec | None = None,
        rate_key: str | Callable[..., Any] | None = None,
        concurrency_key: str | Callable[..., Any] | None = None,
        transactional: bool = False,
        aging: float | timedelta | None = None,
        fair_key: str | Callable[..., Any] | None = None,
        fair_weights: Mapping[str, float] | None = None,
        capture_logs: bool | int = True,
    ) -> None:
        self.app = app
        self.fn = fn
        self.name = validate.text(name or f"{fn.__module__}.{fn.__qualname__}", what="task name")
        task = self.name
        self.parameters = Parameters(fn, task)
        """The function's parameters, which a job's arguments are bound to."""
        self.queue = validate.queue(queue, task=task)
        self.priority = validate.priority(priority, task=task)
        self.retry = RetryPolicy.coerce(retry, task=task)
        if not isinstance(transactional, bool):
            raise ConfigurationError(
                f"task {task!r}: transactional must be True or False, not {transactional!r}"
            )
        self.transactional = transactional
        """Whether each run's writes commit with its outcome (see :doc:`/transactions`)."""
        if transactional and timeout is None:
            timeout = TRANSACTION_TIMEOUT
        self.timeout = validate.seconds(
            timeout, what=f"task {task!r}: timeout", strict=True, allow_none=True
        )
        self.concurrency = (
            None
            if concurrency is None
            else validate.whole(concurrency, what=f"task {task!r}: concurrency")
        )
        self.rule = checks.rule_from_options(task, repeat, cron, every, timezone)
        if self.rule is not None:
            self.parameters.bind((), {})  # the jobs of its declared schedule pass none
        self.misfire = checks.misfire(task, misfire, misfire_grace, max_catchup)
        self.runs = checks.runs(task, jitter, overlap, pause_after)
        """Jitter, overlap policy and pause on failure of its repeating jobs."""
        if self.rule is not None:
            checks.check_jitter(task, self.rule, self.runs)
        self.capture_logs = capture_level(capture_logs, task)
        """The level from which its jobs keep their log records (None: they keep none)."""
        self.rate_limit = rate_limit_of(rate_limit, task=task)
        """At most so many of its jobs start per window, across every runner."""
        self.rate_key: KeySpec | None = key_spec(
            rate_key, task=task, field="rate_key", parameters=self.parameters
        )
        """Counts the rate limit per key of each job (None: one count for the task)."""
        self.concurrency_key: KeySpec | None = key_spec(
            concurrency_key, task=task, field="concurrency_key", parameters=self.parameters
        )
        """Counts the concurrency limit per key of each job (None: for the task)."""
        if self.rate_key is not None and self.rate_limit is None:
            raise ConfigurationError(f"task {task!r}: rate_key needs a rate_limit")
        if self.concurrency_key is not None and self.concurrency is None:
            raise ConfigurationError(f"task {task!r}: concurrency_key needs a concurrency")
        self.aging = validate.seconds(
            aging, what=f"task {task!r}: aging", strict=True, allow_none=True
        )
        """Seconds of waiting that raise a job's priority by one level (None: none)."""
        self.fair_key: KeySpec | None = key_spec(
            fair_key, task=task, field="fair_key", parameters=self.parameters
        )
        """Shares claims fairly among the keys of its jobs (None: it does not)."""
        self.fair_weights = checks.fair_weights(task, fair_weights)
        if self.fair_weights and self.fair_key is None:
            raise ConfigurationError(f"task {task!r}: fair_weights needs a fair_key")
        if self.rule is not None:
            self._check_repeating(task)
        functools.update_wrapper(self, fn)

    @property
    def ranked(self) -> bool:
        """Whether its jobs are claimed by rank (they age, or share fairly: see
        :mod:`mongosched._core.ranks`)."""
        return self.aging is not None or self.fair_key is not None

    @property
    def limited(self) -> bool:
        """Whether its claims go through flow control (a rate limit, or a concurrency
        limit): such claims are taken one job at a time."""
        return self.rate_limit is not None or self.concurrency is not None

    @property
    def takes_permit(self) -> bool:
        """Whether each of its runs takes one of the task's concurrency permits (a
        concurrency limit without a key: the global permit; a keyed limit takes its
        key's slot instead)."""
        return self.concurrency is not None and self.concurrency_key is None

    @property
    def writes_own_outcome(self) -> bool:
        """Whether its worker writes each outcome itself, never handing it to a
        batched claim: a limited task (its permit or slot is released after the
        outcome) and a transactional one (its outcome is written in its
        transaction)."""
        return self.limited or self.transactional

    # Calling and scheduling ----------------------------------------------------------
    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R:
        """Run the function inline, in this thread (no job is made)."""
        return self.fn(*args, **kwargs)

    def schedule(self, *args: P.args, **kwargs: P.kwargs) -> Job[R]:
        """Schedule a run, due now with the task's queue and priority; returns the
        :class:`~mongosched.Job`.

        Every argument is payload, passed to the function when the job runs (whatever
        the parameters are called, ``delay`` or ``queue`` included), and bound to its
        parameters now: :class:`~mongosched.errors.ArgumentError` if the function
        cannot take them. Scheduling options go through :meth:`configure`:
        ``task.configure(delay=60).schedule(user_id)``.
        """
        return self.app.schedule_spec(JobSpec(self, args, kwargs))

    def configure(self, **options: Unpack[ScheduleOptions]) -> ConfiguredTask[P, R]:
        """The task with scheduling options bound (see :class:`ScheduleOptions`):
        ``task.configure(delay=5, priority=1).schedule(x)``. An unknown option raises
        :class:`~mongosched.errors.ConfigurationError`; the options' values are checked
        when the job is scheduled."""
        return ConfiguredTask(self, BoundOptions().merged(options))

    def after(self, delay: float | timedelta) -> ConfiguredTask[P, R]:
        """The task bound to run ``delay`` (seconds or a timedelta) after it is
        scheduled: ``send_email.after(60).schedule(42)``, short for
        ``configure(delay=60)``."""
        return self.configure().after(delay)

    def at(self, when: datetime) -> ConfiguredTask[P, R]:
        """The task bound to run at ``when`` (an aware datetime):
        ``report.at(midnight).schedule()``, short for ``configure(run_at=when)``."""
        return self.configure().at(when)

    def job(self, *args: P.args, **kwargs: P.kwargs) -> JobSpec:
        """A job to pass to :meth:`App.schedule_bulk` (every argument is payload; bind
        options with ``task.configure(...).job(...)``)."""
        return JobSpec(self, args, kwargs)

    # New jobs ----------------------------------------------------------------------------------
    def new_job(
        self,
        args: Sequence[Any],
        kwargs: Mapping[str, Any],
        options: BoundOptions,
        now: datetime,
        binding: Binding,
    ) -> JobRecord:
        """A new job of this task (not yet stored), its options validated (``binding``:
        where the function's parameters take their values in ``args`` and ``kwargs``)."""
        task = self.name
        queue = validate.queue(
            options.queue if options.queue is not None else self.queue, task=task
        )
        priority = validate.priority(
            options.priority if options.priority is not None else self.priority, task=task
        )
        due = checks.due_time(task, options.delay, options.run_at, now)
        repeat: dict[str, Any] | None = None
        slot: datetime | None = None
        if options.repeat is not None:
            self._check_repeating(task)
            rule = checks.repeat_rule(task, options.repeat)
            explicit = options.delay is not None or options.run_at is not None
            checks.check_jitter(task, rule, self.runs)
            slot = checks.first_slot(rule, due, explicit=explicit)
            due = self.runs.start(task, slot)
            repeat = self.repeat_document(rule)
        key, scope, until, replace_it = checks.dedupe(
            task,
            options.dedupe_key,
            options.dedupe_scope,
            options.dedupe,
            options.dedupe_window,
            now,
        )
        expires_at = checks.expiry(task, options.expires, now, due)
        timeout = validate.seconds(
            options.timeout, what=f"task {task!r}: timeout", strict=True, allow_none=True
        )
        depends_on = _dependencies(task, options)
        if repeat is not None and (expires_at is not None or depends_on):
            raise ConfigurationError(
                f"task {task!r}: a repeating job takes neither expires nor depends_on"
            )
        if depends_on and key is not None:
            raise ConfigurationError(f"task {task!r}: depends_on and dedupe_key cannot be combined")
        label = options.label
        if label is not None:
            label = validate.text(label, what=f"task {task!r}: label", expected="a non-empty str")
            if repeat is not None:  # a schedule is paused by its own id
                raise ConfigurationError(f"task {task!r}: a repeating job takes no label")
        rate_key = concurrency_key = None
        if self.rate_key is not None:
            rate_key = self.rate_key.key(task, args, kwargs, binding)
        if self.concurrency_key is not None:
            concurrency_key = self.concurrency_key.key(task, args, kwargs, binding)
        fair_key = None
        if self.fair_key is not None:
            fair_key = self.fair_key.key(task, args, kwargs, binding)
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
            dedupe_until=until,
            dedupe_replace=replace_it,
            trace=tracing.carrier(),
            expires_at=expires_at,
            timeout=timeout,
            depends_on=depends_on,
            waiting_for=depends_on,
            status=JobStatus.WAITING if depends_on else JobStatus.PENDING,
            on_dependency_failure=options.on_dependency_failure,
            rate_key=rate_key,
            concurrency_key=concurrency_key,
            label=label,
            aging=self.aging,
            fair_key=fair_key,
            fair_weight=self.fair_weights.get(fair_key, 1.0) if fair_key is not None else 1.0,
        )

    def _check_repeating(self, task: str) -> None:
        ranked = self.aging is not None or self.fair_key is not None
        keyed = self.rate_key is not None or self.concurrency_key is not None
        checks.check_repeating(task, ranked=ranked, keyed=keyed)

    def schedule_record(self, now: datetime) -> JobRecord:
        """This task's own (decorator-declared) repeating schedule, as a new job."""
        assert self.rule is not None
        first = checks.first_slot(self.rule, now, explicit=False)
        return JobRecord(
            id=schedule_id(self.name),
            task=self.name,
            queue=self.queue,
            priority=self.priority,
            run_at=self.runs.start(schedule_id(self.name), first),
            scheduled_for=first,
            max_attempts=self.retry.max_attempts,
            repeat=self.repeat_document(),
            created_at=now,
            updated_at=now,
        )

    def repeat_document(self, rule: Rule | None = None) -> dict[str, Any] | None:
        """The repeat rule this task declares (or ``rule`` with this task's misfire
        policy and run options), as a job stores it, or None."""
        rule = rule or self.rule
        if rule is None:
            return None
        return {
            **rule.to_document(),
            "misfire": self.misfire.to_document(),
            **self.runs.to_document(),
        }

    def __repr__(self) -> str:
        return f"<Task {self.name}>"


class ConfiguredTask(Generic[P, R]):
    """A task with scheduling options bound (what :meth:`Task.configure` returns)."""

    def __init__(self, task: Task[P, R], options: BoundOptions) -> None:
        self.task = task
        self.options = options

    def configure(self, **options: Unpack[ScheduleOptions]) -> ConfiguredTask[P, R]:
        """More options bound over these (a later value wins)."""
        return ConfiguredTask(self.task, self.options.merged(options))

    def after(self, delay: float | timedelta) -> ConfiguredTask[P, R]:
        """These options, due ``delay`` (seconds or a timedelta) after scheduling (a
        ``run_at`` bound before is dropped); checked when the job is scheduled."""
        return ConfiguredTask(self.task, replace(self.options, delay=delay, run_at=None))

    def at(self, when: datetime) -> ConfiguredTask[P, R]:
        """These options, due at ``when`` (an aware datetime; a ``delay`` bound before
        is dropped); checked when the job is scheduled."""
        return ConfiguredTask(self.task, replace(self.options, run_at=when, delay=None))

    def job(self, *args: P.args, **kwargs: P.kwargs) -> JobSpec:
        """A job with these options, to pass to :meth:`App.schedule_bulk`."""
        return JobSpec(self.task, args, kwargs, self.options)

    def schedule(self, *args: P.args, **kwargs: P.kwargs) -> Job[R]:
        """Schedule a run with these options; every argument is payload."""
        return self.task.app.schedule_spec(self.job(*args, **kwargs))

    def __repr__(self) -> str:
        return f"<ConfiguredTask {self.task.name} {self.options}>"


def _dependencies(task: str, options: BoundOptions) -> tuple[Any, ...]:
    """The ids of the jobs ``depends_on`` names (Job objects give theirs; other values
    are ids, checked by the store)."""
    if options.on_dependency_failure not in DEPENDENCY_FAILURE:
        raise ConfigurationError(
            f"task {task!r}: on_dependency_failure must be 'cancel' or 'run', not "
            f"{options.on_dependency_failure!r}"
        )
    value = options.depends_on
    if value is None:
        return ()
    items = list(value) if isinstance(value, (list, tuple, set, frozenset)) else [value]
    ids: list[Any] = []
    for item in items:
        job_id = item.id if isinstance(item, Job) else item
        if job_id is None or isinstance(job_id, (bool, int, float)):
            raise ConfigurationError(
                f"task {task!r}: depends_on takes jobs or job ids, not {item!r}"
            )
        if job_id not in ids:
            ids.append(job_id)
        if len(ids) > validate.MAX_DEPENDENCIES:
            raise OutOfBounds(
                f"task {task!r}: depends_on must name at most "
                f"{validate.MAX_DEPENDENCIES:,} jobs, not {len(items):,}"
            )
    if not ids:
        raise ConfigurationError(f"task {task!r}: depends_on is empty")
    return tuple(ids)
