"""A repeating job's slots, as a runner meets them (:class:`Slots`): which slot a run
is for when it starts (the misfire policy, a run of its own for a slot whose runs may
overlap), and what follows once its outcome landed (the slots it dropped, a pause after
too many failures in a row). What each slot is, is decided by
:mod:`mongosched._core.outcome`; this module writes and says what it decided.
"""

from __future__ import annotations

import logging
from datetime import datetime

from mongosched._core import outcome, spawn
from mongosched._core.outcome import Decision
from mongosched._core.records import JobQuery, JobRecord, JobStatus
from mongosched._core.runs import Runs
from mongosched.observe import logs
from mongosched.runner.claim import Claim
from mongosched.runner.parts import RunnerParts

__all__ = ["Slots"]

log = logging.getLogger("mongosched.runner")


class Slots:
    """A runner's dealings with repeating jobs' slots (see the module): :meth:`start`
    before a run, :meth:`repeated` after its outcome, :meth:`missed` to say what was
    dropped."""

    def __init__(self, parts: RunnerParts) -> None:
        self.parts = parts

    def start(self, claim: Claim) -> bool:
        """Apply the misfire policy to a repeating job's first attempt at a slot.
        Returns False when no run happens now (the job moved to a later slot, or a run
        of its own takes the slot)."""
        parts = self.parts
        app, store = parts.app, parts.store
        now = app.now()
        try:
            plan = outcome.plan_run(claim.record, now)
        except Exception as exc:  # its rule no longer computes: it fails alone
            claim.finish()
            failed = outcome.uncomputable(claim.record, exc, now, app.retention)
            parts.settle_held(claim, failed.settlement)
            log.error("job %s (%s): %s", claim.job_id, claim.task.name, failed.error)
            return False
        if plan.slot is None:
            assert plan.settlement is not None
            claim.finish()
            stored = parts.settle_held(claim, plan.settlement)
            if stored is not None and plan.missed:
                self.missed(stored, plan.missed)
            return False
        if plan.slot != claim.record.scheduled_for:
            # Record the slot this run is for, so a retry of it runs the same slot.
            if not store.leases.record_slot(claim.job_id, claim.token, plan.slot, app.now()):
                claim.lose("slot write was fenced off")
                return False
        # The slots it dropped are written with the run's outcome.
        claim.run_for(plan.slot, plan.missed_slots)
        if plan.missed:
            self.missed(claim.record, plan.missed)
        if Runs.from_document(claim.record.repeat or {}).spawns:
            self._spawn(claim, plan.slot)
            return False
        claim.runs_slot(plan.slot)
        return True

    def _spawn(self, claim: Claim, slot: datetime) -> None:
        """Run ``slot`` of a repeating job whose runs may overlap as a job of its own
        (one per slot: its key holds while it waits or runs), first asking the runs
        still running to stop if its policy is ``cancel_running``; the schedule goes
        on to its next slot."""
        parts = self.parts
        store, record, now = parts.store, claim.record, parts.app.now()
        if Runs.from_document(record.repeat or {}).overlap == "cancel_running":
            running = JobQuery(task=record.task, statuses=(JobStatus.RUNNING,))
            for other in store.jobs.find(running, limit=0):
                if spawn.is_run_of(other, record):
                    log.info("job %s (%s): cancelled for slot %s", other.id, other.task, slot)
                    store.jobs.request_cancel(other.id, now)
        [(run, created)] = store.jobs.insert([spawn.slot_run(record, slot, now)])
        claim.finish()
        parts.settle_held(claim, outcome.spawned(record, slot, now))
        if created:  # due now: this runner claims it next (others within a poll)
            parts.emit("job:created", run)

    def repeated(self, decision: Decision, stored: JobRecord) -> None:
        """After a repeating job's run landed: say which slots it dropped, and pause
        its schedule when it failed too many times in a row."""
        if stored.repeat is None or stored.status is not JobStatus.PENDING:
            return
        if decision.missed:
            self.missed(stored, decision.missed)
        reason = outcome.pause_reason(stored) if decision.event == "job:fail" else None
        if reason is not None:
            log.warning("job %s (%s): %s", stored.id, stored.task, reason)
            try:
                self.parts.app.pause_schedule(stored.id, reason)
            except Exception as exc:  # the next failed run tries again
                log.warning("job %s (%s): could not pause: %s", stored.id, stored.task, exc)

    def missed(self, record: JobRecord, count: int) -> None:
        """Log and send ``schedule:missed`` for ``count`` slots ``record`` dropped."""
        missed = record.missed
        log.warning(
            "job %s (%s): %d slot(s) missed (%s), the latest %s",
            record.id,
            record.task,
            count,
            missed.reason if missed else "?",
            missed.last_slot if missed else "?",
            extra=logs.fields(record),
        )
        self.parts.emit("schedule:missed", record, missed=count)
