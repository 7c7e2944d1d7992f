"""The reaper: jobs whose holder stopped renewing their lease go back to ``pending``
(or end, when their attempts are spent), and its sweep: unstarted jobs past their
expiry end, dependents left waiting by a crash or a deleted job are released, and so
are jobs held (``paused``) with no pause behind them.

A runner's dispatcher runs it between claims, every ``reap_interval``; it runs in the
caller's thread otherwise (:meth:`Runner.reap <mongosched.runner.runner.Runner.reap>`,
:meth:`~mongosched.runner.runner.Runner.sweep`). What follows for each job is decided
by :mod:`mongosched._core.outcome`; the store re-checks the expiry in the same write,
so a heartbeat that lands first wins.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import timedelta

from mongosched._core import outcome
from mongosched._core.outcome import Decision, Ending
from mongosched._core.records import JobRecord
from mongosched.observe import logs
from mongosched.runner import dependencies
from mongosched.runner.parts import RunnerParts

__all__ = ["Reaper"]

log = logging.getLogger("mongosched.runner")


class Reaper:
    """Reaps expired leases and sweeps (see the module).

    :param parts: the runner's: its app (clock, retention), its lease (the sweep leaves
        a job finished less than a lease ago to the runner that may still be releasing
        its dependents), its events and the release of dependents.
    :param repeated: follows up a repeating job reaped to its next slot (the slots it
        dropped, a pause after failures).
    """

    def __init__(
        self,
        parts: RunnerParts,
        *,
        repeated: Callable[[Decision, JobRecord], None] = lambda decision, stored: None,
    ) -> None:
        self.app = parts.app
        self.store = parts.store
        self.lease_duration = parts.settings.lease_duration
        self.emit = parts.emit
        self.release_dependents = parts.release_dependents
        self.repeated = repeated
        self.walk = dependencies.Walk()
        """Where the sweep's walk of waiting jobs goes on (a page per pass)."""

    def reap(self) -> int:
        """Give back jobs whose lease expired (their runner stopped renewing them): to
        pending while attempts remain, else failed (repeating jobs: the next slot).
        Returns how many were reaped. A job that cannot be processed is reported and
        skipped; it never stops the others."""
        now = self.app.now()
        reaped = 0
        retention = self.app.retention
        for record in self.store.leases.leases_expired(now):
            decision = outcome.decide(record, Ending.LEASE_EXPIRED, now=now, retention=retention)
            stored = self.store.leases.reap(record, now, decision.settlement)
            if stored is not None:
                reaped += 1
                log.warning(
                    "job %s (%s): %s",
                    record.id,
                    record.task,
                    decision.settlement.error,
                    extra=logs.fields(record),
                )
                written = decision.as_written(stored.status)
                self.emit(written.event, stored)
                self.repeated(written, stored)
                self.release_dependents(stored)
        return reaped

    def sweep(self) -> int:
        """Flow control's share of the reaper: end pending and waiting jobs past their
        expiry, release held jobs whose pause is gone, finish releases of dependents
        that a crash interrupted, and release jobs waiting for a job that no longer
        exists (a page of them a pass). Returns how many jobs it moved."""
        now, retention = self.app.now(), self.app.retention
        moved = dependencies.expire_due(self.store, now=now, retention=retention, emit=self.emit)
        released = self.store.admin.resume_unpaused(now)
        if released:
            log.warning("%d paused jobs had no pause behind them: released", released)
        moved += released
        grace = now - timedelta(seconds=self.lease_duration)
        return moved + dependencies.repair(
            self.store,
            now=now,
            finished_before=grace,
            retention=retention,
            emit=self.emit,
            walk=self.walk,
        )
