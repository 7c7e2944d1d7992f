"""A durable workflow's history, as values: one :class:`StepRecord` per recorded
position, and the rules a replay applies to it (pure; the store keeps the records, and
:mod:`mongosched.workflow.replay` runs the replay).

A workflow's function runs from the top at every wake-up. Each call that must not run
twice (a step, a sleep's wake-up time, an event received, the jobs a gather scheduled,
a patch marker) takes the next position; its record there, once written, is returned
instead of running again.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from mongosched.errors import HistoryTooLarge, NonDeterminismError

__all__ = [
    "MAX_HISTORY_BYTES",
    "MAX_STEPS",
    "StepKind",
    "StepRecord",
    "check_bound",
    "check_replay",
]

MAX_STEPS = 10_000
"""Positions a workflow's history may hold."""
MAX_HISTORY_BYTES = 64 * 1024 * 1024
"""Bytes of recorded results a workflow's history may hold (each record is a document
of its own, so this bounds the replay's one read, not a document)."""


class StepKind(str, enum.Enum):
    """What a position records."""

    STEP = "step"
    """A step's result or final error."""
    SLEEP = "sleep"
    """A durable sleep's wake-up time."""
    WAIT = "wait"
    """The deadline of a wait for an event (the event received is the next position)."""
    EVENT = "event"
    """The event a wait received (``value``), or none by its deadline."""
    GATHER = "gather"
    """The jobs a gather scheduled (``children``); their results are the next position."""
    GATHERED = "gathered"
    """The results of the jobs a gather waited for."""
    PATCH = "patch"
    """A :func:`~mongosched.workflow.patched` marker."""
    PUBLISH = "publish"
    """A value published with ``set_event``."""

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class StepRecord:
    """One recorded position of a workflow's history."""

    workflow: Any
    """The workflow's job id."""
    position: int
    name: str
    """The step's name (or the marker's: a sleep's, a wait's topic, a patch's name)."""
    kind: StepKind = StepKind.STEP
    value: Any = None
    """The step's result, the event's value, the gathered results."""
    error: dict[str, str] | None = None
    """A failed step's final error: ``type`` and ``message``."""
    attempts: int = 1
    started_at: datetime | None = None
    finished_at: datetime | None = None
    until: datetime | None = None
    """A sleep's wake-up time, a wait's deadline."""
    children: tuple[Any, ...] = ()
    """The ids of the jobs a gather scheduled."""
    event: Any = None
    """The id of the event a wait received (None: it timed out)."""
    size: int = 0
    """Bytes of the record's value as BSON (for the history's bound)."""


def check_replay(
    recorded: StepRecord | None, kind: StepKind, name: str, workflow: str
) -> StepRecord | None:
    """The record a replay returns at a position where the code calls ``kind`` named
    ``name``: ``recorded``, or None when the position is new. Raises
    :class:`NonDeterminismError` when the position holds another call."""
    if recorded is None:
        return None
    if recorded.kind is not kind or recorded.name != name:
        raise NonDeterminismError(
            f"workflow {workflow!r} ({recorded.workflow}): position {recorded.position} "
            f"recorded {recorded.kind} {recorded.name!r}, but the code now calls {kind} "
            f"{name!r} there; mark changed code with patched() so that workflows in "
            "flight keep their history"
        )
    return recorded


def check_bound(position: int, total_bytes: int, workflow: str) -> None:
    """Raise :class:`HistoryTooLarge` when recording at ``position`` would take a
    history past :data:`MAX_STEPS` positions or :data:`MAX_HISTORY_BYTES` bytes."""
    if position >= MAX_STEPS:
        raise HistoryTooLarge(
            f"workflow {workflow!r}: its history would exceed {MAX_STEPS:,} steps; "
            "split it into child workflows gathered by a parent"
        )
    if total_bytes > MAX_HISTORY_BYTES:
        raise HistoryTooLarge(
            f"workflow {workflow!r}: its recorded results would exceed "
            f"{MAX_HISTORY_BYTES:,} bytes; store large results elsewhere and record a "
            "reference"
        )
