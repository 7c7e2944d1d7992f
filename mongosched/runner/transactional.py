"""A run of a transactional task (``@app.task(transactional=True)``): its writes and
its job's outcome commit in one transaction, fenced on the lease.

One attempt, in the worker's thread:

1. The lease is renewed to last until the attempt's timeout (and one lease more),
   and the heartbeat stops its renewals (:meth:`Claim.hold`): a renewal of the job's
   document landing after the transaction's first read would make the transaction's
   own write of that document conflict, and abort it. The heartbeat still enforces
   the timeout.
2. A transaction begins on the app's store; the function runs with it
   (``current_job().session``; jobs it schedules join it).
3. When the function returns, the job's outcome is written in the transaction, last,
   fenced on ``{_id, lease token, status running}``, and the transaction commits. A
   fenced write that matches nothing (the lease was lost) aborts it: nothing of the
   run lands. A process that dies before the commit leaves nothing either: the server
   discards the transaction, the lease expires, and the retry starts clean.
4. A transient error (the driver's ``TransientTransactionError``: a write conflict in
   the task's writes, the outcome's or the commit's) aborts the transaction, and the
   function runs again in the same attempt, while the lease is still this run's, no
   cancel was asked and the timeout allows. Its MongoDB writes of the aborted run
   were discarded; its effects elsewhere were not (they happen twice).
5. Anything else (an exception, a timeout, a cancel, a shutdown) aborts the
   transaction, and the outcome (a retry, a failure...) is written outside it, fenced
   as every outcome is, by the worker (never deferred to a batched claim:
   :attr:`Task.writes_own_outcome <mongosched.task.Task.writes_own_outcome>`).

A commit whose result stays unknown (the store commits again as long as its connect
timeout allows) is treated as a failure: the failure's write outside the transaction
is fenced, so if the commit did land, that write finds the job finished and changes
nothing.
"""

from __future__ import annotations

import logging
import random
import time
from typing import Any

from mongosched._core.backoff import Backoff
from mongosched._core.outcome import Decision, Ending
from mongosched._core.records import JobRecord, JobStatus
from mongosched.errors import SerializationError, StoreError
from mongosched.observe import logs
from mongosched.runner.claim import Claim
from mongosched.runner.host import RunnerHost
from mongosched.transaction import Transaction, as_current

__all__ = ["TransactionalRun", "Written"]

log = logging.getLogger("mongosched.runner")

BACKOFF = Backoff(first=0.01, most=0.5)
"""How long a function waits before it runs again after a conflict (full jitter)."""

Written = tuple[Decision, JobRecord | None]
"""The decision committed with a run, and the job as it left it (None: its fenced
write found the lease lost, and nothing was committed)."""


class TransactionalRun:
    """How an attempt calls a transactional task's function (see the module): in
    transactions, until one commits with the job's outcome or the attempt ends
    otherwise. It knows the claim, and the app for its transactions and its
    retention; the lease is the claim's."""

    def __init__(self, app: RunnerHost, claim: Claim) -> None:
        self.app = app
        self.claim = claim
        self.written: Written | None = None
        """What was committed with the run (None: nothing; its outcome is written
        outside the transaction)."""
        self.runs = 0
        """How many times the function ran (a transient error runs it again)."""

    def call(self) -> tuple[Any, BaseException | None]:
        """Run the function in transactions until one commits or the attempt ends
        otherwise: ``(result, error)`` as :meth:`Claim.call` returns them, and what was
        committed in :attr:`written`."""
        claim = self.claim
        timeout = claim.timeout
        assert timeout is not None, "a transactional task has a timeout"
        deadline = claim.started + timeout
        while True:
            try:
                if not claim.hold(deadline - time.monotonic() + claim.keeper.lease_duration):
                    return None, None  # lost: nothing runs, nothing is written
            except StoreError as exc:
                return None, exc
            if claim.ctx.is_cancelled():  # asked before the run began
                claim.renew_again()
                return None, None
            store = self.app.store
            tx = Transaction(store, store.transactions.begin(), owned=True)
            claim.ctx.transaction = tx
            try:
                self.runs += 1
                with as_current(tx), self.app.bind_transaction(tx):
                    result, error = claim.call()
                if error is None and not claim.ctx.is_cancelled():
                    error = self._commit(tx, result)
                    if error is None:
                        return result, None
                tx.abort()
                retry = error is not None and tx.handle.retryable(error)
                if retry and self._again(deadline, error):  # type: ignore[arg-type]
                    continue
                claim.renew_again()  # the outcome is written outside the transaction
                return (None, error) if error is not None else (result, None)
            finally:
                claim.ctx.transaction = None
                tx.handle.end()

    def _commit(self, tx: Transaction, result: Any) -> BaseException | None:
        """Write the success in ``tx``, fenced, and commit. None when that is done
        (:attr:`written` says how), or when it is to be written outside instead (a
        result that cannot be stored: that write fails the job); else the error."""
        claim = self.claim
        app = self.app
        decision = claim.decision(
            Ending.SUCCESS, result, None, claim.task.retry, app.now(), app.retention
        )
        try:
            stored = app.store.within(tx.handle).leases.settle(claim.record, decision.settlement)
        except SerializationError:
            return None
        except Exception as exc:
            return exc
        if stored is None:  # fenced off: another holder has the job
            claim.lose("its transaction's outcome write was fenced off")
            self.written = (decision, None)
            return None
        try:
            tx.commit()
        except Exception as exc:
            return exc
        self.written = (decision, stored)
        return None

    def _again(self, deadline: float, error: BaseException) -> bool:
        """After a transient error: whether to run the function again (the lease is
        still this run's, no cancel was asked, time remains)."""
        claim = self.claim
        if time.monotonic() >= deadline:
            return False
        try:
            current = self.app.store.jobs.get(claim.job_id)
        except StoreError:
            return False
        lease = None if current is None else current.lease
        if (
            current is None
            or current.status is not JobStatus.RUNNING
            or lease is None
            or (lease.token != claim.token)
        ):
            claim.lose("its job was taken over during its transaction")
            return False
        if current.cancel_requested:
            claim.ctx.cancel("cancelled")
            return False
        log.info(
            "job %s (%s): transaction aborted (%s); running it again",
            claim.job_id,
            claim.task.name,
            error,
            extra=logs.fields(claim.record),
        )
        pause_before_again(self.runs, deadline)
        return True


def pause_before_again(tries: int, deadline: float = float("inf")) -> None:
    """Wait before a transaction runs again after ``tries`` conflicts (not past the
    monotonic ``deadline``). A conflict with a transaction still open comes back until
    that one ends: back off a little (full jitter), as the drivers' retries do."""
    wait = random.uniform(0, BACKOFF.after(tries))
    time.sleep(min(wait, max(0.0, deadline - time.monotonic())))
