"""Checks of values users pass, each raising :class:`ConfigurationError` with a message
that names what was wrong (``what``: ``"task 'emails.send': delay"``, ``"App:
lease_duration"``). One function per kind of value, used everywhere that kind is taken.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from datetime import datetime, timedelta
from typing import Any, overload

from mongosched.errors import ConfigurationError

__all__ = ["aware_datetime", "known_names", "priority", "queue", "seconds", "text", "whole"]

MAX_SECONDS = 100 * 365 * 86400.0
"""A century: longer durations are taken for mistakes (and would overflow datetimes)."""


@overload
def seconds(value: Any, *, what: str, minimum: float = ..., strict: bool = ...) -> float: ...


@overload
def seconds(
    value: Any, *, what: str, minimum: float = ..., strict: bool = ..., allow_none: bool
) -> float | None: ...


def seconds(
    value: Any,
    *,
    what: str,
    minimum: float = 0.0,
    strict: bool = False,
    allow_none: bool = False,
) -> float | None:
    """Seconds as a float from a number or a :class:`~datetime.timedelta`: finite,
    at most a century, and at least ``minimum`` (above it when ``strict``)."""
    if value is None and allow_none:
        return None
    if isinstance(value, timedelta):
        number = value.total_seconds()
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        number = float(value)
    else:
        raise ConfigurationError(
            f"{what} must be a number of seconds or a timedelta, not {type(value).__name__}"
        )
    if not math.isfinite(number) or number > MAX_SECONDS:
        raise ConfigurationError(f"{what} must be a finite number of seconds, not {value!r}")
    if number < minimum or (strict and number == minimum):
        bound = f"> {minimum:g}" if strict else f">= {minimum:g}"
        raise ConfigurationError(f"{what} must be {bound} seconds, not {number:g}")
    return number


def whole(value: Any, *, what: str, minimum: int = 1, maximum: int | None = None) -> int:
    """An int (not a bool) within ``minimum``..``maximum``."""
    if (
        not isinstance(value, int)
        or isinstance(value, bool)
        or value < minimum
        or (maximum is not None and value > maximum)
    ):
        bound = f">= {minimum}" if maximum is None else f"from {minimum} to {maximum}"
        raise ConfigurationError(f"{what} must be an int {bound}, not {value!r}")
    return value


def priority(value: Any, *, task: str) -> float:
    """A priority: a number from 1 (first) to 10 (last). Whole numbers are the scale; a
    fraction sits between two (the Django tasks backend maps Django's 201 priorities so)."""
    if (
        not isinstance(value, (int, float))
        or isinstance(value, bool)
        or not math.isfinite(value)
        or not 1 <= value <= 10
    ):
        raise ConfigurationError(
            f"task {task!r}: priority must be a number from 1 (first) to 10 (last), not {value!r}"
        )
    return value


def text(
    value: Any,
    *,
    what: str,
    expected: str = "a non-empty str",
    empty: bool = False,
    maximum: int | None = None,
) -> str:
    """A str that can be stored: names, keys and messages users give. Not empty
    (unless ``empty``), at most ``maximum`` characters, and UTF-8 (what BSON strings
    are) must hold it: a lone surrogate (``"\\ud800"``, from a bad decode) cannot be
    stored, and would fail as a raw ``UnicodeEncodeError`` at the write."""
    if (
        not isinstance(value, str)
        or (not value and not empty)
        or (maximum is not None and len(value) > maximum)
    ):
        raise ConfigurationError(f"{what} must be {expected}, not {value!r:.60}")
    if not value.isascii():
        try:
            value.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise ConfigurationError(
                f"{what} {value!r:.60} cannot be stored: its character {exc.start} "
                f"({value[exc.start]!r}) is a lone surrogate, which UTF-8 cannot encode"
            ) from None
    return value


def queue(value: Any, *, task: str) -> str:
    return text(value, what=f"task {task!r}: queue")


def aware_datetime(value: Any, *, task: str, what: str = "run_at") -> datetime:
    if not isinstance(value, datetime):
        raise ConfigurationError(
            f"task {task!r}: {what} must be a datetime, not {type(value).__name__}"
        )
    if value.tzinfo is None or value.utcoffset() is None:
        raise ConfigurationError(
            f"task {task!r}: {what} must be timezone-aware (naive datetime {value.isoformat()} "
            "is ambiguous); use datetime(..., tzinfo=timezone.utc)"
        )
    return value


def known_names(given: Iterable[str], known: Iterable[str], *, what: str) -> None:
    """Refuse names outside ``known``, listing them and the known ones (``what``:
    ``"unknown task option"``). For options passed as keywords by callers the type
    checker does not see."""
    unknown = sorted(set(given) - set(known))
    if unknown:
        raise ConfigurationError(
            f"{what}(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}"
        )
