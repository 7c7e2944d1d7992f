"""Retry policy: how many attempts a job gets and how long it waits between them.

Pure: no I/O and no clock. The runner asks the policy two questions when an attempt
fails: *should it run again?* (:meth:`RetryPolicy.should_retry`) and *after how long?*
(:meth:`RetryPolicy.delay_for`).
"""

from __future__ import annotations

import random
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Literal, cast

from mongosched._core import validate
from mongosched.errors import ConfigurationError, Fail

__all__ = ["BACKOFFS", "DEFAULT_RETRIES", "DEFAULT_RETRY", "RetryPolicy"]

Backoff = Literal["fixed", "linear", "exponential"]
BACKOFFS: tuple[str, ...] = ("fixed", "linear", "exponential")

DEFAULT_RETRIES = 2
"""Retries after the first attempt when the task names no count (three attempts in all)."""


@dataclass(frozen=True)
class RetryPolicy:
    """How a task retries.

    :param retries: how many times a failed job runs again after its first attempt
        (``0`` = never retry), as Celery's ``max_retries``, Huey's ``retries`` and RQ's
        ``Retry(max=)`` count; default :data:`DEFAULT_RETRIES` (2: three attempts in
        all). An attempt cut short because its runner died (its lease expired) counts too.
    :param backoff: ``"fixed"`` (``delay`` every time), ``"linear"`` (``delay × n``) or
        ``"exponential"`` (``delay × 2ⁿ⁻¹``), where *n* is the attempt that failed.
    :param delay: base delay, seconds or a timedelta.
    :param max_delay: cap on any single delay (``None``: no cap).
    :param jitter: "full jitter": wait a uniformly random time between zero and the
        computed delay, so that jobs that failed together do not retry together.
    :param retry_on: exception types that are retried; any other exception fails the
        job at once, and so does :class:`mongosched.errors.Fail`.
    """

    retries: int = DEFAULT_RETRIES
    backoff: Backoff = "exponential"
    delay: float | timedelta = 1.0
    max_delay: float | timedelta | None = 300.0
    jitter: bool = False
    retry_on: tuple[type[BaseException], ...] = field(default=(Exception,))

    def __post_init__(self) -> None:
        if not isinstance(self.retries, int) or isinstance(self.retries, bool):
            raise ConfigurationError(f"retry: retries must be an int, not {self.retries!r}")
        if self.retries < 0:
            raise ConfigurationError(f"retry: retries must be >= 0, not {self.retries}")
        if self.backoff not in BACKOFFS:
            raise ConfigurationError(
                f"retry: backoff must be one of {', '.join(BACKOFFS)}, not {self.backoff!r}"
            )
        delay = validate.seconds(self.delay, what="retry: delay")
        cap = validate.seconds(self.max_delay, what="retry: max_delay", allow_none=True)
        retry_on = self.retry_on
        if isinstance(retry_on, type):
            retry_on = (retry_on,)
        retry_on = tuple(retry_on) if isinstance(retry_on, Iterable) else retry_on
        if not all(isinstance(t, type) and issubclass(t, BaseException) for t in retry_on):
            raise ConfigurationError("retry: retry_on must be exception classes")
        object.__setattr__(self, "delay", delay)
        object.__setattr__(self, "max_delay", cap)
        object.__setattr__(self, "retry_on", retry_on)

    @property
    def max_attempts(self) -> int:
        """Attempts in all: the first and its retries (what a job stores)."""
        return self.retries + 1

    @classmethod
    def coerce(cls, value: RetryPolicy | int | None, *, task: str = "?") -> RetryPolicy:
        """The policy for a ``retry=`` option: a :class:`RetryPolicy`, an int (that many
        retries after the first attempt, no delay) or ``None`` (the default policy)."""
        if value is None:
            return DEFAULT_RETRY
        if isinstance(value, RetryPolicy):
            return value
        if isinstance(value, int) and not isinstance(value, bool):
            try:
                return cls(retries=value, delay=0.0)
            except ConfigurationError as exc:
                raise ConfigurationError(f"task {task!r}: {exc}") from None
        raise ConfigurationError(
            f"task {task!r}: retry must be a RetryPolicy, an int or None, "
            f"not {type(value).__name__}"
        )

    def should_retry(self, exc: BaseException, attempt: int) -> bool:
        """Whether attempt number ``attempt`` (1-based), which raised ``exc``, is
        followed by another."""
        if attempt >= self.max_attempts or isinstance(exc, Fail):
            return False
        return isinstance(exc, self.retry_on)

    def delay_for(self, attempt: int, rng: random.Random | None = None) -> timedelta:
        """How long to wait after attempt number ``attempt`` (1-based) failed."""
        base = cast(float, self.delay)  # normalised to float in __post_init__
        if self.backoff == "fixed":
            seconds = base
        elif self.backoff == "linear":
            seconds = base * attempt
        else:
            # Cap the exponent: 2**1000 would overflow a float long before any cap applies.
            seconds = base * 2.0 ** min(attempt - 1, 64)
        if self.max_delay is not None:
            seconds = min(seconds, cast(float, self.max_delay))
        if self.jitter:
            seconds = (rng or random).uniform(0.0, seconds)
        return timedelta(seconds=seconds)


DEFAULT_RETRY = RetryPolicy(
    retries=DEFAULT_RETRIES, backoff="exponential", delay=1.0, max_delay=300.0, jitter=True
)
"""Two retries (three attempts in all), exponential backoff from 1 s capped at 5 minutes,
full jitter."""
