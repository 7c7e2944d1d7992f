"""Pure tests of :mod:`mongosched.schedule`: cron under daylight saving time, cron syntax,
intervals, zero drift, misfire planning and validation.

No database and no sleeping: every instant is written out. The expected UTC instants in
the tables were worked out by hand from the zone rules (checked against tzdata only by
``test_transition_table_matches_tzdata``), never by calling the code under test:

* America/New_York: EST UTC-5, EDT UTC-4; clocks go 02:00 -> 03:00 on 2024-03-10 and
  2025-03-09 (07:00 UTC) and 02:00 -> 01:00 on 2024-11-03 and 2025-11-02 (06:00 UTC).
* Europe/London: GMT UTC+0, BST UTC+1; 01:00 -> 02:00 on 2024-03-31 and 2025-03-30,
  02:00 -> 01:00 on 2024-10-27 and 2025-10-26 (01:00 UTC each time).
* Australia/Lord_Howe: LHST UTC+10:30, LHDT UTC+11, a 30-minute shift. DST ends on the
  first Sunday of April at 02:00 LHDT -> 01:30 LHST (so 01:30-02:00 repeats): 2024-04-07
  and 2025-04-06, i.e. 15:00 UTC the day before. DST starts on the first Sunday of
  October at 02:00 LHST -> 02:30 LHDT (gap 02:00-02:30): 2024-10-06 and 2025-10-05, i.e.
  15:30 UTC the day before.
* Asia/Kolkata: IST UTC+5:30, no DST.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import date, datetime, time, timedelta, timezone
from itertools import islice, takewhile
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mongosched._core.runs import COUNT_LIMIT, MisfirePlan, plan_misfire
from mongosched.errors import ConfigurationError, InvalidSchedule
from mongosched.schedule import (
    SKIP_GRACE,
    Cron,
    Every,
    Misfire,
    Rule,
    rule_from_document,
)

UTC = timezone.utc
H = timedelta(hours=1)
M = timedelta(minutes=1)

NY = "America/New_York"
LONDON = "Europe/London"
LORD_HOWE = "Australia/Lord_Howe"
KOLKATA = "Asia/Kolkata"


def utc(
    year: int, month: int, day: int, hour: int = 0, minute: int = 0, second: int = 0
) -> datetime:
    return datetime(year, month, day, hour, minute, second, tzinfo=UTC)


def first(iterable: Iterable[datetime], n: int) -> list[datetime]:
    return list(islice(iterable, n))


def assert_slots(rule: Cron, after: datetime, expected: list[datetime]) -> None:
    """The slots after ``after`` are ``expected``, found forwards and backwards."""
    assert first(rule.slots_after(after), len(expected)) == expected
    assert first(rule.slots_at_or_before(expected[-1]), len(expected)) == expected[::-1]


# ----------------------------------------------------------------------------------------
# The transitions, by hand (instant, offset before, offset after)
# ----------------------------------------------------------------------------------------
TRANSITIONS: dict[str, list[tuple[datetime, timedelta, timedelta]]] = {
    NY: [
        (utc(2024, 3, 10, 7), -5 * H, -4 * H),
        (utc(2024, 11, 3, 6), -4 * H, -5 * H),
        (utc(2025, 3, 9, 7), -5 * H, -4 * H),
        (utc(2025, 11, 2, 6), -4 * H, -5 * H),
    ],
    LONDON: [
        (utc(2024, 3, 31, 1), 0 * H, 1 * H),
        (utc(2024, 10, 27, 1), 1 * H, 0 * H),
        (utc(2025, 3, 30, 1), 0 * H, 1 * H),
        (utc(2025, 10, 26, 1), 1 * H, 0 * H),
    ],
    LORD_HOWE: [
        (utc(2024, 4, 6, 15), 11 * H, 10.5 * H),
        (utc(2024, 10, 5, 15, 30), 10.5 * H, 11 * H),
        (utc(2025, 4, 5, 15), 11 * H, 10.5 * H),
        (utc(2025, 10, 4, 15, 30), 10.5 * H, 11 * H),
    ],
    KOLKATA: [],
}
ALL_TRANSITIONS = [t for rows in TRANSITIONS.values() for t, _, _ in rows]


@pytest.mark.parametrize("zone", list(TRANSITIONS))
def test_transition_table_matches_tzdata(zone: str) -> None:
    """Sanity: the hand-written transitions above are the ones tzdata has (2024-2025)."""
    tz = ZoneInfo(zone)
    found = []
    t = utc(2024, 1, 1)
    before = t.astimezone(tz).utcoffset()
    while t < utc(2026, 1, 1):
        t += 15 * M
        after = t.astimezone(tz).utcoffset()
        if after != before:
            found.append((t, before, after))
            before = after
    assert found == TRANSITIONS[zone]


# ----------------------------------------------------------------------------------------
# 1. DST: a daily job in the spring-forward gap or the repeated fall-back hour
# ----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Daily:
    """A daily rule at ``wall`` in ``zone``; ``day`` is the local date of a transition
    (``kind`` says which) and ``expected`` the slots after ``after``: the day before,
    that day (exactly one slot) and the day after."""

    zone: str
    wall: str  # "HH:MM"
    day: date
    kind: str  # "gap" | "fold" | "none"
    after: datetime
    expected: list[datetime]

    @property
    def cron(self) -> str:
        hour, minute = self.wall.split(":")
        return f"{int(minute)} {int(hour)} * * *"

    def __str__(self) -> str:
        return f"{self.zone}-{self.wall}-{self.day}-{self.kind}"


DAILY = [
    # spring forward: a wall time inside the gap fires once, when the gap ends
    Daily(NY, "02:30", date(2024, 3, 10), "gap", utc(2024, 3, 9),
          [utc(2024, 3, 9, 7, 30), utc(2024, 3, 10, 7), utc(2024, 3, 11, 6, 30)]),
    Daily(NY, "02:00", date(2024, 3, 10), "gap", utc(2024, 3, 9),
          [utc(2024, 3, 9, 7), utc(2024, 3, 10, 7), utc(2024, 3, 11, 6)]),
    Daily(NY, "02:59", date(2024, 3, 10), "gap", utc(2024, 3, 9),
          [utc(2024, 3, 9, 7, 59), utc(2024, 3, 10, 7), utc(2024, 3, 11, 6, 59)]),
    Daily(NY, "02:30", date(2025, 3, 9), "gap", utc(2025, 3, 8),
          [utc(2025, 3, 8, 7, 30), utc(2025, 3, 9, 7), utc(2025, 3, 10, 6, 30)]),
    Daily(LONDON, "01:30", date(2024, 3, 31), "gap", utc(2024, 3, 30),
          [utc(2024, 3, 30, 1, 30), utc(2024, 3, 31, 1), utc(2024, 4, 1, 0, 30)]),
    Daily(LONDON, "01:00", date(2025, 3, 30), "gap", utc(2025, 3, 29),
          [utc(2025, 3, 29, 1), utc(2025, 3, 30, 1), utc(2025, 3, 31, 0)]),
    Daily(LORD_HOWE, "02:15", date(2024, 10, 6), "gap", utc(2024, 10, 4),
          [utc(2024, 10, 4, 15, 45), utc(2024, 10, 5, 15, 30), utc(2024, 10, 6, 15, 15)]),
    Daily(LORD_HOWE, "02:00", date(2025, 10, 5), "gap", utc(2025, 10, 3),
          [utc(2025, 10, 3, 15, 30), utc(2025, 10, 4, 15, 30), utc(2025, 10, 5, 15)]),
    Daily(LORD_HOWE, "02:29", date(2024, 10, 6), "gap", utc(2024, 10, 4),
          [utc(2024, 10, 4, 15, 59), utc(2024, 10, 5, 15, 30), utc(2024, 10, 6, 15, 29)]),
    Daily(KOLKATA, "02:30", date(2024, 3, 10), "none", utc(2024, 3, 8),
          [utc(2024, 3, 8, 21), utc(2024, 3, 9, 21), utc(2024, 3, 10, 21)]),
    # just outside the gap: ordinary times
    Daily(NY, "03:00", date(2024, 3, 10), "none", utc(2024, 3, 9),
          [utc(2024, 3, 9, 8), utc(2024, 3, 10, 7), utc(2024, 3, 11, 7)]),
    Daily(NY, "01:59", date(2024, 3, 10), "none", utc(2024, 3, 9),
          [utc(2024, 3, 9, 6, 59), utc(2024, 3, 10, 6, 59), utc(2024, 3, 11, 5, 59)]),
    Daily(LORD_HOWE, "02:30", date(2024, 10, 6), "none", utc(2024, 10, 4),
          [utc(2024, 10, 4, 16), utc(2024, 10, 5, 15, 30), utc(2024, 10, 6, 15, 30)]),
    # fall back: a wall time inside the repeated hour fires once, at its first occurrence
    Daily(NY, "01:30", date(2024, 11, 3), "fold", utc(2024, 11, 2),
          [utc(2024, 11, 2, 5, 30), utc(2024, 11, 3, 5, 30), utc(2024, 11, 4, 6, 30)]),
    Daily(NY, "01:00", date(2024, 11, 3), "fold", utc(2024, 11, 2),
          [utc(2024, 11, 2, 5), utc(2024, 11, 3, 5), utc(2024, 11, 4, 6)]),
    Daily(NY, "01:59", date(2025, 11, 2), "fold", utc(2025, 11, 1),
          [utc(2025, 11, 1, 5, 59), utc(2025, 11, 2, 5, 59), utc(2025, 11, 3, 6, 59)]),
    Daily(LONDON, "01:30", date(2024, 10, 27), "fold", utc(2024, 10, 26),
          [utc(2024, 10, 26, 0, 30), utc(2024, 10, 27, 0, 30), utc(2024, 10, 28, 1, 30)]),
    # `after` is exactly the 2025-10-24 slot: slots are strictly later
    Daily(LONDON, "01:00", date(2025, 10, 26), "fold", utc(2025, 10, 24, 0),
          [utc(2025, 10, 25, 0), utc(2025, 10, 26, 0), utc(2025, 10, 27, 1)]),
    Daily(LORD_HOWE, "01:45", date(2024, 4, 7), "fold", utc(2024, 4, 5),
          [utc(2024, 4, 5, 14, 45), utc(2024, 4, 6, 14, 45), utc(2024, 4, 7, 15, 15)]),
    Daily(LORD_HOWE, "01:30", date(2025, 4, 6), "fold", utc(2025, 4, 4),
          [utc(2025, 4, 4, 14, 30), utc(2025, 4, 5, 14, 30), utc(2025, 4, 6, 15)]),
    Daily(KOLKATA, "01:30", date(2024, 11, 3), "none", utc(2024, 11, 1),
          [utc(2024, 11, 1, 20), utc(2024, 11, 2, 20), utc(2024, 11, 3, 20)]),
    # just outside Lord Howe's half-hour fold: 01:00 and 02:00 happen once
    Daily(LORD_HOWE, "01:00", date(2024, 4, 7), "none", utc(2024, 4, 5),
          [utc(2024, 4, 5, 14), utc(2024, 4, 6, 14), utc(2024, 4, 7, 14, 30)]),
    Daily(LORD_HOWE, "02:00", date(2024, 4, 7), "none", utc(2024, 4, 5),
          [utc(2024, 4, 5, 15), utc(2024, 4, 6, 15, 30), utc(2024, 4, 7, 15, 30)]),
]  # fmt: skip


@pytest.mark.parametrize("row", DAILY, ids=str)
def test_daily_job_around_a_transition_fires_once_that_day(row: Daily) -> None:
    rule = Cron(row.cron, timezone=row.zone)
    tz = ZoneInfo(row.zone)

    # Sanity of the row against tzdata: the wall time really is in the gap / repeated.
    wall = datetime.combine(row.day, time.fromisoformat(row.wall))
    fold0, fold1 = wall.replace(tzinfo=tz, fold=0), wall.replace(tzinfo=tz, fold=1)
    in_gap = fold0.astimezone(UTC).astimezone(tz).replace(tzinfo=None) != wall
    repeated = not in_gap and fold0.utcoffset() != fold1.utcoffset()
    assert (in_gap, repeated) == (row.kind == "gap", row.kind == "fold")
    transitions = [t for t, _, _ in TRANSITIONS[row.zone]]
    if row.kind == "gap":
        assert row.expected[1] in transitions  # the first instant after the gap
    if row.kind == "fold":
        assert row.expected[1] == fold0.astimezone(UTC) < fold1.astimezone(UTC)

    # Forwards, backwards and one step at a time agree on the hand-computed instants.
    assert first(rule.slots_after(row.after), 3) == row.expected
    assert first(rule.slots_at_or_before(row.expected[-1]), 3) == row.expected[::-1]
    chained, slot = [], row.after
    for _ in range(3):
        slot = rule.next_after(slot)
        chained.append(slot)
    assert chained == row.expected
    # Exactly one slot falls on the transition day (local calendar), and none is lost
    # or doubled in the three days around it.
    window = list(takewhile(lambda s: s <= row.expected[-1] + 23 * H, rule.slots_after(row.after)))
    assert window == row.expected
    on_day = [s for s in window if s.astimezone(tz).date() == row.day]
    assert on_day == [row.expected[1]]
    assert all(s.tzinfo is UTC for s in window)


@pytest.mark.parametrize(
    ("zone", "cron", "after", "expected"),
    [
        # several wall times inside the gap collapse into the one instant the gap ends
        (NY, "0,20,40 2 * * *", utc(2024, 3, 9, 12),
         [utc(2024, 3, 10, 7), utc(2024, 3, 11, 6), utc(2024, 3, 11, 6, 20)]),
        (NY, "30 2,3 * * *", utc(2024, 3, 9, 12),
         [utc(2024, 3, 10, 7), utc(2024, 3, 10, 7, 30), utc(2024, 3, 11, 6, 30)]),
        (LORD_HOWE, "0,15,30 2 * * *", utc(2024, 10, 5),
         [utc(2024, 10, 5, 15, 30), utc(2024, 10, 6, 15), utc(2024, 10, 6, 15, 15)]),
        (LONDON, "*/10 1 * * *", utc(2024, 3, 30, 12),
         [utc(2024, 3, 31, 1), utc(2024, 4, 1, 0), utc(2024, 4, 1, 0, 10)]),
        # a fixed-hour rule ("0-3" names its hours) fires once in the repeated hour
        (NY, "30 0-3 * * *", utc(2024, 11, 3, 4),
         [utc(2024, 11, 3, 4, 30), utc(2024, 11, 3, 5, 30), utc(2024, 11, 3, 7, 30),
          utc(2024, 11, 3, 8, 30), utc(2024, 11, 4, 5, 30)]),
        (NY, "*/30 1 * * *", utc(2024, 11, 3, 4),
         [utc(2024, 11, 3, 5), utc(2024, 11, 3, 5, 30), utc(2024, 11, 4, 6)]),
    ],
)  # fmt: skip
def test_gap_times_collapse_and_fixed_hours_fire_once_when_repeated(
    zone: str, cron: str, after: datetime, expected: list[datetime]
) -> None:
    assert_slots(Cron(cron, timezone=zone), after, expected)


@pytest.mark.parametrize(
    ("zone", "cron", "at", "expected"),
    [
        # `at` in the second pass of the repeated hour: the first occurrence of a later
        # wall time (01:45 EDT) is already past
        (NY, "45 1 * * *", utc(2024, 11, 3, 6, 30), [utc(2024, 11, 3, 5, 45), utc(2024, 11, 2, 5, 45)]),
        (LONDON, "30 1 * * *", utc(2024, 10, 27, 1, 15), [utc(2024, 10, 27, 0, 30), utc(2024, 10, 26, 0, 30)]),
        (LORD_HOWE, "45 1 * * *", utc(2024, 4, 6, 15, 10), [utc(2024, 4, 6, 14, 45), utc(2024, 4, 5, 14, 45)]),
        (NY, "30 * * * *", utc(2024, 11, 3, 6, 15), [utc(2024, 11, 3, 5, 30), utc(2024, 11, 3, 4, 30)]),
        (NY, "30 * * * *", utc(2024, 11, 3, 6, 45),
         [utc(2024, 11, 3, 6, 30), utc(2024, 11, 3, 5, 30), utc(2024, 11, 3, 4, 30)]),
        # `at` in the first pass: the second occurrences are still to come
        (NY, "30 * * * *", utc(2024, 11, 3, 5, 45), [utc(2024, 11, 3, 5, 30), utc(2024, 11, 3, 4, 30)]),
        # `at` inside a gap's instant range (just before it ends / just after)
        (NY, "30 2 * * *", utc(2024, 3, 10, 6, 59, 59), [utc(2024, 3, 9, 7, 30)]),
        (NY, "30 2 * * *", utc(2024, 3, 10, 7), [utc(2024, 3, 10, 7), utc(2024, 3, 9, 7, 30)]),
    ],
)  # fmt: skip
def test_slots_at_or_before_from_inside_a_transition(
    zone: str, cron: str, at: datetime, expected: list[datetime]
) -> None:
    rule = Cron(cron, timezone=zone)
    assert first(rule.slots_at_or_before(at), len(expected)) == expected
    # and slots_back from the oldest of them agrees
    assert list(rule.slots_back(expected[-1], at)) == expected


@pytest.mark.parametrize(
    ("zone", "cron", "after", "expected"),
    [
        # `after` in the first pass of the repeated hour: the second occurrences of wall
        # times already passed are still ahead (hour "*"), or not at all (fixed hour)
        (NY, "15 * * * *", utc(2024, 11, 3, 5, 30), [utc(2024, 11, 3, 6, 15), utc(2024, 11, 3, 7, 15)]),
        (NY, "15 1 * * *", utc(2024, 11, 3, 5, 30), [utc(2024, 11, 4, 6, 15)]),
        (LORD_HOWE, "40 * * * *", utc(2024, 4, 6, 14, 50), [utc(2024, 4, 6, 15, 10), utc(2024, 4, 6, 16, 10)]),
        # `after` in the second pass
        (NY, "45 1 * * *", utc(2024, 11, 3, 6, 30), [utc(2024, 11, 4, 6, 45)]),
        (NY, "45 * * * *", utc(2024, 11, 3, 6, 30), [utc(2024, 11, 3, 6, 45), utc(2024, 11, 3, 7, 45)]),
    ],
)  # fmt: skip
def test_slots_after_from_inside_a_repeated_hour(
    zone: str, cron: str, after: datetime, expected: list[datetime]
) -> None:
    assert first(Cron(cron, timezone=zone).slots_after(after), len(expected)) == expected


@pytest.mark.parametrize(
    ("zone", "cron", "after", "expected"),
    [
        # whole-hour zones: one slot in every real hour, both occurrences of 01:00
        (NY, "0 * * * *", utc(2024, 3, 10, 3, 30),
         [utc(2024, 3, 10, h) for h in range(4, 10)]),
        (NY, "0 * * * *", utc(2024, 11, 3, 2, 30),
         [utc(2024, 11, 3, h) for h in range(3, 9)]),
        (LONDON, "0 * * * *", utc(2024, 3, 30, 22, 30),
         [utc(2024, 3, 30, 23)] + [utc(2024, 3, 31, h) for h in range(0, 5)]),
        (LONDON, "0 * * * *", utc(2024, 10, 26, 21, 30),
         [utc(2024, 10, 26, 22), utc(2024, 10, 26, 23)] + [utc(2024, 10, 27, h) for h in range(4)]),
        (KOLKATA, "0 * * * *", utc(2024, 3, 10, 3),
         [utc(2024, 3, 10, h, 30) for h in range(3, 9)]),
        (NY, "30 * * * *", utc(2024, 11, 3, 4),
         [utc(2024, 11, 3, 4, 30), utc(2024, 11, 3, 5, 30), utc(2024, 11, 3, 6, 30),
          utc(2024, 11, 3, 7, 30)]),
        (NY, "@hourly", utc(2024, 11, 3, 4, 30),
         [utc(2024, 11, 3, 5), utc(2024, 11, 3, 6), utc(2024, 11, 3, 7)]),
        (NY, "@HOURLY", utc(2024, 11, 3, 4, 30),
         [utc(2024, 11, 3, 5), utc(2024, 11, 3, 6), utc(2024, 11, 3, 7)]),
        (LONDON, "0 0 * * * *", utc(2024, 10, 27, 0, 30),  # 6 fields, hour is field 3
         [utc(2024, 10, 27, 1), utc(2024, 10, 27, 2), utc(2024, 10, 27, 3)]),
        # Lord Howe, fall back (01:30-02:00 repeats): local 01:00 -> 02:00 is 90 real min
        (LORD_HOWE, "0 * * * *", utc(2024, 4, 6, 11, 45),
         [utc(2024, 4, 6, 12), utc(2024, 4, 6, 13), utc(2024, 4, 6, 14),
          utc(2024, 4, 6, 15, 30), utc(2024, 4, 6, 16, 30), utc(2024, 4, 6, 17, 30)]),
        # ... and 01:30 happens twice, so `30 * * * *` fires at both
        (LORD_HOWE, "30 * * * *", utc(2024, 4, 6, 12),
         [utc(2024, 4, 6, 12, 30), utc(2024, 4, 6, 13, 30), utc(2024, 4, 6, 14, 30),
          utc(2024, 4, 6, 15), utc(2024, 4, 6, 16), utc(2024, 4, 6, 17)]),
        # Lord Howe, spring forward (02:00-02:30 missing): 02:00 fires at the gap end
        (LORD_HOWE, "0 * * * *", utc(2024, 10, 5, 12),
         [utc(2024, 10, 5, 12, 30), utc(2024, 10, 5, 13, 30), utc(2024, 10, 5, 14, 30),
          utc(2024, 10, 5, 15, 30), utc(2024, 10, 5, 16), utc(2024, 10, 5, 17)]),
        (LORD_HOWE, "30 * * * *", utc(2024, 10, 5, 12, 30),
         [utc(2024, 10, 5, 13), utc(2024, 10, 5, 14), utc(2024, 10, 5, 15),
          utc(2024, 10, 5, 15, 30), utc(2024, 10, 5, 16, 30), utc(2024, 10, 5, 17, 30)]),
        # every 30 wall-clock minutes is every 30 real minutes through both changes
        (LORD_HOWE, "*/30 * * * *", utc(2024, 4, 6, 12, 50),
         [utc(2024, 4, 6, 13) + k * 30 * M for k in range(7)]),
        (LORD_HOWE, "*/30 * * * *", utc(2025, 10, 4, 13, 50),
         [utc(2025, 10, 4, 14) + k * 30 * M for k in range(6)]),
    ],
)  # fmt: skip
def test_hourly_rules_through_transitions(
    zone: str, cron: str, after: datetime, expected: list[datetime]
) -> None:
    assert_slots(Cron(cron, timezone=zone), after, expected)


@pytest.mark.parametrize(
    "transition",
    [t for zone in (NY, LONDON) for t, _, _ in TRANSITIONS[zone]],
    ids=lambda t: t.isoformat(),
)
@pytest.mark.parametrize("zone", [NY, LONDON, KOLKATA])
def test_hourly_job_fires_once_per_real_hour_in_whole_hour_zones(
    zone: str, transition: datetime
) -> None:
    """48 hours around each New York and London change: one slot per real hour, on the
    zone's minute of the hour (:00 in whole-hour zones, :30 in Kolkata)."""
    rule = Cron("0 * * * *", timezone=zone)
    minute = 30 if zone == KOLKATA else 0
    start = transition - 24 * H
    just_before = start - timedelta(microseconds=1)
    slots = list(takewhile(lambda s: s < transition + 24 * H, rule.slots_after(just_before)))
    assert slots == [start + (minute * M) + k * H for k in range(48)]


