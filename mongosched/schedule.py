"""Repeating rules: cron in an IANA timezone, fixed intervals, and the misfire policy.
What a repeating job does with its rule's slots (misfire planning, jitter, overlap) is
``_core/runs``.

Pure: no I/O and no clock of its own. Every function takes the instants it works from
and returns aware UTC datetimes.

How cron meets daylight saving time
-----------------------------------
A cron expression names *wall-clock* times in its timezone. Each matching wall-clock
time becomes one real instant:

* an ordinary time is that instant;
* a time that does not exist (inside the spring-forward gap) fires once, at the first
  instant after the gap; several such times collapse into that one instant;
* a time that happens twice (the repeated fall-back hour) fires once, at its first
  occurrence; except that a rule whose hour field starts with ``*`` (``*``, ``*/2``,
  and ``@hourly``) fires at both occurrences, so that an hourly job runs once per real
  hour through the change, as Vixie cron does. Only the hour field decides: ``* 1 * * *``
  and ``30 0-23 * * *`` name their hours, so their repeated times fire once.

In a zone whose clocks move by whole hours, ``0 * * * *`` therefore fires exactly once in
every real hour. Where they move by 30 minutes (``Australia/Lord_Howe``) the local hours
around a change are 30 or 90 real minutes long, and the slots follow the wall clock.

The next slot is always computed from the previous *nominal* slot, never from when a
run finished, so a schedule does not drift.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any, Literal, Protocol
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from croniter import croniter

from mongosched._core import validate
from mongosched.errors import InvalidSchedule

__all__ = [
    "Cron",
    "Every",
    "MISFIRE_POLICIES",
    "Misfire",
    "Rule",
    "SKIP_GRACE",
    "rule_from_document",
]

UTC = timezone.utc
MISFIRE_POLICIES: tuple[str, ...] = ("coalesce", "skip", "all")
SKIP_GRACE = timedelta(seconds=60)
"""How late a slot may start and still count as on time under ``misfire="skip"`` when
no ``misfire_grace`` is given."""
_ALIASES: dict[str, str] = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}
_SEARCH_MARGIN = timedelta(hours=3)  # wider than any DST shift (at most 2 h anywhere)
_ONE_SECOND = timedelta(seconds=1)


class Rule(Protocol):
    """What the runner needs of a repeating rule (:class:`Cron` or :class:`Every`)."""

    def next_after(self, after: datetime) -> datetime:
        """The first slot strictly later than ``after``."""

    def slots_back(self, anchor: datetime, now: datetime) -> Iterator[datetime]:
        """The slots from ``anchor`` (the job's nominal slot) up to ``now``, latest
        first; the last one yielded is always ``anchor`` itself."""

    def to_document(self) -> dict[str, Any]:
        """The rule as stored in a job's ``repeat`` field."""


class Cron:
    """A cron rule: 5 fields (minute hour day month weekday), or 6 with seconds first,
    evaluated on the wall clock of an IANA ``timezone`` (default UTC).

    Day-of-month and day-of-week restricted together match either (classic cron); a
    field counts as restricted unless it is exactly ``*`` (so ``0 0 */10 * 1`` fires on
    the 1st, 11th, 21st and 31st and on every Monday). ``@hourly``, ``@daily``
    (``@midnight``), ``@weekly``, ``@monthly`` and ``@yearly`` (``@annually``) are
    accepted, in any case, and mean exactly their five-field forms.

    >>> Cron("0 9 * * 1-5", timezone="Europe/Berlin")
    Cron('0 9 * * 1-5', timezone='Europe/Berlin')
    """

    __slots__ = ("expression", "timezone", "_zone", "_spec", "_seconds", "_both_folds")

    def __init__(self, expression: str, timezone: str = "UTC", *, task: str | None = None) -> None:
        where = f"task {task!r}: " if task else ""
        if not isinstance(expression, str) or not expression.strip():
            raise InvalidSchedule(f"{where}cron must be a non-empty str, not {expression!r}")
        if not isinstance(timezone, str) or not timezone:
            raise InvalidSchedule(f"{where}timezone must be an IANA name, not {timezone!r}")
        self.expression = " ".join(expression.split())
        self.timezone = timezone
        try:
            self._zone: ZoneInfo | None = None if timezone == "UTC" else ZoneInfo(timezone)
        except (ZoneInfoNotFoundError, ValueError):
            raise InvalidSchedule(
                f"{where}unknown timezone {timezone!r}: use an IANA name such as "
                "'Europe/Berlin' or 'America/New_York'"
            ) from None
        if self.expression.startswith("@"):
            spec = _ALIASES.get(self.expression.lower())
            if spec is None:
                raise InvalidSchedule(
                    f"{where}invalid cron expression {self.expression!r}: unknown alias; "
                    f"use one of {', '.join(_ALIASES)} or 5 or 6 fields"
                )
        else:
            spec = self.expression
        fields = spec.split()
        if len(fields) not in (5, 6):
            raise InvalidSchedule(
                f"{where}invalid cron expression {self.expression!r}: it has {len(fields)} "
                "field(s); give 5 (minute hour day month weekday) or 6 (seconds first)"
            )
        self._spec = spec
        self._seconds = len(fields) == 6
        self._both_folds = fields[2 if self._seconds else 1].startswith("*")
        try:
            probe = self._iter(datetime(2000, 1, 1), backwards=False)
            next(probe)
        except Exception as exc:  # croniter raises several types, all meaning "invalid"
            reason = str(exc) or type(exc).__name__
            if "failed to find" in reason:
                reason = "it never matches a real date"
            raise InvalidSchedule(
                f"{where}invalid cron expression {self.expression!r}: {reason}"
            ) from None

    # Wall-clock iteration ---------------------------------------------------------------
    def _iter(self, start: datetime, *, backwards: bool) -> Iterator[datetime]:
        """Naive wall-clock matches strictly after (or before) naive ``start``."""
        it = croniter(
            self._spec,
            start,
            ret_type=datetime,
            second_at_beginning=self._seconds,
            max_years_between_matches=50,
        )
        step: Callable[[], Any] = it.get_prev if backwards else it.get_next
        while True:
            yield step()

    def _wall(self, instant: datetime) -> datetime:
        """Naive local wall-clock time of an aware instant."""
        if self._zone is None:
            return instant.astimezone(UTC).replace(tzinfo=None)
        return instant.astimezone(self._zone).replace(tzinfo=None)

    def _offset(self, instant: datetime) -> timedelta:
        if self._zone is None:
            return timedelta(0)
        offset = instant.astimezone(self._zone).utcoffset()
        assert offset is not None
        return offset

    def _instants(self, wall: datetime) -> list[datetime]:
        """The real instants at which wall-clock time ``wall`` fires (see module doc)."""
        if self._zone is None:
            return [wall.replace(tzinfo=UTC)]
        first = wall.replace(tzinfo=self._zone, fold=0).astimezone(UTC)
        second = wall.replace(tzinfo=self._zone, fold=1).astimezone(UTC)
        if first == second:
            return [first]
        if self._wall(first) != wall:  # in the gap: fire when the gap ends
            return [self._gap_end(min(first, second), max(first, second))]
        return [first, second] if self._both_folds else [first]

    def _gap_end(self, low: datetime, high: datetime) -> datetime:
        """The instant the offset changes, between ``low`` (before) and ``high``."""
        before = self._offset(low)
        while high - low > _ONE_SECOND:
            middle = low + (high - low) / 2
            middle = middle.replace(microsecond=0)
            if middle <= low:
                break
            if self._offset(middle) == before:
                low = middle
            else:
                high = middle
        return high

    def _instants_from(self, start: datetime, *, backwards: bool) -> Iterator[datetime]:
        """Fire instants in strictly increasing (or decreasing) order, from wall-clock
        matches after (before) naive ``start``. Instants of wall-clock times are
        monotone except the second occurrences of repeated times, which are held in a
        heap until no later wall-clock time can come before them."""
        heap: list[tuple[float, datetime]] = []
        sign = -1.0 if backwards else 1.0
        last: datetime | None = None
        for wall in self._iter(start, backwards=backwards):
            instants = self._instants(wall)
            for instant in instants:
                heapq.heappush(heap, (sign * instant.timestamp(), instant))
            bound = max(instants) if backwards else min(instants)
            while heap and (heap[0][1] >= bound if backwards else heap[0][1] <= bound):
                instant = heapq.heappop(heap)[1]
                if last is None or (instant < last if backwards else instant > last):
                    last = instant
                    yield instant

    # Rule -------------------------------------------------------------------------------------
    def slots_after(self, after: datetime) -> Iterator[datetime]:
        """Every slot strictly later than ``after``, in order."""
        after = validate.schedule_time(after, "after")
        # A repeated hour ahead may hold second occurrences of earlier wall-clock times.
        back = max(timedelta(0), self._offset(after) - self._offset(after + _SEARCH_MARGIN))
        start = (self._wall(after) - back).replace(microsecond=0) - _ONE_SECOND
        return (t for t in self._instants_from(start, backwards=False) if t > after)

    def slots_at_or_before(self, at: datetime) -> Iterator[datetime]:
        """Every slot at or before ``at``, latest first."""
        at = validate.schedule_time(at, "at")
        ahead = max(timedelta(0), self._offset(at - _SEARCH_MARGIN) - self._offset(at))
        start = (self._wall(at) + ahead).replace(microsecond=0) + _ONE_SECOND
        return (t for t in self._instants_from(start, backwards=True) if t <= at)

    def next_after(self, after: datetime) -> datetime:
        return next(self.slots_after(after))

    def slots_back(self, anchor: datetime, now: datetime) -> Iterator[datetime]:
        if now > anchor:
            for slot in self.slots_at_or_before(now):
                if slot <= anchor:
                    break
                yield slot
        yield anchor

    def to_document(self) -> dict[str, Any]:
        return {"cron": self.expression, "timezone": self.timezone}

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Cron) and other.to_document() == self.to_document()

    def __hash__(self) -> int:
        return hash((self.expression, self.timezone))

    def __repr__(self) -> str:
        return f"Cron({self.expression!r}, timezone={self.timezone!r})"

    def __str__(self) -> str:
        return f"cron {self.expression!r} in {self.timezone}"


