"""What a runner's claims keep their leases through (:class:`LeaseKeeper`).

A runner's steps make one keeper and hand it to each claim they take. A claim's
renewals (from a heartbeat thread), its hold for a transaction and its progress
writes go through it: the store's renewing writes alone (:class:`Renewals`), the
runner's clock, how long a lease lasts, and who hears of a lease lost. A claim so
knows nothing else of the runner that holds it, and a test can hand it a small fake.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime
from typing import Any, Protocol

from mongosched._core.records import JobRecord, Renewal
from mongosched.observe import logs
from mongosched.runner.dependencies import Emit

__all__ = ["LeaseKeeper", "Renewals", "stop_margin"]

log = logging.getLogger("mongosched.runner")


class LeaseRenewals(Protocol):
    """A holder's fenced writes to its job (see :class:`~mongosched.store.parts.Leases`)."""

    def renew(
        self, job_id: Any, token: str, now: datetime, until: datetime, deadline: float | None = None
    ) -> Renewal: ...

    def write_progress(
        self, job_id: Any, token: str, value: float | None, message: str | None, now: datetime
    ) -> bool: ...


class PermitRenewals(Protocol):
    """A holder's renewal of its permit (see :class:`~mongosched.store.control.Permits`)."""

    def renew_permit(
        self, task: str, token: str, until: datetime, deadline: float | None = None
    ) -> bool: ...


class SlotRenewals(Protocol):
    """A holder's renewal of its keyed slot (see :class:`~mongosched.store.control.Limits`)."""

    def renew_slot(
        self, task: str, key: str, token: str, until: datetime, deadline: float | None = None
    ) -> bool: ...


class Renewals(Protocol):
    """The store's renewing writes, fenced on a lease's token: of its parts, these
    alone (a :class:`~mongosched.store.Store` is one)."""

    @property
    def leases(self) -> LeaseRenewals: ...

    @property
    def permits(self) -> PermitRenewals: ...

    @property
    def limits(self) -> SlotRenewals: ...


def stop_margin(lease_duration: float) -> float:
    """How long before its lease ends a holder that cannot renew the lease gives it up
    and cancels its run: a tenth of the lease, at most a second. Another runner takes
    the job only once the lease has ended, so by then a run that looks at its context
    has stopped, and two holders never run the job at once."""
    return min(lease_duration / 10, 1.0)


class LeaseKeeper:
    """What a runner's claims keep their leases through (see the module).

    :param store: the store's renewing writes.
    :param clock: the runner's clock.
    :param lease_duration: seconds a lease lasts from each renewal.
    :param emit: sends an event about a job (``job:lease_lost``).
    """

    def __init__(
        self, store: Renewals, clock: Callable[[], datetime], lease_duration: float, emit: Emit
    ) -> None:
        self.store = store
        self.clock = clock
        self.lease_duration = lease_duration
        self.emit = emit

    def now(self) -> datetime:
        return self.clock()

    def lease_lost(self, record: JobRecord, why: str) -> None:
        """The lease of the job ``record`` is (as claimed) was lost, for ``why``."""
        log.warning(
            "job %s (%s): lease lost (%s); another runner may run it, and this runner's "
            "writes for it are refused",
            record.id,
            record.task,
            why,
            extra=logs.fields(record),
        )
        self.emit("job:lease_lost", record)