# ----------------------------------------------------------------------------------------
# 2. Cron syntax: seconds, aliases, day-of-month / day-of-week, default timezone
# ----------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("cron", "zone", "after", "expected"),
    [
        # 6 fields: seconds first
        ("30 0 9 * * *", "UTC", utc(2024, 6, 1),
         [utc(2024, 6, 1, 9, 0, 30), utc(2024, 6, 2, 9, 0, 30)]),
        ("*/20 * * * * *", "UTC", utc(2024, 6, 1, 12, 0, 5),
         [utc(2024, 6, 1, 12, 0, 20), utc(2024, 6, 1, 12, 0, 40), utc(2024, 6, 1, 12, 1)]),
        ("15,45 30 9 * * *", KOLKATA, utc(2024, 6, 1),
         [utc(2024, 6, 1, 4, 0, 15), utc(2024, 6, 1, 4, 0, 45), utc(2024, 6, 2, 4, 0, 15)]),
        ("30 30 2 * * *", NY, utc(2024, 3, 9, 12),  # seconds inside the gap: gap end
         [utc(2024, 3, 10, 7), utc(2024, 3, 11, 6, 30, 30)]),
        # aliases
        ("@hourly", "UTC", utc(2024, 6, 1, 10, 0, 0), [utc(2024, 6, 1, 11), utc(2024, 6, 1, 12)]),
        ("@daily", "UTC", utc(2024, 6, 1), [utc(2024, 6, 2), utc(2024, 6, 3)]),
        ("@midnight", "UTC", utc(2024, 6, 1), [utc(2024, 6, 2), utc(2024, 6, 3)]),
        ("@daily", LONDON, utc(2024, 6, 1), [utc(2024, 6, 1, 23), utc(2024, 6, 2, 23)]),
        ("@weekly", "UTC", utc(2024, 6, 1), [utc(2024, 6, 2), utc(2024, 6, 9)]),  # Sundays
        ("@monthly", "UTC", utc(2024, 6, 1), [utc(2024, 7, 1), utc(2024, 8, 1)]),
        ("@yearly", "UTC", utc(2024, 6, 1), [utc(2025, 1, 1), utc(2026, 1, 1)]),
        ("@annually", KOLKATA, utc(2024, 6, 1), [utc(2024, 12, 31, 18, 30), utc(2025, 12, 31, 18, 30)]),
        # day of week (0 and 7 are Sunday; 2024-06-01 is a Saturday)
        ("0 9 * * 1-5", "UTC", utc(2024, 6, 1),
         [utc(2024, 6, 3, 9), utc(2024, 6, 4, 9), utc(2024, 6, 5, 9), utc(2024, 6, 6, 9),
          utc(2024, 6, 7, 9), utc(2024, 6, 10, 9)]),
        ("0 9 * * 0", "UTC", utc(2024, 6, 1), [utc(2024, 6, 2, 9), utc(2024, 6, 9, 9)]),
        ("0 9 * * 7", "UTC", utc(2024, 6, 1), [utc(2024, 6, 2, 9), utc(2024, 6, 9, 9)]),
        ("0 9 * * MON", "UTC", utc(2024, 6, 1), [utc(2024, 6, 3, 9), utc(2024, 6, 10, 9)]),
        # day of month: months without a 31st are skipped; Feb 29 only in leap years
        ("0 0 31 * *", "UTC", utc(2024, 1, 31, 12),
         [utc(2024, 3, 31), utc(2024, 5, 31), utc(2024, 7, 31)]),
        ("0 0 29 2 *", "UTC", utc(2024, 3, 1), [utc(2028, 2, 29), utc(2032, 2, 29)]),
        # both restricted: either matches (Fridays, and the 13th; 2024-10-13 is a Sunday)
        ("0 0 13 * 5", "UTC", utc(2024, 9, 1),
         [utc(2024, 9, 6), utc(2024, 9, 13), utc(2024, 9, 20), utc(2024, 9, 27),
          utc(2024, 10, 4), utc(2024, 10, 11), utc(2024, 10, 13), utc(2024, 10, 18)]),
        # "*/10" is restricted too: the 1st/11th/21st/31st, or a Monday
        ("0 0 */10 * 1", "UTC", utc(2024, 6, 1),
         [utc(2024, 6, 3), utc(2024, 6, 10), utc(2024, 6, 11), utc(2024, 6, 17),
          utc(2024, 6, 21), utc(2024, 6, 24), utc(2024, 7, 1), utc(2024, 7, 8)]),
        # one restricted, the other "*": only the restricted one counts
        ("0 0 13 * *", "UTC", utc(2024, 9, 1), [utc(2024, 9, 13), utc(2024, 10, 13)]),
    ],
)  # fmt: skip
def test_cron_syntax(cron: str, zone: str, after: datetime, expected: list[datetime]) -> None:
    assert_slots(Cron(cron, timezone=zone), after, expected)


