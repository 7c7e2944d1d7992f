"""Claiming and admission: the part of a runner's steps that takes jobs.

A claim is three steps, each a place to hook into: which tasks and queues may be
claimed from now (:meth:`Claimer._scope`), the store's claim (one job, or a batch that
also writes the outcomes waiting for it), and what happens to each job claimed before
it runs (:meth:`Claimer.admit`). A claim taken is run or given back, never dropped.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from mongosched._core import outcome, validate
from mongosched._core.outcome import Decision
from mongosched._core.records import JobRecord, Settlement
from mongosched.errors import StoreError
from mongosched.observe import logs
from mongosched.runner.claim import Claim
from mongosched.runner.gate import Gate
from mongosched.runner.keeper import LeaseKeeper
from mongosched.runner.parts import RunnerParts
from mongosched.runner.pauses import PauseSet
from mongosched.store import Patience
from mongosched.store.parts import ReadAhead

__all__ = ["Claimer"]

log = logging.getLogger("mongosched.runner")

Scope = tuple[list[str], Sequence[str] | None]
"""The tasks and queues a claim may take jobs of."""


class Claimer:
    """Takes jobs for a runner's steps and admits them (see the module); in a threaded
    runner, only the dispatcher claims, and a worker only releases what its claim holds.

    :param parts: the runner's: its app (tasks, clock, retention), its settings (name,
        queues, lease and intervals), and the settler whose waiting outcomes a batched
        claim writes.
    :param keeper: holds the claims (see :class:`~mongosched.runner.keeper.LeaseKeeper`).
    """

    def __init__(self, parts: RunnerParts, *, keeper: LeaseKeeper) -> None:
        self.parts = parts
        self.app = parts.app
        self.store = parts.store
        self.settings = settings = parts.settings
        self.keeper = keeper
        """Who holds the claims (each :class:`Claim` renews its lease through it)."""
        self.settler = parts.settler
        """Whose waiting outcomes a batched claim writes."""
        self.gate = Gate(self.store.limits, settings.poll_interval)
        """Flow-control limits at claim time (rate limits, keyed concurrency)."""
        self.pause_set = PauseSet(self.store.admin, settings.poll_interval)
        """What is paused, as this runner last read it (once per poll interval)."""
        self.claimed = 0
        """Jobs claimed and admitted (those given back are not counted)."""
        self.ahead = ReadAhead()
        """Candidates batched claims read ahead under a backlog (see
        :class:`~mongosched.store.parts.ReadAhead`): the dispatcher wakes it when a
        new job comes due and drops it when the backlog is over."""
        self._saturated: dict[str, float] = {}
        self._ranked_of: tuple[int, list[str]] = (-1, [])

    def claim_batch(self, limit: int) -> list[Claim]:
        """:meth:`RunnerSteps.claim_batch <mongosched.runner.steps.RunnerSteps.claim_batch>`."""
        limit = validate.whole(limit, what="claim_batch: limit")
        claims: list[Claim] = []
        try:
            self.take_batch(limit, claims)
        except BaseException:
            for claim in claims:
                self.give_back_or_leave(claim)
            raise
        return claims

    @property
    def _ranked(self) -> list[str]:
        """The registered tasks whose jobs are claimed by rank (they age, or share
        fairly): none for most apps, and then a claim is one find as before. Looked
        at again only when a task is registered."""
        tasks = self.app.tasks
        if self._ranked_of[0] != len(tasks):
            self._ranked_of = (len(tasks), [name for name, task in tasks.items() if task.ranked])
        return self._ranked_of[1]

    def _claimable(self) -> list[str]:
        """Registered tasks, less the paused ones and those whose concurrency permits
        were all taken a moment ago. (A task's jobs may sit in any queue: the claim
        filters on queues.) Reads the pause set once per poll interval."""
        now = time.monotonic()
        self.pause_set.refresh(every_queue=self.settings.queues is None)
        names = [name for name in self.app.tasks if self._saturated.get(name, 0.0) <= now]
        return self.gate.claimable(self.pause_set.claimable_tasks(names), self.app.now())

    def _scope(self) -> Scope:
        """The tasks and queues a claim may take jobs of, now (not paused)."""
        return self._claimable(), self.pause_set.claimable_queues(self.settings.queues)

    def take(self, job_id: Any = None, scope: Scope | None = None) -> tuple[Claim | None, bool]:
        """One claim: ``(claim, True)``; ``(None, True)`` when the job was given back
        (see :meth:`admit`); ``(None, False)`` when nothing is due. ``scope``: the
        tasks and queues, when the caller has just read them (:meth:`_scope`)."""
        now = self.app.now()
        if job_id is not None:
            tasks, queues = list(self.app.tasks), None
        else:
            tasks, queues = scope or self._scope()
        record = self.store.claims.claim(
            owner=self.settings.name,
            tasks=tasks,
            queues=queues,
            now=now,
            lease_duration=self.settings.lease_duration,
            job_id=job_id,
            ranked=self._ranked,
        )
        if record is None:
            return None, False
        return self.admit(record, now, by_id=job_id is not None), True

    def take_batch(self, limit: int, claims: list[Claim]) -> int:
        """Up to ``limit`` claims at once, added to ``claims`` as each is admitted, so
        that the caller holds every claim taken whatever fails after it (and runs it, or
        gives it back). Returns the jobs claimed, counting those given back. Jobs of
        tasks with a concurrency or rate limit are claimed one at a time (a batch would
        take more than their limits allow, only to give them back): when such tasks may
        be claimed, the last place is a single claim over every task, so they are not
        starved."""
        if limit <= 1 and not self.settler.queued:
            claim, taken = self.take()
            if claim is not None:
                claims.append(claim)
            return int(taken)
        tasks, queues = self._scope()
        unlimited = [name for name in tasks if not self.app.tasks[name].limited]
        single = len(unlimited) < len(tasks)
        now = self.app.now()
        records: list[JobRecord] = []

        def settle_and_claim(
            outcomes: list[tuple[JobRecord, Settlement]], patience: Patience | None
        ) -> Any:
            settled, got = self.store.claims.settle_and_claim(
                outcomes,
                owner=self.settings.name,
                tasks=unlimited,
                queues=queues,
                now=now,
                lease_duration=self.settings.lease_duration,
                limit=limit - single,
                patience=patience,
                ranked=self._ranked,
                ahead=self.ahead,
                records=False,  # each record made only if what follows needs it
            )
            records.extend(got)  # held from here on, whatever fails next
            return settled

        try:
            self.settler.write_with(settle_and_claim)  # with the outcomes just finished
        finally:
            self.admit_all(records, now, claims)
        claimed = len(records)
        if single:
            claim, taken = self.take(scope=(tasks, queues))
            claimed += int(taken)
            if claim is not None:
                claims.append(claim)
        return claimed

    def admit_all(self, records: list[JobRecord], now: datetime, claims: list[Claim]) -> None:
        """Admit each job a batched claim took, adding the claims to ``claims``: one
        whose admission fails is given back (see :meth:`admit`) and the others go on."""
        for record in records:
            claim = None
            not_admitted = "job %s (%s): not admitted"
            with logs.Contained(log, f"{not_admitted}: %s", not_admitted, record.id, record.task):
                claim = self.admit(record, now)
            if claim is not None:
                claims.append(claim)

    def admit(self, record: JobRecord, now: datetime, by_id: bool = False) -> Claim | None:
        """A claimed job, about to run: its :class:`Claim`, or None when it was given
        back (its schedule was paused since the pauses were read, its lease would end
        before the first heartbeat, or its task's concurrency permits are all held, or
        a flow-control limit is saturated) or ended unrun (past its expiry).
        ``by_id``: claimed by its id (pauses do not apply). Whatever fails on the way,
        the job is given back (uncounted) before the error leaves: a claim taken is
        run or given back, never dropped."""
        claim = Claim(self.keeper, record, self.app.tasks[record.task])
        try:
            return self._admitted(claim, now, by_id)
        except BaseException:
            if not claim.finished:  # not given back already (before a pause's write)
                self.give_back_or_leave(claim)
            raise

    def _admitted(self, claim: Claim, now: datetime, by_id: bool) -> Claim | None:
        """The checks of :meth:`admit`."""
        record, task, store = claim.record, claim.task, self.store
        arrived = self.app.now()  # the claim's reply: what the checks below go by
        if outcome.is_expired(record, arrived):
            self._settle_unrun(claim, outcome.expired(record, arrived, self.app.retention))
            return None
        if not by_id and self.pause_set.holds(record.id):  # paused since we read
            self.give_back(claim)
            self._after_pause(store.admin.pause_schedules([record.id], arrived))
            return None
        label = record.label
        if not by_id and label is not None and self.pause_set.holds_label(label):
            self.give_back(claim)  # scheduled since the pause: held as it held the others
            self._after_pause(store.admin.pause_label(label, arrived, ids=[record.id]))
            return None
        if arrived + timedelta(seconds=self.settings.heartbeat_interval) >= claim.until:
            # The reply came so late that the lease ran out (or will before the first
            # heartbeat can renew it): another runner may take the job; never run it.
            log.warning(
                "job %s (%s): the claim's reply arrived at %s, too late for its lease "
                "(until %s); giving it back",
                claim.job_id,
                task.name,
                arrived,
                claim.until,
                extra=logs.fields(record),
            )
            self.give_back(claim)
            return None
        if task.takes_permit:
            assert task.concurrency is not None
            if not store.permits.take_permit(
                task.name,
                task.concurrency,
                claim.token,
                claim.job_id,
                self.settings.name,
                now,
                claim.until,
            ):
                self.give_back(claim)
                self._saturated[task.name] = time.monotonic() + self.settings.poll_interval
                return None
            claim.took_permit()
        held = self.gate.admit(claim, now)  # the start counts at the claim (started_at)
        if held is not None:  # a flow-control limit is saturated
            self.give_back(claim, held)
            return None
        self.claimed += 1
        return claim

    def _after_pause(self, count: int) -> None:
        """After a hold by the pause set: none held means the pause is gone from the
        store (resumed since the set was read), so the set is read again now rather
        than claim the job only to give it back until the next read."""
        if not count:
            self.pause_set.refresh(every_queue=self.settings.queues is None, force=True)

    def release(self, claim: Claim, *, started: bool) -> None:
        """``claim`` is done with what it holds: no more heartbeats, its permit and its
        limits given back (``started``: its job ran, so its start still counts)."""
        claim.finish()
        if claim.has_permit:
            claim.drop_permit()
            try:
                self.store.permits.release_permit(claim.task.name, claim.token)
            except StoreError as exc:  # the permit's lease expires on its own
                log.warning("could not release a permit of %s: %s", claim.task.name, exc)
        self.gate.release(claim, started=started)

    def give_back(self, claim: Claim, settlement: Settlement | None = None) -> None:
        """A claim that will not run: pending again, uncounted, in its place in line
        (or as ``settlement`` says: held back by a limit)."""
        self.release(claim, started=False)
        back = settlement or outcome.given_back(claim.record, self.app.now())
        self.parts.settle_held(claim, back)

    def _settle_unrun(self, claim: Claim, decision: Decision) -> None:
        """A claimed job that ends without running (expired): write the decision, and
        announce it."""
        record, parts = claim.record, self.parts
        stored = parts.settle_held(claim, decision.settlement)
        if stored is not None:
            decision = decision.as_written(stored.status)
            log.info("job %s (%s): %s", record.id, record.task, decision.error)
            parts.emit(decision.event, stored, error=None)
            parts.release_dependents(stored)

    def give_back_or_leave(self, claim: Claim) -> None:
        """Give back a claim that will not run, after something else failed; if that
        fails too, its job is left to run again once its lease expires (and says so)."""
        try:
            self.give_back(claim)
        except Exception as exc:
            log.warning(
                "job %s (%s): could not give it back (%s); it runs again once its lease expires",
                claim.job_id,
                claim.task.name,
                exc,
                extra=logs.fields(claim.record),
            )
