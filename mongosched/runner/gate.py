"""Flow-control limits at claim time, for one runner: the :class:`Gate` a claimed job
passes before it runs (its task's rate limit, its key's concurrency slot), and the
runner's memory of saturated rate limits, so that a saturated task is left out of
claims until its window frees instead of costing a claim round trip per poll.

A claimed job whose limit is saturated is given back as
:func:`mongosched._core.outcome.held_back` decides: pending, the attempt uncounted; in its
place in line when the task's own limit is saturated (the task is then skipped until
the window frees), due when its key frees when a keyed limit is (so other keys' jobs
are claimed meanwhile). A start is recorded only for a job in hand, after every other
check, so no start is taken for nothing; one whose job is given back unrun is
returned.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from datetime import datetime, timedelta

from mongosched._core import outcome
from mongosched._core.records import Settlement
from mongosched.errors import StoreError
from mongosched.runner.claim import Claim
from mongosched.store.control import Limits

__all__ = ["Gate"]

log = logging.getLogger("mongosched.runner")


def _rate_key(claim: Claim) -> str | None:
    """The key ``claim``'s start is recorded under (None: the task's one rate)."""
    return claim.record.rate_key if claim.task.rate_key is not None else None


class Gate:
    """The limits a runner's claims pass (see the module)."""

    def __init__(self, limits: Limits, backoff: float) -> None:
        self.limits = limits
        self.backoff = timedelta(seconds=backoff)
        """How long a job whose key's concurrency slots are all held waits."""
        self._free_at: dict[str, datetime] = {}
        self._keys: dict[tuple[str, str | None], tuple[datetime, datetime]] = {}
        """Saturated keys of keyed rate limits: (when the key frees, the next due time
        this runner gives a job of that key it holds back)."""
        self._keys_kept = 0
        self.held_back = 0
        """Claims given back because a limit was saturated (for benchmarks)."""

    def claimable(self, names: Iterable[str], now: datetime) -> list[str]:
        """``names`` less the tasks whose rate limit is saturated until after ``now``."""
        free = self._free_at
        if not free:
            return list(names)
        for name, at in list(free.items()):
            if at <= now:
                del free[name]
        return [name for name in names if name not in free]

    def admit(self, claim: Claim, now: datetime) -> Settlement | None:
        """Take the limits ``claim``'s job needs (recorded on the claim). None when
        admitted; else the settlement to give the job back with (what it took is
        released by :meth:`release`)."""
        task, record, limits = claim.task, claim.record, self.limits
        if task.concurrency is not None and task.concurrency_key is not None:
            slot = record.concurrency_key or ""
            got = limits.take_slot(task.name, slot, task.concurrency, claim.token, now, claim.until)
            if not got.taken:
                self.held_back += 1
                return outcome.held_back(record, now, now + self.backoff)
            claim.took_slot(slot)
        limit = task.rate_limit
        if limit is not None:
            key = _rate_key(claim)
            known = self._keys.get((task.name, key))
            if known is not None and known[0] > now:  # saturated a moment ago
                return self._hold_key(claim, now, key, known[0])
            got = limits.take_rate(task.name, key, limit.count, limit.per, claim.token, now)
            if not got.taken:
                if task.rate_key is None:  # the whole task waits: skip it until then
                    self.held_back += 1
                    if got.free_at is not None:
                        self._free_at[task.name] = got.free_at
                    return outcome.held_back(record, now, None)
                return self._hold_key(claim, now, key, got.free_at or now)
            claim.took_rate()
        return None

    def _hold_key(
        self, claim: Claim, now: datetime, key: str | None, free_at: datetime
    ) -> Settlement:
        """Hold back a job whose key's rate is saturated: due when the key frees, and
        the next ones of that key this runner holds back spaced at the key's rate, so
        that a backlog of one key is not claimed again all at once at every window."""
        limit = claim.task.rate_limit
        assert limit is not None
        self.held_back += 1
        name = (claim.task.name, key)
        previous = self._keys.get(name)
        due = free_at if previous is None else max(free_at, previous[1])
        if len(self._keys) > 2 * self._keys_kept + 64:  # forget keys long free
            self._keys = {k: v for k, v in self._keys.items() if v[1] > now}
            self._keys_kept = len(self._keys)
        spacing = limit.per / limit.count + timedelta(milliseconds=1)  # the window is closed
        self._keys[name] = (free_at, due + spacing)
        return outcome.held_back(claim.record, now, due)

    def release(self, claim: Claim, *, started: bool) -> None:
        """Give back what ``claim`` took: its keyed slot, and (``started`` False: its
        job did not start) its recorded start."""
        task, limits = claim.task, self.limits
        try:
            slot = claim.slot_key
            if slot is not None:
                claim.drop_slot()
                limits.release_slot(task.name, slot, claim.token)
            if claim.rate_taken and not started:
                claim.drop_rate()
                limits.return_rate(task.name, _rate_key(claim), claim.token)
        except StoreError as exc:  # a slot expires with its lease; a start with its window
            log.warning("could not release a limit of %s: %s", task.name, exc)