def test_timezone_defaults_to_utc_and_rules_round_trip_through_documents() -> None:
    rule = Cron("  0   9 * * *  ")
    assert rule.expression == "0 9 * * *"
    assert rule.timezone == "UTC"
    assert rule.to_document() == {"cron": "0 9 * * *", "timezone": "UTC"}
    assert rule.next_after(utc(2024, 6, 1, 9)) == utc(2024, 6, 2, 9)
    assert rule == Cron("0 9 * * *", "UTC") and hash(rule) == hash(Cron("0 9 * * *", "UTC"))
    assert rule != Cron("0 9 * * *", KOLKATA)
    assert Cron("0 9 * * *", "Etc/UTC").next_after(utc(2024, 6, 1)) == utc(2024, 6, 1, 9)
    assert repr(Cron("0 9 * * *", KOLKATA)) == "Cron('0 9 * * *', timezone='Asia/Kolkata')"

    assert rule_from_document({"cron": "0 9 * * *"}) == rule
    assert rule_from_document({"cron": "0 9 * * *", "timezone": None}) == rule
    kolkata = Cron("0 9 * * *", KOLKATA)
    assert rule_from_document(kolkata.to_document()) == kolkata
    every = Every(minutes=5)
    assert every.to_document() == {"every": 300.0}
    assert rule_from_document(every.to_document()) == every


