"""One run of a workflow's function against its history (:class:`Replay`), the replay
its thread is in (:func:`current_replay`), and how a run stops to wait: the job
written back ``pending``, due when it is to wake up, fenced on its lease as every
holder's write is, then :class:`~mongosched.job.Suspended` raised to the runner.

The history is read once per run (one query); each call that must not happen twice
takes the next position of it (:meth:`Replay.next`) and is recorded the first time
(:meth:`Replay.record`). The checks of a position and of the history's bound are
pure, in ``_core/steps``.
"""

from __future__ import annotations

import contextvars
import logging
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import replace
from datetime import datetime
from typing import TYPE_CHECKING, Any, NoReturn, Protocol

from mongosched._core.outcome import Retention, cancelled, given_back
from mongosched._core.steps import StepKind, StepRecord, check_bound, check_replay
from mongosched.errors import SerializationError, WorkflowError
from mongosched.job import JobContext, Suspended
from mongosched.store import Staged, Store, codec

if TYPE_CHECKING:
    from mongosched.transaction import Transaction

__all__ = ["Replay", "ReplayHost", "current_replay", "patched"]

log = logging.getLogger("mongosched")


class ReplayHost(Protocol):
    """What a replay needs of its app: the store of its history, the clock, and the
    retention a cancel asked while it waits ends it with."""

    @property
    def store(self) -> Store: ...

    @property
    def retention(self) -> Retention: ...

    def now(self) -> datetime: ...


class _Suspend(BaseException):
    """Raised inside a workflow's function to stop its run until ``until``
    (``topic``: or until an event on it is sent); caught by :meth:`Replay.run`."""

    def __init__(self, until: datetime, topic: str | None = None) -> None:
        super().__init__(until)
        self.until = until
        self.topic = topic


class Replay:
    """One run of a workflow's function against its history.

    :param host: the app, as a replay sees it.
    :param ctx: the workflow's running job.
    :param name: the workflow's task.
    :param wake: makes the workflow due now (an event sent while it was writing
        itself back).
    :param bind_transaction: makes the frameworks' own writes join a transaction for a
        block (the app's integrations: a transactional step's run).
    """

    def __init__(
        self,
        host: ReplayHost,
        ctx: JobContext,
        name: str,
        wake: Callable[[Any], object],
        bind_transaction: Callable[[Transaction], AbstractContextManager[Any]],
    ) -> None:
        self.host = host
        self.ctx = ctx
        self.name = name
        self.wake = wake
        self.bind_transaction = bind_transaction
        self.id = ctx.id
        record = ctx.lease_record
        assert record is not None and record.lease is not None, "a workflow runs leased"
        self.job = record
        self.token = record.lease.token
        store = host.store
        self.store = store
        self.history = {step.position: step for step in store.workflows.steps(self.id)}
        self.bytes = sum(step.size for step in self.history.values())
        self.position = 0

    def now(self) -> datetime:
        return self.host.now()

    def run(self, fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """Run the workflow's function as this replay: its result, or
        :class:`~mongosched.job.Suspended` once it was written back to wait."""
        token = _active.set(self)
        try:
            return fn(*args, **kwargs)
        except _Suspend as suspend:
            self._write_back(suspend)
        finally:
            _active.reset(token)

    def wait_until(self, until: datetime, topic: str | None = None) -> NoReturn:
        """Stop the run until ``until`` (``topic``: or until an event on it is sent)."""
        raise _Suspend(until, topic)

    def next(self, kind: StepKind, name: str) -> tuple[int, StepRecord | None]:
        """Take the next position for ``kind`` ``name``: it and its record, if any."""
        position = self.position
        self.position += 1
        return position, check_replay(self.history.get(position), kind, name, self.name)

    def record(self, step: StepRecord, *, store: Staged | None = None) -> StepRecord:
        """Record ``step`` (within a transaction's ``store``, when given); the record
        kept (another holder's, if it recorded the position first)."""
        check_bound(step.position, self.bytes + step.size, self.name)
        stored = (store or self.store).workflows.record_step(step, self.token)
        self.history[step.position] = stored
        self.bytes += stored.size
        return stored

    def sized(self, step: StepRecord, what: str) -> StepRecord:
        """``step`` with its value's size; a clear error when the value is not BSON."""
        try:
            data = codec.encode_value(self.name, what, step.value, codec.MAX_VALUE_BYTES)
        except SerializationError as exc:  # fails the workflow at once: it would again
            raise WorkflowError(f"workflow {exc}") from exc
        return replace(step, size=len(data))

    def fresh_events(self, topic: str) -> list[tuple[Any, Any]]:
        """The events on ``topic`` that no recorded wait received yet, oldest first."""
        taken = {s.event for s in self.history.values() if s.kind is StepKind.EVENT}
        return [e for e in self.store.workflows.events(self.id, topic) if e[0] not in taken]

    def patched(self, name: str) -> bool:
        """See :func:`patched`."""
        recorded = self.history.get(self.position)
        if recorded is not None and (recorded.kind is not StepKind.PATCH or recorded.name != name):
            return False  # recorded before the change: the old code's step is there
        self.position += 1
        if recorded is None:
            self.record(StepRecord(self.id, self.position - 1, name, kind=StepKind.PATCH))
        return True

    def _write_back(self, suspend: _Suspend) -> NoReturn:
        """Write the workflow's job back pending until it is to wake up, fenced on its
        lease, and free the thread; a cancel asked meanwhile ends it cancelled."""
        ctx, store, now = self.ctx, self.store, self.host.now()
        ctx.finish_lease()
        record = self.job
        back = replace(given_back(record, now), run_at=max(suspend.until, now))
        back = replace(back, on_cancel=cancelled(now, self.host.retention))
        stored = store.leases.settle(record, back)
        if stored is None:
            log.warning("workflow %s (%s): its lease was lost before it slept", self.id, self.name)
        elif suspend.topic is not None and self.fresh_events(suspend.topic):
            # An event sent while it was writing: its sender may have found it running.
            self.wake(self.id)
        raise Suspended(f"workflow {self.id} waits until {suspend.until.isoformat()}")


_active: contextvars.ContextVar[Replay | None] = contextvars.ContextVar(
    "mongosched_workflow", default=None
)


def current_replay() -> Replay | None:
    """The replay this thread runs in (None: not in a workflow run by a runner)."""
    return _active.get()


def patched(name: str) -> bool:
    """Whether the code after a change named ``name`` runs: True in a workflow that
    started with it (the marker is recorded), False in one recorded before the change
    (its history holds another step at this position, which is left to it). Outside a
    workflow, True."""
    replay = current_replay()
    return True if replay is None else replay.patched(name)
