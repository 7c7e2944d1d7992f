"""Watching a :class:`~mongosched.store.memory.MemoryStore` for jobs that become pending.

The store calls :meth:`DueWatchers.notify` (under its lock) whenever a job is filed as
pending; every open watch of a matching queue keeps, per task, the earliest due time it
was told about, so a burst of inserts costs one dictionary update per watch and one
wake-up of its reader. This wakes runners of every app sharing the store in this
process (``memory://name``); a memory store is never seen by another process.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from datetime import datetime

from mongosched.store.due import DueHint

__all__ = ["DueWatchers", "MemoryDueWatch"]


class MemoryDueWatch:
    """One watch (a :class:`~mongosched.store.DueWatch`)."""

    def __init__(self, owner: DueWatchers, queues: Sequence[str] | None) -> None:
        self._owner = owner
        self._queues = None if queues is None else frozenset(queues)
        self._due: dict[str, datetime] = {}
        self._signal = threading.Event()
        self._closed = threading.Event()

    def offer(self, task: str, queue: str, at: datetime) -> None:
        """A job of ``task`` in ``queue`` is pending, due ``at`` (the owner's lock held)."""
        if self._queues is not None and queue not in self._queues:
            return
        known = self._due.get(task)
        if known is None or at < known:
            self._due[task] = at
        self._signal.set()

    def __iter__(self) -> Iterator[DueHint]:
        if self._closed.is_set():
            return
        self._owner.add(self)
        try:
            yield DueHint()
            while not self._closed.is_set():
                self._signal.wait()
                if self._closed.is_set():
                    return
                due = self._owner.take(self)
                for task, at in sorted(due.items(), key=lambda item: item[1]):
                    yield DueHint(at=at, task=task)
        finally:
            self._owner.discard(self)

    def close(self) -> None:
        self._closed.set()
        self._signal.set()

    def take(self) -> dict[str, datetime]:
        """What was offered since the last take (the owner's lock held)."""
        due, self._due = self._due, {}
        self._signal.clear()
        return due


class DueWatchers:
    """The open watches of one store."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._watches: list[MemoryDueWatch] = []

    def watch(self, queues: Sequence[str] | None) -> MemoryDueWatch:
        return MemoryDueWatch(self, queues)

    def add(self, watch: MemoryDueWatch) -> None:
        with self._lock:
            self._watches.append(watch)

    def discard(self, watch: MemoryDueWatch) -> None:
        with self._lock:
            if watch in self._watches:
                self._watches.remove(watch)

    def take(self, watch: MemoryDueWatch) -> dict[str, datetime]:
        with self._lock:
            return watch.take()

    def notify(self, task: str, queue: str, at: datetime) -> None:
        """A job became (or stays, changed) pending."""
        if not self._watches:  # the common case: nobody watches (read without the lock)
            return
        with self._lock:
            for watch in self._watches:
                watch.offer(task, queue, at)

    def after_fork(self) -> None:
        """In a forked child: the parent's watches belong to threads that are gone."""
        self._lock = threading.Lock()
        self._watches = []
