"""The records operators read beside jobs, in the package's own terms: a queue's
backlog, a pause, an entry of the audit trail, a live runner's entry. Plain, immutable
values (:mod:`mongosched._core.records` names them too)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

__all__ = ["PAUSE_KINDS", "AuditEntry", "Pause", "QueueBacklog", "RunnerInfo"]


@dataclass(frozen=True)
class QueueBacklog:
    """The work of one queue that needs a runner now (what an autoscaler reads): how
    many pending jobs are due and when the one due longest became due (None: none is
    due), how many jobs are running, and how many of those have a lease that expired
    (a runner died: a live one's reaper must return them)."""

    due: int
    oldest: datetime | None
    running: int = 0
    expired: int = 0

    @property
    def total(self) -> int:
        """Jobs due or running: a queue needs a runner while it is above zero (a
        running job's runner, or the reaper of a dead one's lease)."""
        return self.due + self.running


PAUSE_KINDS = ("queue", "task", "schedule")


@dataclass(frozen=True)
class Pause:
    """A queue, task or repeating schedule that no runner claims until it is resumed.
    ``name`` is the queue's, the task's, or the schedule's job id (as a string)."""

    kind: str
    name: str
    since: datetime
    reason: str | None = None
    """Why it was paused, when not by an operator (a schedule that failed too often)."""


@dataclass(frozen=True)
class AuditEntry:
    """An operator's action, as the audit trail keeps it (:meth:`App.audit
    <mongosched.operations.audit.AuditTrail.record>`): when, who (``actor``) and
    through what (``via``: ``api``, ``cli``, ``dashboard``), the ``action`` (``retry``,
    ``cancel``, ``purge``, ``pause``, ...), what it was done to (``target``: a job, a
    filter, a queue...), on how many jobs (None where it does not apply, as for a
    pause) and, for some, what it changed (``detail``); ``known_by``: how the actor
    was known (``argument``: the call's ``actor=``; ``process user``: this process's
    user and host; through the dashboard ``bearer token``, ``basic auth``, ``login
    session``, or the host framework's user: ``django user``, ``flask user``; None in
    entries kept before it was recorded)."""

    at: datetime
    actor: str
    via: str
    action: str
    target: str
    count: int | None = None
    detail: str | None = None
    job: Any = None
    """The id of the one job it was done to (None: several, or none)."""
    known_by: str | None = None


@dataclass(frozen=True)
class RunnerInfo:
    """A runner as it registered itself (:meth:`App.live_runners`). ``stale``: it has
    not refreshed its entry for several refresh periods (it may have died).
    ``workers`` is its number of worker threads."""

    id: str
    name: str
    host: str
    pid: int
    queues: tuple[str, ...] | None
    """Queues it serves (None: every queue)."""
    tasks: tuple[str, ...]
    workers: int
    in_flight: int
    started_at: datetime
    last_seen: datetime
    version: str
    stale: bool = False
