"""What a runner needs from its app (:class:`RunnerHost`): the seam between
:mod:`mongosched.app` and the runner's modules, which never import the app.

A runner is given this narrow view of its app, never the app itself: the app's
configuration as the runner was made (store, tasks, lease, poll interval, retention,
wake mode), its clock and its listeners, and the few things the app does for its
runners (put the declared schedules in place, keep the list of this process's runners,
bind the frameworks' writes to a transactional task's transaction). The app makes it
(:meth:`App.runner <mongosched.App.runner>`)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

from mongosched._core.outcome import Retention
from mongosched.events import Listeners
from mongosched.store import Store
from mongosched.task import Task
from mongosched.transaction import Transaction

__all__ = ["EnsureSchedules", "RunnerHost"]


class EnsureSchedules(Protocol):
    """Puts the schedules declared in code in place, for the queues given (None:
    every queue); returns the names of the tasks whose schedule was created."""

    def __call__(self, *, queues: Sequence[str] | None = None) -> list[str]: ...


@dataclass(frozen=True, kw_only=True)
class RunnerHost:
    """What a runner needs from its app (an :class:`~mongosched.App`)."""

    store: Store
    """Where the runner claims (the app's store when the runner was made)."""
    tasks: Mapping[str, Task[Any, Any]]
    """The app's registered tasks, by name (tasks registered later included)."""
    lease_duration: float
    poll_interval: float
    retention: Retention
    wake: str
    """The app's wake mode (see :mod:`mongosched.runner.watcher`)."""
    events: Listeners
    now: Callable[[], datetime]
    """The app's clock."""
    ensure_schedules: EnsureSchedules
    attach: Callable[[Any], None]
    """Called with a runner that started."""
    detach: Callable[[Any], None]
    """Called with a runner that stopped."""
    bind_transaction: Callable[[Transaction], AbstractContextManager[Any]]
    """Makes the frameworks' writes join a transactional task's transaction."""
    pause_schedule: Callable[[Any, str], None]
    """Pauses a repeating schedule (its id), saying why: one whose runs failed too
    many times in a row (``pause_after``)."""

    def emit(self, name: str, **fields: Any) -> None:
        """Send an event to the app's listeners."""
        self.events.emit(name, **fields)

    def listening(self, name: str) -> bool:
        """Whether event ``name`` has listeners (else what it would carry need not be
        made)."""
        return self.events.listening(name)
