"""Checking the options of a task (``@app.task(...)``) and of one scheduling call
(``task.configure(...)``): each option's value, and the values an option takes from
others (the due time, the expiry, the dedupe key's scope and window, the first slot of
a repeating job). Pure: each function names the task in the error it raises."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import datetime, timedelta
from typing import Any, TypeVar

from mongosched._core import validate
from mongosched._core.runs import Runs
from mongosched.errors import ConfigurationError, InvalidSchedule
from mongosched.schedule import Cron, Every, Misfire, Rule

T = TypeVar("T")

__all__ = [
    "DEDUPE_MODES",
    "DEDUPE_SCOPES",
    "check_jitter",
    "check_repeating",
    "dedupe",
    "due_time",
    "expiry",
    "fair_weights",
    "first_slot",
    "misfire",
    "repeat_rule",
    "rule_from_options",
    "runs",
]

DEDUPE_SCOPES = ("active", "pending")
DEDUPE_MODES = ("keep", "replace")


def due_time(
    task: str, delay: float | timedelta | None, run_at: datetime | None, now: datetime
) -> datetime:
    """When a job is due: at ``run_at``, ``delay`` after ``now``, or ``now``."""
    if delay is not None and run_at is not None:
        raise ConfigurationError(f"task {task!r}: give either delay or run_at, not both")
    if run_at is not None:
        return validate.aware_datetime(run_at, task=task)
    if delay is not None:
        delay = validate.seconds(delay, what=f"task {task!r}: delay")
        return now + timedelta(seconds=delay)
    return now


def expiry(
    task: str, expires: timedelta | datetime | None, now: datetime, due: datetime
) -> datetime | None:
    """When a job expires: ``expires`` after ``now`` (a timedelta), or at an aware
    datetime; it must be after the job is due."""
    if expires is None:
        return None
    if isinstance(expires, datetime):
        at = validate.aware_datetime(expires, task=task, what="expires")
    elif isinstance(expires, timedelta):
        seconds = validate.seconds(expires, what=f"task {task!r}: expires", strict=True)
        at = now + timedelta(seconds=seconds)
    else:
        raise ConfigurationError(
            f"task {task!r}: expires must be a timedelta or an aware datetime, not {expires!r}"
        )
    if at <= due:
        raise ConfigurationError(
            f"task {task!r}: expires ({at.isoformat()}) must be after the job is due "
            f"({due.isoformat()})"
        )
    return at


def first_slot(rule: Rule, start: datetime, *, explicit: bool) -> datetime:
    """First run of a repeating job: an explicit start time is a slot itself for
    ``Every`` (and the first cron slot at or after it); otherwise the next slot."""
    if explicit:
        if isinstance(rule, Every):
            return start
        return rule.next_after(start - timedelta(milliseconds=1))
    return rule.next_after(start)


def dedupe(
    task: str,
    key: str | None,
    scope: str | None,
    mode: str,
    window: float | timedelta | None,
    now: datetime,
) -> tuple[str | None, str | None, datetime | None, bool]:
    """The dedupe key, its scope, the end of its throttle window (``window`` after
    ``now``) and whether a new call replaces the pending job (``mode``; see
    :class:`mongosched.task.ScheduleOptions`)."""
    if mode not in DEDUPE_MODES:
        raise ConfigurationError(f"task {task!r}: dedupe must be 'keep' or 'replace', not {mode!r}")
    if key is None:
        if window is not None:
            raise ConfigurationError(f"task {task!r}: dedupe_window needs a dedupe_key")
        if mode == "replace":
            raise ConfigurationError(f"task {task!r}: dedupe='replace' needs a dedupe_key")
        return None, None, None, False
    validate.text(key, what=f"task {task!r}: dedupe_key")
    replace_it = mode == "replace"
    if scope is None:
        scope = "pending" if replace_it else "active"
    if scope not in DEDUPE_SCOPES:
        raise ConfigurationError(
            f"task {task!r}: dedupe_scope must be 'active' or 'pending', not {scope!r}"
        )
    if replace_it and scope != "pending":
        raise ConfigurationError(
            f"task {task!r}: dedupe='replace' keeps the key in the 'pending' scope "
            f"(a running job is not replaced), not {scope!r}"
        )
    until = None
    if window is not None:
        seconds = validate.seconds(window, what=f"task {task!r}: dedupe_window", strict=True)
        until = now + timedelta(seconds=seconds)
    return key, scope, until, replace_it


def fair_weights(task: str, weights: Any) -> dict[str, float]:
    """``fair_weights``: a mapping of fair keys to positive weights (a key not in it
    weighs 1)."""
    if weights is None:
        return {}
    if not isinstance(weights, Mapping):
        raise ConfigurationError(
            f"task {task!r}: fair_weights must map keys to weights, not {weights!r}"
        )
    checked = {}
    for key, weight in weights.items():
        validate.text(key, what=f"task {task!r}: fair_weights key")
        if (
            not isinstance(weight, (int, float))
            or isinstance(weight, bool)
            or not 0 < weight <= 1000
        ):
            raise ConfigurationError(
                f"task {task!r}: fair_weights[{key!r}] must be a number above 0 and at "
                f"most 1000, not {weight!r}"
            )
        checked[key] = float(weight)
    return checked


def repeat_rule(task: str, rule: Any) -> Rule:
    if not isinstance(rule, (Cron, Every)):
        raise ConfigurationError(
            f"task {task!r}: repeat must be a Cron or Every rule, not {rule!r}"
        )
    return rule


def rule_from_options(
    task: str,
    repeat: Rule | None,
    cron: str | None,
    every: float | timedelta | None,
    timezone: str | None,
) -> Rule | None:
    if repeat is not None:
        if cron is not None or every is not None or timezone is not None:
            raise ConfigurationError(
                f"task {task!r}: give one of repeat, cron or every (a Cron rule carries "
                "its timezone: repeat=Cron('0 9 * * *', timezone='Europe/Berlin'))"
            )
        return repeat_rule(task, repeat)
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


def runs(
    task: str, jitter: float | timedelta | None, overlap: str, pause_after: int | None
) -> Runs:
    return _schedule_part(
        task, lambda: Runs(jitter=jitter, overlap=overlap, pause_after=pause_after)
    )


def _schedule_part(task: str, make: Callable[[], T]) -> T:
    """``make()``, its refusal raised as the task's :class:`InvalidSchedule`."""
    try:
        return make()
    except (ConfigurationError, ValueError, TypeError) as exc:
        raise InvalidSchedule(f"task {task!r}: {exc}") from None


