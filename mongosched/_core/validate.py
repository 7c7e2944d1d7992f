"""Checks of values users pass, each raising :class:`ConfigurationError` with a message
that names what was wrong (``what``: ``"task 'emails.send': delay"``, ``"App:
lease_duration"``). One function per kind of value, used everywhere that kind is taken.

Every count, text, time and duration has a bound (:data:`MAX_COUNT`, :data:`MAX_TEXT`,
:data:`EARLIEST` to :data:`LATEST`, :data:`MAX_SECONDS`), checked here as the value
enters, so that none reaches the database as a number it cannot hold, a command too big
to send, or a date it cannot compute with; a value beyond its bound raises
:class:`OutOfBounds`. The command and the dashboard read their text into values with the
``parse_*`` functions, which check the same bounds.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from datetime import datetime, timedelta, timezone
from typing import Any, overload

from mongosched.errors import ConfigurationError, InvalidSchedule, OutOfBounds

__all__ = [
    "EARLIEST",
    "LATEST",
    "MAX_COUNT",
    "MAX_DEPENDENCIES",
    "MAX_SECONDS",
    "MAX_TEXT",
    "aware_datetime",
    "known_names",
    "parse_duration",
    "parse_time",
    "parse_whole",
    "priority",
    "queue",
    "schedule_choice",
    "schedule_seconds",
    "schedule_time",
    "seconds",
    "text",
    "whole",
]

MAX_SECONDS = 100 * 365 * 86400.0
"""A century: longer durations are taken for mistakes (and would overflow datetimes)."""
MAX_COUNT = 1_000_000_000
"""The largest count taken (a limit, a skip, a batch): far beyond any real page or
batch, and within what MongoDB's integers hold."""
MAX_TEXT = 1024
"""The most characters of a name, key, actor or reason: far beyond real ones, and small
beside MongoDB's 16 MiB command."""
MAX_DEPENDENCIES = 1000
"""The most jobs one job may wait for (``depends_on``): each is kept twice in its
document (``depends_on`` and ``waiting_for``, up to :data:`MAX_TEXT` characters an id)
and looked up in one query, so the list stays far below MongoDB's 16 MiB document and
command. A fan-in beyond it waits on a job that waits on parts of it."""
EARLIEST = datetime(1900, 1, 1, tzinfo=timezone.utc)
LATEST = datetime(9000, 1, 1, tzinfo=timezone.utc)
"""Times taken are from :data:`EARLIEST` to :data:`LATEST`: a century either side of
them stays within the years a datetime holds, whatever is added to compute slots,
delays and retention."""


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
    if not math.isfinite(number):
        raise ConfigurationError(f"{what} must be a finite number of seconds, not {value!r}")
    if number > MAX_SECONDS:
        raise OutOfBounds(
            f"{what} must be a finite number of seconds, at most a century "
            f"({MAX_SECONDS:.0f}), not {value!r:.60}"
        )
    if number < minimum or (strict and number == minimum):
        bound = f"> {minimum:g}" if strict else f">= {minimum:g}"
        raise ConfigurationError(f"{what} must be {bound} seconds, not {number:g}")
    return number


def whole(value: Any, *, what: str, minimum: int = 1, maximum: int = MAX_COUNT) -> int:
    """An int (not a bool) within ``minimum``..``maximum`` (a bounded count)."""
    usual = f">= {minimum}" if maximum == MAX_COUNT else f"from {minimum} to {maximum}"
    if not isinstance(value, int) or isinstance(value, bool):
        raise ConfigurationError(f"{what} must be an int {usual}, not {value!r:.60}")
    if not minimum <= value <= maximum:
        bound = usual if value < minimum else f"from {minimum} to {maximum}"
        raise OutOfBounds(f"{what} must be an int {bound}, not {_number(value)}")
    return value


def _number(value: int) -> str:
    """An int as a message shows it: in full, or about how many digits it has (a str
    of more than 4,300 digits is refused by Python itself)."""
    if abs(value) < 10**30:
        return str(value)
    return f"a number of about {int(abs(value).bit_length() * math.log10(2)) + 1} digits"


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
    maximum: int = MAX_TEXT,
) -> str:
    """A str that can be stored: names, keys and messages users give (a bounded
    text). Not empty (unless ``empty``), at most ``maximum`` characters, and UTF-8
    (what BSON strings are) must hold it: a lone surrogate (``"\\ud800"``, from a bad
    decode) cannot be stored, and would fail as a raw ``UnicodeEncodeError`` at the
    write."""
    if not isinstance(value, str) or (not value and not empty):
        raise ConfigurationError(f"{what} must be {expected}, not {value!r:.60}")
    if len(value) > maximum:
        raise OutOfBounds(
            f"{what} must be at most {maximum:,} characters, not {len(value):,} ({value[:40]!r}...)"
        )
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
    if not EARLIEST <= value <= LATEST:
        where = "" if task == "*" else f"task {task!r}: "
        raise OutOfBounds(
            f"{where}{what} must be from {EARLIEST.date()} to {LATEST.date()} "
            f"(UTC), not {value.isoformat()}"
        )
    return value


