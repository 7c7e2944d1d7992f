"""Flow-control settings of a task, as values: its rate limit (:class:`RateLimit`) and
how a job's limit key is taken from its arguments (:class:`KeySpec`). Pure: parsing and
validation only; the store enforces them (see :doc:`/flow-control`)."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, TypeAlias

from mongosched._core import validate
from mongosched._core.arguments import Binding, Parameters
from mongosched.errors import ConfigurationError

__all__ = ["IDLE", "MAX_RATE", "KeySpec", "RateLimit", "RateSpec", "key_spec", "rate_limit"]

MAX_RATE = 1000
"""Starts a rate limit may allow per window: the store keeps the time of each of the
last N starts (a sliding log). For more, use a shorter window ("1000/m", not
"60000/h")."""

IDLE = timedelta(minutes=1)
"""How long a limit's record (a rate log, a key's holders) outlives its last use (its
window, or its last holder's lease) before the store deletes it: storage stays bounded
by the keys in use."""

UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
_SPEC = re.compile(r"^\s*(\d+)\s*/\s*(\d*)\s*([smhd])\s*$")

RateSpec: TypeAlias = "str | timedelta | tuple[int, float | timedelta]"
"""What ``rate_limit=`` takes: ``"100/m"`` (also ``/s``, ``/h``, ``/d``, and a count of
units, ``"10/30s"``), ``(count, seconds or timedelta)``, or a timedelta (one start per
that interval)."""


@dataclass(frozen=True)
class RateLimit:
    """At most ``count`` starts in any window of ``per``."""

    count: int
    per: timedelta

    def __str__(self) -> str:
        seconds = self.per.total_seconds()
        for unit, size in reversed(UNITS.items()):
            if seconds % size == 0:
                n = int(seconds // size)
                return f"{self.count}/{'' if n == 1 else n}{unit}"
        return f"{self.count}/{seconds:g}s"


def rate_limit(value: Any, *, task: str) -> RateLimit | None:
    """The :class:`RateLimit` a ``rate_limit=`` option spells (None stays None); a
    :class:`ConfigurationError` naming the task and the field otherwise."""
    what = f"task {task!r}: rate_limit"
    if value is None:
        return None
    if isinstance(value, str):
        match = _SPEC.match(value)
        if match is None:
            raise ConfigurationError(
                f"{what} {value!r} is not a rate: use 'N/s', 'N/m', 'N/h', 'N/d' (or a count "
                "of units, 'N/30s'), (N, timedelta) or a timedelta"
            )
        count, units, unit = int(match[1]), int(match[2] or 1), match[3]
        per = timedelta(seconds=units * UNITS[unit])
    elif isinstance(value, timedelta):
        count, per = 1, value
    elif isinstance(value, tuple) and len(value) == 2:
        count = value[0]
        per = timedelta(seconds=validate.seconds(value[1], what=f"{what} window"))
    else:
        raise ConfigurationError(
            f"{what} must be a str such as '100/m', (count, timedelta) or a timedelta, "
            f"not {value!r}"
        )
    validate.whole(count, what=f"{what} count", maximum=MAX_RATE)
    seconds = validate.seconds(per, what=f"{what} window", strict=True)
    if seconds < 0.001:
        raise ConfigurationError(f"{what} window must be at least a millisecond, not {per}")
    return RateLimit(count=count, per=per)


@dataclass(frozen=True)
class KeySpec:
    """How a job's limit key is taken from its arguments: the value of the argument
    ``name`` (however it is passed), or what ``fn(*args, **kwargs)`` returns."""

    field: str
    name: str | None = None
    fn: Callable[..., Any] | None = None

    def key(
        self, task: str, args: Sequence[Any], kwargs: Mapping[str, Any], binding: Binding
    ) -> str:
        """The key of one job (a non-empty str; ints are taken as their decimal form);
        ``binding`` says where the function's parameters take their values."""
        what = f"task {task!r}: {self.field}"
        if self.name is not None:
            try:
                value = binding.value(self.name, args, kwargs)
            except KeyError:
                raise ConfigurationError(
                    f"{what} names the argument {self.name!r}, which this job does not pass "
                    f"(pass it as {self.name}=...)"
                ) from None
        else:
            assert self.fn is not None
            try:
                value = self.fn(*args, **kwargs)
            except Exception as exc:
                raise ConfigurationError(
                    f"{what}: the key function raised {type(exc).__name__}: {exc}"
                ) from exc
        if isinstance(value, int) and not isinstance(value, bool):
            value = str(value)
        return validate.text(
            value,
            what=f"{what}: a job's key",
            expected="a non-empty str (or int) of at most 200 characters",
            maximum=200,
        )


def key_spec(value: Any, *, task: str, field: str, parameters: Parameters) -> KeySpec | None:
    """A ``rate_key=``/``concurrency_key=`` option: the name of an argument of the
    task's function (with its ``parameters``) or a callable over the arguments (None
    stays None)."""
    if value is None:
        return None
    if isinstance(value, str) and value.isidentifier():
        parameters.check_name(value, f"task {task!r}: {field}")
        return KeySpec(field=field, name=value)
    if callable(value) and not isinstance(value, str):
        return KeySpec(field=field, fn=value)
    raise ConfigurationError(
        f"task {task!r}: {field} must be the name of an argument or a callable over "
        f"the arguments, not {value!r}"
    )
