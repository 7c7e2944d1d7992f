"""What every slice of an :class:`~mongosched.App` is given: its store, clock,
retention, listeners, tasks and audit trail (:class:`AppParts`, which the App makes
once when it composes its operations), and the class the slices share
(:class:`Operations`), which keeps them as its own attributes."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from mongosched._core.outcome import Retention
from mongosched.events import Listeners
from mongosched.operations.audit import AuditTrail
from mongosched.store import Store

__all__ = ["AppParts", "Operations"]


@dataclass(frozen=True)
class AppParts:
    """The parts of an app that its operations act on, as they are when the app
    composes them (at the start, and again when its store or options change)."""

    store: Store
    """Where the jobs, pauses and runners' entries are."""
    writable: Callable[[], Store]
    """The store, prepared for writes."""
    now: Callable[[], datetime]
    """The app's clock."""
    retention: Retention
    """How long finished jobs are kept."""
    events: Listeners
    """The app's listeners."""
    tasks: Mapping[str, Any]
    """The app's registered tasks, by name."""
    audit: AuditTrail
    """The app's audit trail, where every operator action records itself."""


class Operations:
    """A slice of an app's methods (the App offers them as its own, with their
    signatures and docstrings), acting on the app's :class:`AppParts`."""

    def __init__(self, app: AppParts) -> None:
        self.store = app.store
        self.writable = app.writable
        self.now = app.now
        self.retention = app.retention
        self.events = app.events
        self.tasks = app.tasks
        self.audit = app.audit