# Text as the command and the dashboard read it --------------------------------------------
_WHOLE = re.compile(r"[0-9]+")
_DURATION = re.compile(r"\s*([0-9]+(?:\.[0-9]+)?)\s*([smhdw]?)\s*")
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


def parse_whole(text: str, *, what: str, minimum: int = 1, maximum: int = MAX_COUNT) -> int:
    """A count written in decimal digits (ASCII only: not ``"²"``, not ``"1e3"``),
    checked as :func:`whole` (its digits counted before they are converted)."""
    value = text.strip()
    if not _WHOLE.fullmatch(value):
        raise ConfigurationError(f"{what} must be a whole number, not {value!r:.40}")
    if len(value.lstrip("0")) > len(str(maximum)):  # too many digits to be in bounds
        raise OutOfBounds(
            f"{what} must be a whole number from {minimum} to {maximum}, not a "
            f"{len(value)}-digit number"
        )
    return whole(int(value), what=what, minimum=minimum, maximum=maximum)


def is_duration(text: str) -> bool:
    """Whether ``text`` is written as :func:`parse_duration` reads it."""
    return _DURATION.fullmatch(text.lower()) is not None


def parse_duration(text: str, *, what: str) -> timedelta:
    """``30s``, ``15m``, ``12h``, ``7d``, ``2w`` (a bare number is seconds), checked
    as :func:`seconds` (at most a century)."""
    match = _DURATION.fullmatch(text.lower())
    if not match:
        raise ConfigurationError(
            f"{what}: invalid duration {text!r:.40}: use a number and a unit, e.g. 30s, "
            "15m, 12h, 7d"
        )
    number = float(match[1]) * _UNITS[match[2] or "s"]  # inf for too many digits
    return timedelta(seconds=seconds(number if math.isfinite(number) else 1e300, what=what))


def parse_time(text: str, *, what: str) -> datetime:
    """An ISO 8601 time (UTC unless it says otherwise; ``Z`` taken), checked as
    :func:`aware_datetime` (from :data:`EARLIEST` to :data:`LATEST`)."""
    try:
        value = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        raise ConfigurationError(
            f"{what}: give a time as ISO 8601, e.g. 2026-11-20T00:00, not {text!r:.40}"
        ) from None
    if value.tzinfo is None:
        value = value.replace(tzinfo=timezone.utc)
    return aware_datetime(value, task="*", what=what)


def known_names(given: Iterable[str], known: Iterable[str], *, what: str) -> None:
    """Refuse names outside ``known``, listing them and the known ones (``what``:
    ``"unknown task option"``). For options passed as keywords by callers the type
    checker does not see."""
    unknown = sorted(set(given) - set(known))
    if unknown:
        raise ConfigurationError(
            f"{what}(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}"
        )


# A schedule's rules and policies: their refusals are InvalidSchedule -----------------------
def schedule_time(value: datetime, what: str) -> datetime:
    """``value`` in UTC, for a rule or a policy to compute with;
    :class:`~mongosched.errors.InvalidSchedule` when it is naive."""
    if value.tzinfo is None or value.utcoffset() is None:
        raise InvalidSchedule(f"{what} must be timezone-aware, not {value!r}")
    return value.astimezone(timezone.utc)


def schedule_choice(value: Any, choices: tuple[str, ...], what: str) -> None:
    """Check that ``value`` is one of ``choices`` (:class:`InvalidSchedule`)."""
    if value not in choices:
        raise InvalidSchedule(f"{what} must be one of {', '.join(choices)}, not {value!r}")


def schedule_seconds(value: Any, what: str) -> float | None:
    """Seconds from a number or a timedelta (None stays None), or
    :class:`InvalidSchedule`."""
    try:
        return seconds(value, what=what, allow_none=True)
    except ValueError as exc:
        raise InvalidSchedule(str(exc)) from None