def test_instants_are_aware_utc_whatever_zone_they_are_given_in() -> None:
    rule = Cron("0 9 * * *", KOLKATA)
    after = datetime(2024, 6, 1, 9, 0, tzinfo=ZoneInfo(KOLKATA))  # = 03:30 UTC, a slot
    nxt = rule.next_after(after)
    assert nxt == utc(2024, 6, 2, 3, 30) and nxt.tzinfo is UTC
    assert first(rule.slots_at_or_before(after), 1) == [utc(2024, 6, 1, 3, 30)]
    assert Every(60).next_after(after) == utc(2024, 6, 1, 3, 31)
    assert Every(60).next_after(after).tzinfo is UTC
    with pytest.raises(InvalidSchedule, match="timezone-aware"):
        rule.next_after(datetime(2024, 6, 1))
    with pytest.raises(InvalidSchedule, match="timezone-aware"):
        Every(60).next_after(datetime(2024, 6, 1))


def test_slots_after_and_at_or_before_are_strict_and_inclusive_to_the_microsecond() -> None:
    rule = Cron("0 9 * * *")
    nine = utc(2024, 6, 1, 9)
    assert rule.next_after(nine) == utc(2024, 6, 2, 9)
    assert rule.next_after(nine - timedelta(microseconds=1)) == nine
    assert first(rule.slots_at_or_before(nine), 1) == [nine]
    assert first(rule.slots_at_or_before(nine - timedelta(microseconds=1)), 1) == [
        utc(2024, 5, 31, 9)
    ]
    assert first(rule.slots_at_or_before(nine + timedelta(microseconds=999_999)), 1) == [nine]
    seconds = Cron("* * * * * *")
    t = utc(2024, 6, 1, 9, 0, 0) + timedelta(microseconds=500_000)
    assert seconds.next_after(t) == utc(2024, 6, 1, 9, 0, 1)
    assert first(seconds.slots_at_or_before(t), 1) == [utc(2024, 6, 1, 9)]