def check_repeating(task: str, *, ranked: bool, keyed: bool) -> None:
    """What a repeating job cannot be, whether the task repeats or one call gives
    ``repeat``: ranked (``aging``, ``fair_key``: a schedule runs its slots in turn,
    never behind a rank), or keyed per job (``rate_key``, ``concurrency_key``: its
    limits count for the task)."""
    if ranked:
        raise ConfigurationError(
            f"task {task!r}: a repeating task neither ages nor shares (aging, fair_key)"
        )
    if keyed:
        raise ConfigurationError(
            f"task {task!r}: a repeating task has no per-job keys (rate_key, "
            "concurrency_key); its limits count for the task"
        )


def check_jitter(task: str, rule: Rule, runs: Runs) -> None:
    """A jitter must be shorter than an interval, or a slot could start after the
    next one."""
    jitter = runs.jitter
    if (
        isinstance(rule, Every)
        and isinstance(jitter, float)
        and jitter >= rule.interval.total_seconds()
    ):
        raise InvalidSchedule(
            f"task {task!r}: jitter ({jitter:g} s) must be shorter than its interval "
            f"({rule.interval.total_seconds():g} s)"
        )


def misfire(task: str, policy: str, grace: float | timedelta | None, max_catchup: int) -> Misfire:
    return _schedule_part(
        task, lambda: Misfire(policy=policy, grace=grace, max_catchup=max_catchup)
    )
