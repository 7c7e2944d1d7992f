"""The parts of a runner that its pieces share (:class:`RunnerParts`), made first,
before any piece, as :class:`~mongosched.operations.base.AppParts` is for the app's
operations: each piece is given them, and nothing is wired to a piece made later."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from mongosched._core.records import JobRecord, Settlement
from mongosched.job import Job
from mongosched.runner import dependencies
from mongosched.runner.claim import Claim
from mongosched.runner.host import RunnerHost
from mongosched.runner.inflight import InFlight
from mongosched.runner.settings import RunnerSettings
from mongosched.runner.settler import Leased, Settler
from mongosched.store import Patience, Store
from mongosched.store.parts import Landed, stored_record

__all__ = ["RunnerParts"]


@dataclass(frozen=True, kw_only=True)
class RunnerParts:
    """What a runner's pieces share (see the module)."""

    app: RunnerHost
    """The app as the runner sees it: its store, tasks, clock, retention, listeners."""
    settings: RunnerSettings
    """The runner's checked options."""
    runner: object
    """The runner its events name."""
    flight: InFlight
    """What spans its threads: the claims in flight, the free places, the stop."""
    settler: Settler
    """Writes outcomes: alone, together, or with the next batched claim."""

    @property
    def store(self) -> Store:
        return self.app.store

    def patience(self, held: Sequence[Leased]) -> Patience:
        """See :meth:`InFlight.patience <mongosched.runner.inflight.InFlight.patience>`."""
        return self.flight.patience(held)

    def emit(self, event: str, record: JobRecord | Landed, **fields: Any) -> None:
        """Send ``event`` about the job ``record`` is, naming the runner (made a
        :class:`~mongosched.job.Job`, and a :class:`~mongosched.store.parts.Landed`
        its record, only for listeners)."""
        app = self.app
        if app.listening(event):
            job = Job(stored_record(record), app.store.jobs)
            app.emit(event, job=job, runner=self.runner, **fields)

    def release_dependents(self, stored: JobRecord | Landed) -> None:
        """A job this runner settled is final: release the jobs waiting for it."""
        if stored.status.is_final and stored.has_dependents:
            app = self.app
            now, retention = app.now(), app.retention
            record = stored_record(stored)
            dependencies.release(app.store, record, now=now, retention=retention, emit=self.emit)

    def settle_held(self, claim: Claim, settlement: Settlement) -> JobRecord | None:
        """Write ``settlement`` for a claim that does not run to an outcome (given back,
        ended unrun), at once and alone, with its lease's patience."""
        return self.app.store.leases.settle(claim.record, settlement, self.patience((claim,)))