@pytest.mark.parametrize(
    ("rule", "anchor", "now", "expected"),
    [
        (Cron("0 9 * * *"), utc(2024, 6, 1, 9), utc(2024, 6, 4, 10),
         [utc(2024, 6, 4, 9), utc(2024, 6, 3, 9), utc(2024, 6, 2, 9), utc(2024, 6, 1, 9)]),
        (Cron("0 9 * * *"), utc(2024, 6, 1, 9), utc(2024, 6, 1, 9, 30), [utc(2024, 6, 1, 9)]),
        (Cron("0 9 * * *"), utc(2024, 6, 1, 9), utc(2024, 5, 1), [utc(2024, 6, 1, 9)]),
        (Cron("0 9 * * *"), utc(2024, 6, 1, 9), utc(2024, 6, 2, 9),
         [utc(2024, 6, 2, 9), utc(2024, 6, 1, 9)]),
        (Every(minutes=10), utc(2024, 6, 1, 9), utc(2024, 6, 1, 9, 35),
         [utc(2024, 6, 1, 9, 30), utc(2024, 6, 1, 9, 20), utc(2024, 6, 1, 9, 10),
          utc(2024, 6, 1, 9)]),
        (Every(minutes=10), utc(2024, 6, 1, 9), utc(2024, 6, 1, 9, 20),
         [utc(2024, 6, 1, 9, 20), utc(2024, 6, 1, 9, 10), utc(2024, 6, 1, 9)]),
        (Every(minutes=10), utc(2024, 6, 1, 9), utc(2024, 6, 1, 8), [utc(2024, 6, 1, 9)]),
    ],
)  # fmt: skip
def test_slots_back_from_now_down_to_the_anchor(
    rule: Rule, anchor: datetime, now: datetime, expected: list[datetime]
) -> None:
    assert list(rule.slots_back(anchor, now)) == expected


def test_every_accepts_seconds_timedeltas_and_units() -> None:
    assert Every(300) == Every(300.0) == Every(timedelta(minutes=5)) == Every(minutes=5)
    assert Every(minutes=5).interval == timedelta(seconds=300)
    assert Every(0.25).next_after(utc(2024, 6, 1)) == utc(2024, 6, 1) + timedelta(milliseconds=250)
    assert Every(hours=1, minutes=30).next_after(utc(2024, 6, 1)) == utc(2024, 6, 1, 1, 30)
    assert repr(Every(minutes=5)) == "Every(seconds=300)"


# ----------------------------------------------------------------------------------------
# 3. Properties (hypothesis) against an independent brute-force reference
# ----------------------------------------------------------------------------------------
# A small grammar; repeats weight the choices towards rules that meet the transitions
# (hour "*" or the hours 1-3, any day), where the DST rules matter.
SECONDS_F = ["0", "30", "15,45", "*/20"]
MINUTES_F = ["0", "30", "59", "0,30", "*/15", "*/7", "15-45/15", "1-3"]
HOURS_F = ["*", "*", "*", "1", "1", "2", "0,2", "1-3", "*/2", "0-23"]
DOMS_F = ["*", "*", "*", "1", "5-9", "*/10"]
MONTHS_F = ["*", "*", "3,4,10,11", "1-6"]
DOWS_F = ["*", "*", "*", "0", "1-5"]


def _expand(field: str, lo: int, hi: int) -> set[int]:
    """The values a field of the small test grammar names (written independently)."""
    values: set[int] = set()
    for part in field.split(","):
        base, _, step = part.partition("/")
        if base == "*":
            a, b = lo, hi
        elif "-" in base:
            a, b = (int(x) for x in base.split("-"))
        else:
            a = b = int(base)
        values.update(range(a, b + 1, int(step or 1)))
    return values


@dataclass(frozen=True)
class Spec:
    expression: str
    seconds: frozenset[int]
    minutes: frozenset[int]
    hours: frozenset[int]
    doms: frozenset[int]
    months: frozenset[int]
    dows: frozenset[int]
    day_or: bool  # both day fields restricted (neither is exactly "*")
    hour_star: bool

    def matches(self, wall: datetime) -> bool:
        """Does the wall-clock minute match (seconds are checked separately)?"""
        dom, dow = wall.day in self.doms, (wall.weekday() + 1) % 7 in self.dows
        return (
            wall.minute in self.minutes
            and wall.hour in self.hours
            and wall.month in self.months
            and (dom or dow if self.day_or else dom and dow)
        )


def _spec(second: str | None, fields: list[str]) -> Spec:
    minute, hour, dom, month, dow = fields
    return Spec(
        expression=" ".join(([second] if second is not None else []) + fields),
        seconds=frozenset(_expand(second, 0, 59) if second is not None else {0}),
        minutes=frozenset(_expand(minute, 0, 59)),
        hours=frozenset(_expand(hour, 0, 23)),
        doms=frozenset(_expand(dom, 1, 31)),
        months=frozenset(_expand(month, 1, 12)),
        dows=frozenset(_expand(dow, 0, 6)),
        day_or=dom != "*" and dow != "*",
        hour_star=hour.startswith("*"),
    )


specs = st.builds(
    _spec,
    st.one_of(st.none(), st.none(), st.sampled_from(SECONDS_F)),
    st.tuples(*(st.sampled_from(f) for f in (MINUTES_F, HOURS_F, DOMS_F, MONTHS_F, DOWS_F))).map(
        list
    ),
)
# offsets from a transition: often within 2 hours of it (inside a gap or either pass of
# a repeated hour), otherwise within 30 hours
near = st.one_of(st.integers(-2 * 3600, 2 * 3600), st.integers(-30 * 3600, 30 * 3600))
micros = st.sampled_from([0, 0, 1, 500_000, 999_999])


@st.composite
def zone_and_base(draw: st.DrawFn) -> tuple[str, datetime]:
    """A zone (more often one with DST) and a transition instant of it (any of them for
    UTC and Kolkata)."""
    zone = draw(st.sampled_from([NY, LONDON, LORD_HOWE] * 2 + ["UTC", KOLKATA]))
    return zone, draw(
        st.sampled_from([t for t, _, _ in TRANSITIONS.get(zone, [])] or ALL_TRANSITIONS)
    )


@st.composite
def starts(draw: st.DrawFn) -> tuple[str, datetime]:
    """A zone and an instant near one of its transitions, to the microsecond."""
    zone, base = draw(zone_and_base())
    return zone, base + timedelta(seconds=draw(near), microseconds=draw(micros))


@st.composite
def windows(draw: st.DrawFn) -> tuple[str, datetime, datetime]:
    """A zone and a window (lo, hi], both ends near the same transition."""
    zone, base = draw(zone_and_base())
    a, b = sorted((draw(near), draw(near)))
    lo = base + timedelta(seconds=a, microseconds=draw(micros))
    hi = base + timedelta(seconds=b, microseconds=draw(micros))
    if hi <= lo:
        hi = lo + timedelta(minutes=draw(st.integers(1, 600)))
    return zone, lo, hi


def reference_slots(spec: Spec, zone: str, lo: datetime, hi: datetime) -> list[datetime]:
    """The fire instants in (lo, hi], by walking every real minute and applying the
    rules of the module docstring directly (every transition is on a whole minute)."""
    tz = ZoneInfo(zone)
    out: set[datetime] = set()
    t = lo.replace(second=0, microsecond=0)
    while t <= hi:
        local, before = t.astimezone(tz), (t - M).astimezone(tz)
        wall = local.replace(tzinfo=None)
        if spec.matches(wall):
            repeated = (
                wall.replace(tzinfo=tz, fold=0).utcoffset()
                != wall.replace(tzinfo=tz, fold=1).utcoffset()
            )
            if not (repeated and local.fold == 1 and not spec.hour_star):
                out.update(t + timedelta(seconds=s) for s in spec.seconds)
        offset, before_offset = local.utcoffset(), before.utcoffset()
        assert offset is not None and before_offset is not None
        if offset > before_offset:  # t ends a gap: walls skipped fire at t
            skipped = before.replace(tzinfo=None) + M
            while skipped < wall:
                if spec.matches(skipped):
                    out.add(t)
                    break
                skipped += M
        t += M
    return sorted(s for s in out if lo < s <= hi)


