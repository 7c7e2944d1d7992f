"""The steps of a runner, synchronous, in the calling thread: claim the next job, run
a claim, run until idle, reap. Each :class:`~mongosched.runner.runner.Runner` holds its
steps (:attr:`Runner.steps <mongosched.runner.runner.Runner.steps>`): its workers run
claims with them, and eager mode and :func:`mongosched.testing.drain` call them in the
caller's thread. An attempt's own path is :class:`~mongosched.runner.attempt.Attempt`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from mongosched._core.outcome import Decision
from mongosched.runner.attempt import Attempt
from mongosched.runner.claim import Claim
from mongosched.runner.claimer import Claimer
from mongosched.runner.keeper import LeaseKeeper
from mongosched.runner.parts import RunnerParts
from mongosched.runner.reaper import Reaper
from mongosched.runner.slots import Slots

__all__ = ["RunnerSteps"]


class RunnerSteps:
    """A runner's synchronous steps (see the module).

    :param parts: the runner's.
    """

    def __init__(self, parts: RunnerParts) -> None:
        self.parts = parts
        self.app = parts.app
        self.store = parts.store
        settings = parts.settings
        self.keeper = LeaseKeeper(parts.store, parts.app.now, settings.lease_duration, parts.emit)
        """What its claims renew their leases through (handed to each claim)."""
        self.slots = Slots(parts)
        """A repeating job's slots, before its run and after."""
        self.claimer = Claimer(parts, keeper=self.keeper)
        """Claims jobs and admits them (the pause set and the flow-control gate)."""
        self.attempt = Attempt(parts, self.slots, self.claimer)
        """Runs a claim: run, decide, write (or defer), announce."""
        self.reaper = Reaper(parts, repeated=self.slots.repeated)
        """Reaps expired leases and sweeps (:meth:`reap`, :meth:`sweep`)."""

    def prepare(self) -> None:
        """Indexes, decorator-declared schedules and concurrency permits (what a
        runner's dispatcher does before it claims; the app prepares its store once)."""
        self.app.ensure_schedules(queues=self.parts.settings.queues)
        for task in self.app.tasks.values():
            if task.takes_permit:
                assert task.concurrency is not None
                self.store.permits.ensure_permits(task.name, task.concurrency)

    # Public steps ----------------------------------------------------------------------------
    def claim_next(self, *, job_id: Any = None) -> Claim | None:
        """Claim the next due job of this runner's tasks and queues (or the pending job
        ``job_id``, due or not). None when there is none, or when it was given back
        because its task's concurrency permits are all taken."""
        return self.claimer.take(job_id)[0]

    def claim_batch(self, limit: int) -> list[Claim]:
        """Claim up to ``limit`` due jobs of this runner's tasks and queues at once (in a
        few round trips whatever ``limit``), in claim order; fewer when fewer are due.
        With ``limit`` 1, as :meth:`claim_next`. When it raises, the jobs it had claimed
        are given back, uncounted (nobody else would run them)."""
        return self.claimer.claim_batch(limit)

    def run_claim(self, claim: Claim) -> Decision | None:
        """Run a claimed job in this thread and record its outcome; returns the
        decision, or None when it did not run to a recorded outcome (its repeating
        slot moved on, or its lease was lost). In a runner's worker with a backlog, the
        outcome may be deferred to the next batched claim's write: the decision as made,
        announced after that write. Without a heartbeat (as in :meth:`run_until_idle`) a
        task's timeout is not enforced."""
        return self.attempt.run(claim)

    def run_claims(self, claims: Sequence[Claim]) -> list[Decision | None]:
        """Run several claimed jobs in this thread, one after another, then record
        their outcomes together: one bulk write, each outcome still fenced on its own
        lease (a job whose lease was lost meanwhile is reported alone, as
        :meth:`run_claim` reports it). Returns the decisions, in order. Nothing renews
        a lease between its job's end and the write."""
        return self.attempt.run_together(claims)

    def run_until_idle(self, *, limit: int = 10_000) -> int:
        """Run due jobs in this thread until none is due (or ``limit`` attempts ran);
        returns how many attempts ran (jobs past their expiry end first)."""
        self.sweep()
        ran = 0
        while ran < limit:
            claim, claimed = self.claimer.take()
            if not claimed:
                break
            if claim is not None:
                self.run_claim(claim)
                ran += 1
        return ran

    def reap(self) -> int:
        """Give back jobs whose lease expired (see :meth:`Reaper.reap
        <mongosched.runner.reaper.Reaper.reap>`); returns how many were reaped."""
        return self.reaper.reap()

    def sweep(self) -> int:
        """End jobs past their expiry and repair dependents' releases (see
        :meth:`Reaper.sweep <mongosched.runner.reaper.Reaper.sweep>`); returns how
        many jobs it moved."""
        return self.reaper.sweep()
