"""A workflow's step (:class:`Step`): a function registered with :meth:`App.step
<mongosched.App.step>`. Called in a workflow, it runs once, its attempts by its
``retry``, and its result or its final error is recorded at the next position of the
workflow's history; a transactional step's record commits with its MongoDB writes,
fenced on the workflow's lease. Called elsewhere, it is a plain call.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Generic, ParamSpec, TypeVar

from mongosched._core.outcome import error_info
from mongosched._core.steps import StepKind, StepRecord
from mongosched.errors import ConfigurationError, StepFailed, WorkflowError
from mongosched.retry import RetryPolicy
from mongosched.runner.transactional import pause_before_again
from mongosched.transaction import Transaction, as_current
from mongosched.workflow.replay import Replay, current_replay

__all__ = ["Step"]

P = ParamSpec("P")
R = TypeVar("R")

TRANSACTION_LEASE = 60.0
"""Seconds a transactional step's lease is renewed for while its heartbeat's renewals stop."""


@dataclass
class Step(Generic[P, R]):
    """A function registered with :meth:`App.step <mongosched.App.step>`: called in a
    workflow, it runs once and its result is recorded; called elsewhere, it is a plain
    call."""

    fn: Callable[P, R]
    name: str
    retry: RetryPolicy
    transactional: bool = False

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R:
        replay = current_replay()
        if replay is None:
            return self.fn(*args, **kwargs)
        position, recorded = replay.next(StepKind.STEP, self.name)
        if recorded is None:
            recorded = self._run(replay, position, args, kwargs)
        if recorded.error is not None:
            raise StepFailed(
                f"workflow {replay.name!r}: step {self.name!r} failed: "
                f"{recorded.error.get('type')}: {recorded.error.get('message')}",
                recorded.error.get("type", ""),
            )
        return recorded.value  # type: ignore[no-any-return]  # as stored: through BSON

    def _run(
        self, replay: Replay, position: int, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> StepRecord:
        started = replay.now()
        attempts = 0
        while True:
            attempts += 1
            try:
                if self.transactional:
                    return self._in_transaction(replay, position, started, attempts, args, kwargs)
                result = self.fn(*args, **kwargs)
            except (WorkflowError, ConfigurationError):
                raise
            except Exception as exc:
                if self.retry.should_retry(exc, attempts):
                    time.sleep(self.retry.delay_for(attempts).total_seconds())
                    continue
                info = error_info(exc, with_traceback=False)
                failed = StepRecord(
                    replay.id,
                    position,
                    self.name,
                    error={"type": info.type, "message": info.message},
                    attempts=attempts,
                    started_at=started,
                    finished_at=replay.now(),
                )
                return replay.record(failed)
            return replay.record(self._done(replay, position, result, attempts, started))

    def _done(
        self, replay: Replay, position: int, result: Any, attempts: int, started: datetime
    ) -> StepRecord:
        """The record of the step's success (its result checked: BSON, sized)."""
        step = StepRecord(
            replay.id,
            position,
            self.name,
            value=result,
            attempts=attempts,
            started_at=started,
            finished_at=replay.now(),
        )
        return replay.sized(step, f"the result of step {self.name!r} (position {position})")

    def _in_transaction(
        self,
        replay: Replay,
        position: int,
        started: datetime,
        attempts: int,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
    ) -> StepRecord:
        """Run the step in a transaction whose commit also records it, fenced on the
        workflow's lease: its MongoDB writes and its record land together or not at
        all. A transient conflict runs it again."""
        store = replay.store
        last: Exception | None = None
        for tries in range(1, 101):
            # The heartbeat's renewals stop: a renewal of the job's document would conflict
            # with the transaction's fenced write of it.
            if not replay.ctx.hold_lease(TRANSACTION_LEASE):
                raise WorkflowError(
                    f"workflow {replay.name!r} ({replay.id}): its lease was lost before "
                    f"step {self.name!r}"
                )
            tx = Transaction(store, store.transactions.begin(), owned=True)
            replay.ctx.transaction = tx
            try:
                with as_current(tx), replay.bind_transaction(tx):
                    result = self.fn(*args, **kwargs)
                step = self._done(replay, position, result, attempts, started)
                if tx.session is None:  # memory://: no writes of its own to commit
                    tx.commit()
                    return replay.record(step)
                inside = store.within(tx.handle)
                if not inside.workflows.fence_workflow(replay.id, replay.token, replay.now()):
                    raise WorkflowError(
                        f"workflow {replay.name!r} ({replay.id}): its lease was lost "
                        f"during step {self.name!r}; nothing of it was committed"
                    )
                stored = replay.record(step, store=inside)
                tx.commit()
                return stored
            except BaseException as exc:
                tx.abort()
                if isinstance(exc, Exception) and tx.handle.retryable(exc):
                    last = exc
                    pause_before_again(tries)
                    continue
                raise
            finally:
                replay.ctx.transaction = None
                replay.ctx.renew_lease_again()
                tx.handle.end()
        raise WorkflowError(
            f"workflow {replay.name!r}: step {self.name!r} kept conflicting (last: {last})"
        )
