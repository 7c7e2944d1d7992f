"""One attempt of a claimed job, in the calling thread, on one path (:class:`Attempt`):

1. **run**: the job's function runs (a repeating job's slot is settled first, by
   :class:`~mongosched.runner.slots.Slots`; a transactional task's function runs in
   transactions, by :class:`~mongosched.runner.transactional.TransactionalRun`, which
   may commit the outcome itself);
2. **decide**: what follows the run (:func:`mongosched._core.outcome.decide`);
3. **write**, fenced on the lease token: at once (with the outcomes of the jobs that
   finish meanwhile), or, with a backlog, *deferred* to the next batched claim's write,
   the worker's place freed at once (:class:`~mongosched.runner.settler.Settler`);
4. **announce**: the decision as written, logged and sent with the job as stored; a
   repeating job's slots said; the jobs waiting for it released.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from functools import partial
from typing import Any

from mongosched._core import outcome
from mongosched._core.outcome import Decision, Ending
from mongosched.errors import MongoschedError, SerializationError
from mongosched.job import Suspended
from mongosched.observe import logs, tracing
from mongosched.retry import RetryPolicy
from mongosched.runner.claim import Claim
from mongosched.runner.claimer import Claimer
from mongosched.runner.parts import RunnerParts
from mongosched.runner.settler import Stored
from mongosched.runner.slots import Slots
from mongosched.runner.transactional import TransactionalRun, Written
from mongosched.store.parts import stored_record

__all__ = ["Attempt", "finishing"]

log = logging.getLogger("mongosched.runner")

NEVER_RETRY = RetryPolicy(retries=0)

Ran = tuple[Any, BaseException | None, float, Written | None]
"""How a run ended: its result, its error, the seconds it took, and the outcome a
transactional run committed with it (None: none)."""


def finishing(claim: Claim) -> logs.Contained:
    """Where running or finishing ``claim`` happens: what escapes is logged (a job's
    own errors never do: they are its outcome)."""
    return logs.Contained(
        log,
        "job %s (%s): database error (%s); its outcome may not be recorded: if not, "
        "it runs again once its lease expires",
        "job %s (%s): internal error while finishing",
        claim.job_id,
        claim.task.name,
        record=claim.record,
        expected=MongoschedError,
    )


class Attempt:
    """Runs claimed jobs' attempts (see the module).

    :param parts: the runner's.
    :param slots: settles a repeating job's slot before its run, and says what
        followed after.
    :param claimer: releases what a claim holds (its permit, its limits) once run.
    """

    def __init__(self, parts: RunnerParts, slots: Slots, claimer: Claimer) -> None:
        self.parts = parts
        self.slots = slots
        self.claimer = claimer

    def work(self, claim: Claim) -> None:
        """A worker's whole part in a claim handed to it: :meth:`run`, what escapes it
        logged; then the claim is done (unless its outcome was deferred: then once
        that is written)."""
        try:
            with finishing(claim):
                self.run(claim)
        finally:
            if not claim.deferred:  # (else after its write)
                self.parts.flight.done(claim)

    def run(self, claim: Claim) -> Decision | None:
        """Run ``claim``'s job, record its outcome and release what the claim holds:
        the decision, or None when it did not run to a recorded outcome (its repeating
        slot moved on, or its lease was lost). With a backlog the outcome may be
        deferred to the next batched claim's write: the decision as made, announced
        after that write."""
        try:
            ran = self._run(claim)
            if ran is None:
                return None
            result, error, seconds, written = ran
            if written is not None:  # committed with the run
                claim.finish()
                return self.announce(claim, *written, seconds)
            decision = self.decide(claim, result, error)
            if decision is None or self._defer(claim, decision, seconds):
                return decision
            try:
                stored = self.parts.settler.settle(claim.record, decision.settlement, claim.until)
                failure = None
            except SerializationError as exc:
                stored, failure = None, exc
            return self.after_write(claim, decision, seconds, stored, failure)
        finally:
            self.claimer.release(claim, started=True)

    def run_together(self, claims: Sequence[Claim]) -> list[Decision | None]:
        """Run several claimed jobs one after another, then write their outcomes
        together (see :meth:`RunnerSteps.run_claims
        <mongosched.runner.steps.RunnerSteps.run_claims>`), and release what each
        claim holds."""
        try:
            return self._together(claims)
        finally:
            for claim in claims:
                self.claimer.release(claim, started=True)

    def _together(self, claims: Sequence[Claim]) -> list[Decision | None]:
        ran = [self._run(claim) for claim in claims]
        decisions: list[Decision | None] = [None] * len(claims)
        todo = []
        for n, (claim, ended) in enumerate(zip(claims, ran, strict=True)):
            decision = None if ended is None else self.decide(claim, *ended[:2])
            if decision is not None:
                todo.append((n, decision))
        items = [(claims[n].record, decision.settlement) for n, decision in todo]
        parts = self.parts
        patience = parts.patience([claims[n] for n, _ in todo])
        results = parts.store.claims.settle_many(items, patience) if items else []
        for (n, decision), stored in zip(todo, results, strict=True):
            claim, seconds = claims[n], ran[n][2]  # type: ignore[index]
            if isinstance(stored, SerializationError):  # its result cannot be stored
                decisions[n] = self.after_write(claim, decision, seconds, None, stored)
            else:
                decisions[n] = self.announce(claim, decision, stored, seconds)
        return decisions

    # 1. Run -----------------------------------------------------------------------------------
    def _run(self, claim: Claim) -> Ran | None:
        """Run a claimed job's function: how it ended, or None when it does not run (its
        repeating slot moved on, or its lease was lost)."""
        bound = logs.bind(claim.record)  # log records carry the job's fields
        level = claim.task.capture_logs
        capture = None if level is None else logs.Capture(claim.record, level)
        kept = None if capture is None else logs.capturing(capture)
        span = tracing.start(claim.record, self.parts.settings.name)  # None without OTel
        try:
            if claim.record.repeat and claim.record.attempts <= 1 and not self.slots.start(claim):
                return None
            self.parts.emit("job:start", claim.record, error=None)
            log.debug(
                "job %s (%s) attempt %d started",
                claim.job_id,
                claim.task.name,
                claim.record.attempts,
            )
            started = time.monotonic()
            written = None
            if claim.task.transactional:
                transactional = TransactionalRun(self.parts.app, claim)
                result, error = transactional.call()
                written = transactional.written
            else:
                result, error = claim.call()
            tracing.failed(span, error)
            return result, error, time.monotonic() - started, written
        finally:
            tracing.end(span)
            if kept is not None and capture is not None:
                logs.uncapture(kept)
                claim.kept_logs(capture.result())  # written with the outcome
            logs.unbind(bound)

    # 2. Decide --------------------------------------------------------------------------------
    def decide(self, claim: Claim, result: Any, error: BaseException | None) -> Decision | None:
        """What follows an attempt's end; None when its lease was lost meanwhile."""
        claim.finish()  # no renewal starts after this
        if isinstance(error, Suspended):  # a workflow wrote its job back to wait
            return None
        if claim.lost:
            log.warning(
                "job %s (%s): finished after its lease was lost; outcome discarded (%s)",
                claim.job_id,
                claim.task.name,
                "ok" if error is None else f"{type(error).__name__}: {error}",
                extra=logs.fields(claim.record),
            )
            return None
        ending = outcome.ending(claim.ctx.cancel_reason, error)
        app = self.parts.app
        return claim.decision(ending, result, error, claim.task.retry, app.now(), app.retention)

    # 3. Write (or defer) ----------------------------------------------------------------------
    def _defer(self, claim: Claim, decision: Decision, seconds: float) -> bool:
        """With a backlog, ``claim``'s outcome waits for the next batched claim, and
        its worker's place is freed at once, so that the claim can be made (and carry
        the outcome); what follows the write runs later, in a worker
        (:meth:`_after_deferred_write`). True when it did."""
        if claim.task.writes_own_outcome:
            return False
        parts = self.parts
        after_write = partial(self._after_deferred_write, claim, decision, seconds)
        if not parts.settler.defer(claim.record, decision.settlement, claim.until, after_write):
            return False
        claim.defer()
        parts.flight.free.release()
        return True

    def _after_deferred_write(
        self,
        claim: Claim,
        decision: Decision,
        seconds: float,
        stored: Stored | None,
        failure: BaseException | None,
    ) -> None:
        """A deferred outcome was written (found ``stored``, or raised ``failure``):
        finish it as a worker finishes its own (:meth:`after_write`), and it is done."""
        try:
            with finishing(claim):
                self.after_write(claim, decision, seconds, stored, failure)
        finally:
            self.parts.flight.done(claim)

    def after_write(
        self,
        claim: Claim,
        decision: Decision,
        seconds: float,
        stored: Stored | None,
        failure: BaseException | None,
    ) -> Decision | None:
        """After the outcome write found ``stored`` (or raised ``failure``): a result
        that cannot be stored fails the job instead; otherwise as :meth:`announce`."""
        if isinstance(failure, SerializationError):
            app = self.parts.app
            decision = claim.decision(
                Ending.ERROR, None, failure, NEVER_RETRY, app.now(), app.retention
            )
            stored = self.parts.settler.settle(claim.record, decision.settlement, claim.until)
        elif failure is not None:
            raise failure
        return self.announce(claim, decision, stored, seconds)

    # 4. Announce ------------------------------------------------------------------------------
    def announce(
        self, claim: Claim, decision: Decision, stored: Stored | None, seconds: float
    ) -> Decision | None:
        """After the outcome write: the decision that took effect, logged and sent
        with the job as stored (a :class:`~mongosched.store.parts.Landed` makes that
        record only if a listener, a repeating slot or a dependent needs it); None
        when the write found the lease lost."""
        if stored is None:
            claim.lose("outcome write was fenced off")
            log.warning(
                "job %s (%s): outcome rejected: lease lost",
                claim.job_id,
                claim.task.name,
                extra=logs.fields(claim.record),
            )
            return None
        decision = decision.as_written(stored.status)
        logs.log_decision(claim.record, claim.task.name, decision, seconds)
        self.parts.emit(decision.event, stored, error=decision.error)
        if stored.repeat is not None:
            self.slots.repeated(decision, stored_record(stored))
        self.parts.release_dependents(stored)
        return decision
