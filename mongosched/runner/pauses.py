"""A runner's view of what is paused (:meth:`App.pause`), read from the store at most
once per poll interval and applied to what the runner claims.

Claims stay index-only: a paused task is left out of the claim's task list, a paused
queue out of its queue list. A runner that serves every queue has no queue list to
narrow, so while a queue is paused it claims from an explicit list: the queues that
hold pending jobs (read with the pause set, from the claim index), less the paused
ones. A paused schedule is out of the claimable status already; a run of it claimed
by a runner that had not yet seen the pause is given back and held (see
:meth:`~mongosched.runner.steps.RunnerSteps.claim_next`). So are the jobs of a paused
label (a task's name that labels jobs of another task, as a Django task's path does):
the claim cannot leave them out (the label is no key of the claim index), the pause
moved them out of the claimable status, and one scheduled since is held when claimed.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from typing import Any

from mongosched.store.control import Admin

__all__ = ["PauseSet"]


class PauseSet:
    """The pauses in the store (its ``admin`` part), refreshed when older than
    ``interval`` seconds."""

    def __init__(self, admin: Admin, interval: float) -> None:
        self.admin = admin
        self.interval = interval
        self.tasks: frozenset[str] = frozenset()
        self.queues: frozenset[str] = frozenset()
        self.schedules: frozenset[str] = frozenset()
        self._pending_queues: list[str] = []
        self._read_at: float | None = None
        self._lock = threading.Lock()

    def refresh(self, *, every_queue: bool, force: bool = False) -> None:
        """Read the pauses (and, while a queue is paused and the runner serves every
        queue, the queues holding pending jobs) unless read less than ``interval`` ago."""
        with self._lock:
            now = time.monotonic()
            if not force and self._read_at is not None and now - self._read_at < self.interval:
                return
            pauses = self.admin.pauses()
            by_kind: dict[str, set[str]] = {"queue": set(), "task": set(), "schedule": set()}
            for pause in pauses:
                by_kind.setdefault(pause.kind, set()).add(pause.name)
            self.tasks = frozenset(by_kind["task"])
            self.queues = frozenset(by_kind["queue"])
            self.schedules = frozenset(by_kind["schedule"])
            listed = self.queues and every_queue
            self._pending_queues = self.admin.pending_queues() if listed else []
            self._read_at = now

    def claimable_tasks(self, tasks: Sequence[str]) -> list[str]:
        """``tasks`` less the paused ones."""
        return [name for name in tasks if name not in self.tasks]

    def claimable_queues(self, queues: Sequence[str] | None) -> list[str] | None:
        """The queues to claim from, for a runner serving ``queues`` (None: every
        queue), less the paused ones."""
        if not self.queues:
            return None if queues is None else list(queues)
        serving = self._pending_queues if queues is None else queues
        return [q for q in serving if q not in self.queues]

    def holds(self, job_id: Any) -> bool:
        """Whether ``job_id`` is a paused repeating schedule."""
        return bool(self.schedules) and str(job_id) in self.schedules

    def holds_label(self, label: str) -> bool:
        """Whether ``label`` (a job's) is paused, as a task's name is."""
        return label in self.tasks
