"""Events: what listeners added with :meth:`App.on` receive, and the registry that
calls them."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from mongosched.errors import ConfigurationError

if TYPE_CHECKING:
    from mongosched._core.records import Pause
    from mongosched.job import Job

__all__ = ["EVENTS", "Event", "Listeners"]

log = logging.getLogger("mongosched")

EVENTS = frozenset(
    {
        "job:created",
        "job:start",
        "job:success",
        "job:retry",
        "job:fail",
        "job:cancel",
        "job:lease_lost",
        "job:expired",
        "job:ready",
        "runner:start",
        "runner:stop",
        "control:pause",
        "control:resume",
        "schedule:update",
        "schedule:missed",
    }
)
"""Names accepted by :meth:`App.on`."""


@dataclass(frozen=True)
class Event:
    """What a listener receives.

    ``job`` is the job as stored after the change the event reports (for ``job:*``
    events, and the schedule for ``schedule:update``), ``error`` the exception (for
    ``job:retry`` and ``job:fail`` of a run), ``runner`` the runner involved (if any),
    ``pause`` what was paused or resumed (``control:pause``, ``control:resume``),
    ``app`` the app that sent it, ``missed`` how many slots a ``schedule:missed``
    event reports (the job's ``missed`` says why, the latest and the total).
    ``control:*`` and ``schedule:update`` events are sent in the process that made
    the change.
    """

    name: str
    app: Any = None
    job: Job | None = None
    error: BaseException | None = None
    runner: Any = None
    pause: Pause | None = None
    missed: int = 0


Listener = Callable[[Event], Any]


class Listeners:
    """Listeners by event name. A listener runs synchronously in the thread that sent
    the event; whatever it raises is logged with the event's name and contained, so
    that a listener never breaks scheduling or running (``KeyboardInterrupt`` in the
    main thread is let through)."""

    def __init__(self, owner: Any = None) -> None:
        self.owner = owner
        self._by_name: dict[str, list[Listener]] = {}

    def add(self, name: str, listener: Listener) -> Listener:
        if name not in EVENTS:
            raise ConfigurationError(f"unknown event {name!r}; known: {', '.join(sorted(EVENTS))}")
        if not callable(listener):
            raise ConfigurationError(f"listener for {name} must be callable, not {listener!r}")
        self._by_name.setdefault(name, []).append(listener)
        return listener

    def remove(self, name: str, listener: Listener) -> None:
        try:
            self._by_name.get(name, []).remove(listener)
        except ValueError:
            pass

    def listening(self, name: str) -> bool:
        """Whether a ``name`` event has listeners (else what it would carry need not
        be made)."""
        return bool(self._by_name.get(name))

    def emit(self, name: str, **fields: Any) -> None:
        listeners = self._by_name.get(name)
        if not listeners:
            return
        event = Event(name=name, app=self.owner, **fields)
        for listener in list(listeners):
            try:
                listener(event)
            except KeyboardInterrupt:
                if threading.current_thread() is threading.main_thread():
                    raise
                log.exception(
                    "listener %r for %s raised KeyboardInterrupt; ignored", listener, name
                )
            except BaseException:
                log.exception("listener %r for %s raised; ignored", listener, name)