class Every:
    """A fixed interval: ``Every(300)``, ``Every(timedelta(minutes=5))`` or
    ``Every(minutes=5)``. Slots are the first slot plus whole multiples of it."""

    __slots__ = ("interval",)

    def __init__(
        self,
        interval: float | timedelta | None = None,
        *,
        task: str | None = None,
        **units: float,
    ) -> None:
        where = f"task {task!r}: " if task else ""
        if interval is not None and units:
            raise InvalidSchedule(f"{where}every: give an interval or units, not both")
        if units:
            try:
                interval = timedelta(**units)
            except TypeError as exc:
                raise InvalidSchedule(f"{where}every: {exc}") from None
            except OverflowError:
                raise InvalidSchedule(f"{where}every is too large: {units!r}") from None
        if interval is None:
            raise InvalidSchedule(f"{where}every needs an interval, e.g. Every(seconds=30)")
        try:
            seconds = validate.seconds(interval, what=f"{where}every", strict=True)
        except ValueError as exc:
            raise InvalidSchedule(str(exc)) from None
        if seconds < 0.001:
            raise InvalidSchedule(f"{where}every must be at least 1 ms, not {seconds}")
        try:
            self.interval = timedelta(seconds=seconds)
        except OverflowError:  # inf, or more than timedelta.max
            raise InvalidSchedule(f"{where}every is too large: {seconds} seconds") from None

    def next_after(self, after: datetime) -> datetime:
        return validate.schedule_time(after, "after") + self.interval

    def slots_back(self, anchor: datetime, now: datetime) -> Iterator[datetime]:
        due = int((now - anchor) // self.interval) if now > anchor else 0
        for n in range(due, -1, -1):
            yield anchor + self.interval * n

    def to_document(self) -> dict[str, Any]:
        return {"every": self.interval.total_seconds()}

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Every) and other.interval == self.interval

    def __hash__(self) -> int:
        return hash(self.interval)

    def __repr__(self) -> str:
        return f"Every(seconds={self.interval.total_seconds():g})"

    def __str__(self) -> str:
        return f"every {self.interval.total_seconds():g} s"