def is_gap_end_for(spec: Spec, zone: str, slot: datetime) -> bool:
    tz = ZoneInfo(zone)
    """Is ``slot`` the instant a gap ends, with a wall time of the gap matching?"""
    before, local = (slot - M).astimezone(tz), slot.astimezone(tz)
    offset, before_offset = local.utcoffset(), before.utcoffset()
    assert offset is not None and before_offset is not None
    if slot.second or slot.microsecond or not offset > before_offset:
        return False
    wall, end = before.replace(tzinfo=None) + M, local.replace(tzinfo=None)
    while wall < end:
        if spec.matches(wall):
            return True
        wall += M
    return False


PROPERTY = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(spec=specs, window=windows())
def test_property_slots_match_an_independent_reference_forwards_and_backwards(
    spec: Spec, window: tuple[str, datetime, datetime]
) -> None:
    zone, lo, hi = window
    rule = Cron(spec.expression, timezone=zone)
    forwards = list(takewhile(lambda s: s <= hi, rule.slots_after(lo)))
    backwards = list(takewhile(lambda s: s > lo, rule.slots_at_or_before(hi)))[::-1]
    assert forwards == backwards == reference_slots(spec, zone, lo, hi)
    if forwards:
        anchor = forwards[0]
        assert list(rule.slots_back(anchor, hi)) == forwards[::-1]


@PROPERTY
@given(spec=specs, zone_start=starts())
def test_property_each_next_slot_is_later_real_utc_and_matches_the_fields(
    spec: Spec, zone_start: tuple[str, datetime]
) -> None:
    zone, start = zone_start
    rule = Cron(spec.expression, timezone=zone)
    tz = ZoneInfo(zone)
    previous = start
    for _ in range(12):
        slot = rule.next_after(previous)
        assert slot > previous
        assert slot.tzinfo is UTC and slot.utcoffset() == timedelta(0)
        local = slot.astimezone(tz)
        # a real instant: its local wall-clock reading (with its fold) is that instant
        wall = local.replace(tzinfo=None)
        assert wall.replace(tzinfo=tz, fold=local.fold).astimezone(UTC) == slot
        assert slot.microsecond == 0
        matches = spec.matches(wall) and wall.second in spec.seconds
        assert matches or is_gap_end_for(spec, zone, slot), (slot, local)
        if slot - previous <= 48 * H:  # no matching wall time was passed over
            assert reference_slots(spec, zone, previous, slot) == [slot]
        previous = slot


@PROPERTY
@given(
    spec=specs,
    zone_start=starts(),
    late=st.integers(0, 2 * 86400),
    policy=st.sampled_from(["coalesce", "skip", "all"]),
    grace=st.one_of(st.none(), st.integers(0, 86400)),
    max_catchup=st.integers(1, 5),
)
def test_property_plan_misfire_matches_a_reference_on_the_due_slots(
    spec: Spec,
    zone_start: tuple[str, datetime],
    late: int,
    policy: str,
    grace: int | None,
    max_catchup: int,
) -> None:
    zone, start = zone_start
    rule = Cron(spec.expression, timezone=zone)
    anchor = rule.next_after(start)
    now = anchor + timedelta(seconds=late)
    due = [anchor] + list(takewhile(lambda s: s <= now, rule.slots_after(anchor)))
    misfire = Misfire(policy, grace=grace, max_catchup=max_catchup)
    assert plan_misfire(rule, anchor, now, misfire) == reference_plan(rule, due, now, misfire)


def reference_plan(rule: Rule, due: list[datetime], now: datetime, misfire: Misfire) -> MisfirePlan:
    """What the policy says, from the explicit list of due slots (oldest first)."""
    grace = misfire.grace if misfire.grace is not None else None
    if grace is None and misfire.policy == "skip":
        tolerance: timedelta | None = SKIP_GRACE
    else:
        tolerance = None if grace is None else timedelta(seconds=float(grace))  # type: ignore[arg-type]

    def on_time(slot: datetime) -> bool:
        return tolerance is None or now - slot <= tolerance

    if misfire.policy == "all":
        runnable = [s for s in due[-misfire.max_catchup :] if on_time(s)]
        if runnable:
            return MisfirePlan(runnable[0], None, due.index(runnable[0]))
    elif on_time(due[-1]):
        return MisfirePlan(due[-1], None, len(due) - 1)
    return MisfirePlan(None, rule.next_after(due[-1]), len(due))


# ----------------------------------------------------------------------------------------
# 4. Zero drift: 10,000 simulated runs, fake clock, random durations
# ----------------------------------------------------------------------------------------
@dataclass
class Simulation:
    ran: list[datetime]
    missed: int
    max_lateness: timedelta
    overruns: int


def simulate(
    rule: Rule, first_slot: datetime, misfire: Misfire, runs: int, typical: timedelta, seed: int
) -> Simulation:
    """The runner's loop with an injected clock: pick the job up a little after it is
    due (or after the previous run ended), apply the misfire policy, run for a random
    time (now and then much longer than the interval), then wait for
    ``rule.next_after(slot run)``: the nominal slot, never the finish time."""
    rng = random.Random(seed)
    clock, slot = first_slot - 5 * M, first_slot
    ran: list[datetime] = []
    missed, overruns, max_lateness = 0, 0, timedelta(0)
    while len(ran) < runs:
        now = max(clock, slot) + timedelta(milliseconds=rng.randint(0, 1500))
        plan = plan_misfire(rule, slot, now, misfire)
        missed += plan.missed
        if plan.run_slot is None:
            assert plan.next_slot is not None and plan.next_slot > now
            slot, clock = plan.next_slot, now
            continue
        ran.append(plan.run_slot)
        max_lateness = max(max_lateness, now - plan.run_slot)
        if rng.random() < 0.05:
            duration = typical * rng.uniform(1.0, 3.5)  # overran into later slots
            overruns += 1
        else:
            duration = typical * rng.uniform(0.0, 0.9)
        clock = now + duration
        slot = rule.next_after(plan.run_slot)
    return Simulation(ran, missed, max_lateness, overruns)


DRIFT_CASES = [
    # (name, rule, first slot, slot length): both rules' slots are first + k * length;
    # for the cron rule because New York shifts by whole hours and "*" hour rules fire
    # at both occurrences of repeated times, so 10,000 runs (208 days) cross the
    # 2024-11-03 fall-back and the 2025-03-09 spring-forward with no gap or overlap.
    ("every 90.125 s", Every(seconds=90.125), utc(2024, 1, 1, 0, 0, 0) + timedelta(milliseconds=7), timedelta(seconds=90.125)),
    ("cron */30 New York", Cron("*/30 * * * *", NY), utc(2024, 9, 1), 30 * M),
]  # fmt: skip


@pytest.mark.parametrize("policy", ["all", "coalesce"])
@pytest.mark.parametrize(
    ("name", "rule", "start", "length"), DRIFT_CASES, ids=[c[0] for c in DRIFT_CASES]
)
def test_ten_thousand_simulated_runs_show_zero_drift(
    name: str, rule: Rule, start: datetime, length: timedelta, policy: str
) -> None:
    runs = 10_000
    sim = simulate(rule, start, Misfire(policy), runs, typical=length, seed=20240601)
    print(
        f"\n{name}, misfire={policy}: {len(sim.ran)} runs, {sim.overruns} overran, "
        f"{sim.missed} missed slots coalesced, max lateness {sim.max_lateness.total_seconds():.6f} s, "
        f"last slot {sim.ran[-1].isoformat()}"
    )
    assert len(sim.ran) == runs and sim.overruns > 100
    slots = [start + k * length for k in range(runs + sim.missed)]  # independent enumeration
    if policy == "all":
        # every slot runs exactly once, in order, and the 10,000th is exactly where
        # arithmetic puts it
        assert sim.missed == 0
        assert sim.ran == slots
        assert sim.ran[-1] == start + (runs - 1) * length
    else:
        # overruns coalesce the slots they covered: each slot is run or counted
        # missed exactly once, and every run is on a slot
        assert sim.missed > 0
        assert set(sim.ran) <= set(slots)
        assert sim.ran == sorted(set(sim.ran))  # strictly increasing
        assert sim.ran[-1] == slots[-1]
        # the run is always for the latest slot due, so less than one slot late
        assert sim.max_lateness < length
    assert all(s.tzinfo is UTC for s in sim.ran)


