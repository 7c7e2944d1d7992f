"""What a store reports to a runner waiting for work: :class:`DueHint` values, read
from a :class:`DueWatch` (``Store.watch_due``)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

__all__ = ["DueHint", "DueWatch"]


@dataclass(frozen=True)
class DueHint:
    """A job may have become claimable: what a :class:`DueWatch` reports.

    ``at``: when it is due (None: now, or not known: claim now); ``task``: its task,
    when known (None: any task may have one)."""

    at: datetime | None = None
    task: str | None = None


class DueWatch(Protocol):
    """Reports, as they happen anywhere, the jobs that become pending (inserted, or
    updated to pending: a retry, a job given back, a reaped one, a new due time), so
    that an idle runner claims at once instead of at its next poll.

    Iterating blocks and yields :class:`DueHint` values; the first one (``at`` None)
    comes as soon as the watch is established, since a job may have become due before
    it was. It may report more than what changed (a hint never harms: the claim
    decides) but never loses a change while it runs: after a transient error it
    resumes where it left off, or, when it cannot, yields a hint to claim now.
    Iterating raises :class:`~mongosched.errors.WatchUnavailable` when the database
    cannot watch at all (then poll). :meth:`close` (from any thread) ends the iteration
    within about a second and releases what the watch holds (a server cursor)."""

    def __iter__(self) -> Iterator[DueHint]: ...

    def close(self) -> None: ...