def rule_from_document(doc: Mapping[str, Any]) -> Cron | Every:
    """The rule stored in a job's ``repeat`` field."""
    if doc.get("cron") is not None:
        return Cron(doc["cron"], doc.get("timezone") or "UTC")
    if doc.get("every") is not None:
        return Every(doc["every"])
    raise InvalidSchedule(f"repeat field names no rule: {dict(doc)!r}")


@dataclass(frozen=True)
class Misfire:
    """What to do with slots that were missed while nothing ran them.

    :param policy: ``"coalesce"`` (default): one run for all the missed slots, for the
        latest of them, then back to the schedule; ``"skip"``: run none of them, only
        slots that start on time; ``"all"``: run each missed slot once, in order,
        bounded by ``max_catchup``.
    :param grace: a slot that would start later than this after its time is dropped
        (``None``: no limit, except for ``skip``, which allows :data:`SKIP_GRACE`).
    :param max_catchup: with ``"all"``, run at most this many of the latest missed slots.
    """

    policy: Literal["coalesce", "skip", "all"] | str = "coalesce"
    grace: float | timedelta | None = None
    max_catchup: int = 100

    def __post_init__(self) -> None:
        validate.schedule_choice(self.policy, MISFIRE_POLICIES, "misfire policy")
        grace = validate.schedule_seconds(self.grace, "misfire_grace")
        if (
            not isinstance(self.max_catchup, int)
            or isinstance(self.max_catchup, bool)
            or self.max_catchup < 1
        ):
            raise InvalidSchedule(f"max_catchup must be an int >= 1, not {self.max_catchup!r}")
        object.__setattr__(self, "grace", grace)

    @property
    def tolerance(self) -> timedelta | None:
        """How late a slot may start (None: any lateness)."""
        if self.grace is not None:
            return timedelta(seconds=float(self.grace))  # type: ignore[arg-type]
        return SKIP_GRACE if self.policy == "skip" else None

    def to_document(self) -> dict[str, Any]:
        return {"policy": self.policy, "grace": self.grace, "max_catchup": self.max_catchup}

    @classmethod
    def from_document(cls, doc: Mapping[str, Any]) -> Misfire:
        return cls(
            policy=doc.get("policy", "coalesce"),
            grace=doc.get("grace"),
            max_catchup=int(doc.get("max_catchup", 100)),
        )