# ----------------------------------------------------------------------------------------
# 5. Misfire planning after an outage
# ----------------------------------------------------------------------------------------
DAILY_9 = Cron("0 9 * * *")  # 09:00 UTC
DAY1 = utc(2024, 6, 1, 9)  # the slot the job waited for when everything went down
BACK = utc(2024, 6, 4, 10)  # 3 days later: Jun 1, 2, 3 and 4 09:00 are all due


def run_from(
    rule: Rule, slot: datetime, now: datetime, misfire: Misfire, until: datetime
) -> tuple[list[tuple[datetime, datetime]], int]:
    """Runs (slot, started at) from ``now`` until ``until`` when each run takes no
    time and the runner picks a job up 2 s after it is due."""
    runs: list[tuple[datetime, datetime]] = []
    missed = 0
    while slot <= until:
        plan = plan_misfire(rule, slot, now, misfire)
        missed += plan.missed
        if plan.run_slot is None:
            assert plan.next_slot is not None
            slot = plan.next_slot
        else:
            runs.append((plan.run_slot, now))
            slot = rule.next_after(plan.run_slot)
        now = max(now, slot + timedelta(seconds=2))
    return runs, missed


def test_coalesce_after_a_three_day_outage_runs_once_then_returns_to_its_slots() -> None:
    plan = plan_misfire(DAILY_9, DAY1, BACK, Misfire("coalesce"))
    assert plan == MisfirePlan(run_slot=utc(2024, 6, 4, 9), next_slot=None, missed=3)
    assert Misfire() == Misfire("coalesce", None, 100)  # the default
    runs, missed = run_from(DAILY_9, DAY1, BACK, Misfire(), until=utc(2024, 6, 7, 9))
    assert runs == [
        (utc(2024, 6, 4, 9), BACK),
        (utc(2024, 6, 5, 9), utc(2024, 6, 5, 9, 0, 2)),
        (utc(2024, 6, 6, 9), utc(2024, 6, 6, 9, 0, 2)),
        (utc(2024, 6, 7, 9), utc(2024, 6, 7, 9, 0, 2)),
    ]
    assert missed == 3


def test_skip_runs_none_of_the_missed_slots_but_does_run_one_a_few_seconds_late() -> None:
    plan = plan_misfire(DAILY_9, DAY1, BACK, Misfire("skip"))
    assert plan == MisfirePlan(run_slot=None, next_slot=utc(2024, 6, 5, 9), missed=4)
    runs, missed = run_from(DAILY_9, DAY1, BACK, Misfire("skip"), until=utc(2024, 6, 6, 9))
    assert runs == [
        (utc(2024, 6, 5, 9), utc(2024, 6, 5, 9, 0, 2)),
        (utc(2024, 6, 6, 9), utc(2024, 6, 6, 9, 0, 2)),
    ]
    assert missed == 4
    # a few seconds late, or exactly at the default 60 s tolerance, is on time
    for late in (timedelta(seconds=3), SKIP_GRACE):
        assert plan_misfire(DAILY_9, DAY1, DAY1 + late, Misfire("skip")) == MisfirePlan(
            DAY1, None, 0
        )
    assert SKIP_GRACE == timedelta(seconds=60)
    assert plan_misfire(
        DAILY_9, DAY1, DAY1 + SKIP_GRACE + timedelta(microseconds=1), Misfire("skip")
    ) == MisfirePlan(None, utc(2024, 6, 2, 9), 1)
    # an explicit grace replaces the default tolerance
    assert plan_misfire(
        DAILY_9, DAY1, DAY1 + 5 * M, Misfire("skip", grace=timedelta(minutes=10))
    ) == MisfirePlan(DAY1, None, 0)


def test_all_runs_each_missed_slot_once_in_order_bounded_by_max_catchup() -> None:
    plan = plan_misfire(DAILY_9, DAY1, BACK, Misfire("all"))
    assert plan == MisfirePlan(run_slot=DAY1, next_slot=None, missed=0)
    runs, missed = run_from(DAILY_9, DAY1, BACK, Misfire("all"), until=utc(2024, 6, 6, 9))
    assert [slot for slot, _ in runs] == [utc(2024, 6, d, 9) for d in range(1, 7)]
    assert [at for _, at in runs[:4]] == [BACK] * 4  # caught up at once
    assert missed == 0
    # bounded: only the latest max_catchup missed slots run
    assert plan_misfire(DAILY_9, DAY1, BACK, Misfire("all", max_catchup=2)) == MisfirePlan(
        utc(2024, 6, 3, 9), None, 2
    )
    runs, missed = run_from(DAILY_9, DAY1, BACK, Misfire("all", max_catchup=2), until=BACK)
    assert [slot for slot, _ in runs] == [utc(2024, 6, 3, 9), utc(2024, 6, 4, 9)]
    assert missed == 2
    # the default bound is 100: after 150 days down, the latest 100 slots run
    assert Misfire("all").max_catchup == 100
    back = DAY1 + timedelta(days=149, hours=1)
    plan = plan_misfire(DAILY_9, DAY1, back, Misfire("all"))
    assert plan == MisfirePlan(DAY1 + timedelta(days=50), None, 50)
    runs, missed = run_from(DAILY_9, DAY1, back, Misfire("all"), until=back)
    assert [slot for slot, _ in runs] == [DAY1 + timedelta(days=d) for d in range(50, 150)]
    assert missed == 50


@pytest.mark.parametrize(
    ("misfire", "expected_plan", "expected_runs", "expected_missed"),
    [
        # coalesce: the latest slot is 1 h late; a 30 min grace drops it, 2 h keeps it
        (Misfire("coalesce", grace=timedelta(minutes=30)),
         MisfirePlan(None, utc(2024, 6, 5, 9), 4), [utc(2024, 6, 5, 9)], 4),
        (Misfire("coalesce", grace=7200), MisfirePlan(utc(2024, 6, 4, 9), None, 3),
         [utc(2024, 6, 4, 9), utc(2024, 6, 5, 9)], 3),
        (Misfire("coalesce", grace=3600), MisfirePlan(utc(2024, 6, 4, 9), None, 3),  # exactly
         [utc(2024, 6, 4, 9), utc(2024, 6, 5, 9)], 3),
        # all: slots 1 h and 25 h late are within 2 days, the 49 h and 73 h ones are not
        (Misfire("all", grace=timedelta(days=2)), MisfirePlan(utc(2024, 6, 3, 9), None, 2),
         [utc(2024, 6, 3, 9), utc(2024, 6, 4, 9), utc(2024, 6, 5, 9)], 2),
        (Misfire("all", grace=timedelta(minutes=10)), MisfirePlan(None, utc(2024, 6, 5, 9), 4),
         [utc(2024, 6, 5, 9)], 4),
        # skip with a grace wider than the outage behaves like coalesce
        (Misfire("skip", grace=timedelta(days=1)), MisfirePlan(utc(2024, 6, 4, 9), None, 3),
         [utc(2024, 6, 4, 9), utc(2024, 6, 5, 9)], 3),
    ],
)  # fmt: skip
def test_misfire_grace_drops_runs_later_than_the_grace(
    misfire: Misfire,
    expected_plan: MisfirePlan,
    expected_runs: list[datetime],
    expected_missed: int,
) -> None:
    assert plan_misfire(DAILY_9, DAY1, BACK, misfire) == expected_plan
    runs, missed = run_from(DAILY_9, DAY1, BACK, misfire, until=utc(2024, 6, 5, 9))
    assert [slot for slot, _ in runs] == expected_runs
    assert missed == expected_missed


def test_misfire_with_intervals_across_dst_and_the_count_limit() -> None:
    every = Every(minutes=10)
    anchor = utc(2024, 6, 1, 9)
    # 65 min late: 7 slots due (9:00 ... 10:00)
    now = anchor + 65 * M
    assert plan_misfire(every, anchor, now, Misfire()) == MisfirePlan(anchor + 60 * M, None, 6)
    assert plan_misfire(every, anchor, now, Misfire("skip")) == MisfirePlan(
        None, anchor + 70 * M, 7
    )
    assert plan_misfire(every, anchor, now, Misfire("all", max_catchup=3)) == MisfirePlan(
        anchor + 40 * M, None, 4
    )
    # a daily New York job down across the spring-forward day: the gap slot counts once
    ny = Cron("30 2 * * *", NY)
    plan = plan_misfire(ny, utc(2024, 3, 9, 7, 30), utc(2024, 3, 11, 12), Misfire())
    assert plan == MisfirePlan(utc(2024, 3, 11, 6, 30), None, 2)
    plan = plan_misfire(ny, utc(2024, 3, 9, 7, 30), utc(2024, 3, 11, 12), Misfire("all"))
    assert plan == MisfirePlan(utc(2024, 3, 9, 7, 30), None, 0)
    assert ny.next_after(utc(2024, 3, 9, 7, 30)) == utc(2024, 3, 10, 7)
    # missed slots are counted up to COUNT_LIMIT (one day of 1 s slots = 86,400)
    plan = plan_misfire(Every(1), anchor, anchor + timedelta(days=1), Misfire())
    assert plan == MisfirePlan(anchor + timedelta(days=1), None, COUNT_LIMIT)
    # picked up before its slot (clock skew): the slot itself runs
    assert plan_misfire(every, anchor, anchor - M, Misfire("skip")) == MisfirePlan(anchor, None, 0)


def test_misfire_round_trips_through_its_document() -> None:
    misfire = Misfire("all", grace=timedelta(minutes=5), max_catchup=7)
    assert misfire.grace == 300.0
    assert misfire.to_document() == {"policy": "all", "grace": 300.0, "max_catchup": 7}
    assert Misfire.from_document(misfire.to_document()) == misfire
    assert Misfire.from_document({}) == Misfire()
    assert misfire.tolerance == timedelta(minutes=5)
    assert Misfire().tolerance is None
    assert Misfire("skip").tolerance == SKIP_GRACE


# ----------------------------------------------------------------------------------------
# 6. Validation: every bad value is refused with the value and the reason
# ----------------------------------------------------------------------------------------
BAD_CRONS = [
    ("0 0 30 2 *", "never matches"),  # February 30th
    ("0 0 31 4 *", "never matches"),  # April 31st
    ("0 0 31 2,4,6,9,11 *", "never matches"),
    ("61 * * * *", "out of range"),
    ("0 24 * * *", "out of range"),
    ("0 0 0 * *", "out of range"),
    ("0 0 * 13 *", "out of range"),
    ("0 0 * * 8", "out of range"),
    ("*/0 * * * *", "step '0'"),
    ("0-60 * * * *", "out of bands"),
    ("a b c d e", "not acceptable"),
    ("* * * *", "it has 4 field(s); give 5"),
    ("* * * * * * *", "it has 7 field(s); give 5"),
    ("every day", "it has 2 field(s); give 5"),
    ("@fortnightly", "unknown alias"),
    ("@hourly 5", "unknown alias"),
    ("@reboot", "unknown alias"),
]


@pytest.mark.parametrize(("expression", "reason"), BAD_CRONS)
@pytest.mark.parametrize("task", [None, "nightly_report"])
def test_invalid_cron_expressions_are_refused(
    expression: str, reason: str, task: str | None
) -> None:
    with pytest.raises(InvalidSchedule) as caught:
        Cron(expression, timezone=NY, task=task)
    message = str(caught.value)
    assert f"invalid cron expression {expression!r}" in message
    assert reason in message
    assert ("task 'nightly_report'" in message) == (task is not None)
    assert isinstance(caught.value, ConfigurationError)


REFUSALS: list[tuple[str, Callable[[], Any], list[str]]] = [
    ("empty cron", lambda: Cron("  ", task="t1"), ["task 't1'", "non-empty", "'  '"]),
    ("cron not a str", lambda: Cron(5, task="t1"), ["task 't1'", "non-empty str", "5"]),  # type: ignore[arg-type]
    ("unknown zone", lambda: Cron("0 9 * * *", "Mars/Olympus", task="t1"),
     ["task 't1'", "unknown timezone 'Mars/Olympus'", "IANA"]),
    ("misspelt zone", lambda: Cron("0 9 * * *", "America/New_Yrok"),
     ["unknown timezone 'America/New_Yrok'"]),
    ("path as zone", lambda: Cron("0 9 * * *", "../../etc/passwd"),
     ["unknown timezone '../../etc/passwd'"]),
    ("zone with a space", lambda: Cron("0 9 * * *", "Europe/London ", task="t1"),
     ["task 't1'", "unknown timezone 'Europe/London '"]),
    ("empty zone", lambda: Cron("0 9 * * *", ""), ["timezone must be an IANA name", "''"]),
    ("zone None", lambda: Cron("0 9 * * *", None), ["timezone must be an IANA name", "None"]),  # type: ignore[arg-type]
    ("every 0", lambda: Every(0, task="t2"), ["task 't2'", "every must be > 0", "not 0"]),
    ("every -1", lambda: Every(-1, task="t2"), ["task 't2'", "> 0", "-1"]),
    ("every 0 timedelta", lambda: Every(timedelta(0)), ["every must be > 0 seconds", "not 0"]),
    ("every -5 s units", lambda: Every(seconds=-5), ["every must be > 0", "-5"]),
    ("every nan", lambda: Every(float("nan")), ["every must be a finite number", "nan"]),
    ("every 0.1 ms", lambda: Every(0.0001), ["at least 1 ms", "0.0001"]),
    ("every inf", lambda: Every(float("inf"), task="t2"), ["task 't2'", "finite", "inf"]),
    ("every 1e20", lambda: Every(1e20), ["finite number of seconds", "1e+20"]),
    ("every 1e10 days", lambda: Every(days=1e10), ["too large", "days"]),
    ("every str", lambda: Every("5", task="t2"), ["task 't2'", "number of seconds", "str"]),  # type: ignore[arg-type]
    ("every bool", lambda: Every(True), ["number of seconds", "bool"]),
    ("every nothing", lambda: Every(task="t2"), ["task 't2'", "needs an interval"]),
    ("every both", lambda: Every(5, seconds=5), ["interval or units, not both"]),
    ("every bad unit", lambda: Every(fortnights=1), ["fortnights"]),
    ("bad policy", lambda: Misfire("sometimes"), ["'sometimes'", "coalesce, skip, all"]),
    ("max_catchup 0", lambda: Misfire("all", max_catchup=0), ["max_catchup", ">= 1", "0"]),
    ("max_catchup -3", lambda: Misfire(max_catchup=-3), ["max_catchup", "-3"]),
    ("max_catchup float", lambda: Misfire(max_catchup=2.5), ["max_catchup", "int", "2.5"]),  # type: ignore[arg-type]
    ("max_catchup bool", lambda: Misfire(max_catchup=True), ["max_catchup", "True"]),
    ("negative grace", lambda: Misfire(grace=-1), ["misfire_grace", ">= 0", "-1"]),
    ("negative grace td", lambda: Misfire(grace=timedelta(seconds=-30)), ["misfire_grace", "-30"]),
    ("nan grace", lambda: Misfire(grace=float("nan")), ["misfire_grace", "nan"]),
    ("inf grace", lambda: Misfire(grace=float("inf")), ["misfire_grace", "finite", "inf"]),
    ("str grace", lambda: Misfire(grace="10"), ["misfire_grace", "number of seconds", "str"]),  # type: ignore[arg-type]
    ("no rule", lambda: rule_from_document({"misfire": {}}), ["names no rule", "misfire"]),
    ("stored bad cron", lambda: rule_from_document({"cron": "0 0 30 2 *"}), ["'0 0 30 2 *'"]),
]  # fmt: skip


@pytest.mark.parametrize(("case", "make", "parts"), REFUSALS, ids=[r[0] for r in REFUSALS])
def test_bad_values_are_refused_with_the_value_and_the_reason(
    case: str, make: Callable[[], Any], parts: list[str]
) -> None:
    with pytest.raises(InvalidSchedule) as caught:
        make()
    for part in parts:
        assert part in str(caught.value), (case, str(caught.value))
    assert isinstance(caught.value, ConfigurationError)
