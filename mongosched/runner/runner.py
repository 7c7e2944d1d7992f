"""The runner: claims due jobs, runs them on a thread pool, keeps their leases alive.

A :class:`Runner` is made of objects, each given its collaborators when it is made:
its checked options (:class:`~mongosched.runner.settings.RunnerSettings`); the
:class:`~mongosched.runner.settler.Settler` that writes outcomes; its synchronous
steps (:class:`~mongosched.runner.steps.RunnerSteps`), which hold the
:class:`~mongosched.runner.attempt.Attempt` (run a claim, write and announce its
outcome), the :class:`~mongosched.runner.claimer.Claimer` (claims and
admits jobs) and the :class:`~mongosched.runner.reaper.Reaper` (expired leases, the
sweep); its :class:`~mongosched.runner.dispatcher.Dispatcher` (one thread that claims
a job only when a worker thread is free, hands it to the
:class:`~mongosched.runner.pool.WorkerPool`, re-polls at once after a claim and
waits ``poll_interval`` when there was nothing to do, and between claims reaps and
sweeps); the worker pool; the :class:`~mongosched.runner.heartbeats.Heartbeats` that keep
each claim's lease alive; and a :class:`~mongosched.runner.watcher.WakeWatcher` that
wakes the dispatcher when a job becomes due elsewhere. The runner itself keeps what
spans its threads: the claims in flight, the free workers' places, the stop.
Its workers run claims with those steps; its public steps (:meth:`Runner.claim_next`,
:meth:`Runner.run_claim`, ...) run them in the caller's thread.

Which thread owns what: each piece of a runner's state is either owned by one kind of
thread (only it changes it; others may read a single value of it, a moment old, as
:meth:`Runner.health` does) or guarded by one lock. No thread holds two of these locks
at once.

================  ===============================  ===================  ===================
Thread            Owns                             Locks it takes       I/O (and never)
================  ===============================  ===================  ===================
dispatcher        the dispatcher's state           its own (reads       claims (batched,
                  (``_held``, ``_full_rounds``,    ``_next_due``);      with the deferred
                  ``batching`` of ``flight``,      ``idle`` (adds a     outcomes), admis-
                  ``last_poll``, ``last_error``),  claim); the          sions (permits,
                  the claimer's (``claimed``,      settler's (writes    limits, give backs),
                  ``_saturated``, its gate's and   the deferred         reaps and sweeps,
                  pause set's), the reaper's       outcomes); the       the runner's entry,
                  state, the runner's entry        heartbeats' (hands   the flush of
                  (``registration``: it            them a claim)        deferred outcomes.
                  refreshes and removes it)                             Never runs a job's
                                                                        function nor waits
                                                                        for one; runs
                                                                        listeners only for
                                                                        jobs it ends itself
                                                                        (reaped, expired
                                                                        unrun)
worker (pool)     the claim it runs (its           ``idle`` (a claim    the job's own;
                  ``deferred``, permit and         done: forgotten and  its outcome write
                  limit flags, once finished)      counted in           (alone, or for those
                                                   ``finished``); the   queued meanwhile: a
                                                   settler's; the       group commit), or
                                                   heartbeats' (forget  none (deferred);
                                                   a claim done); the   the announcement
                                                   claim's              (events, dependents)
                                                                        and permit and
                                                                        limit releases.
                                                                        Never claims
heartbeat         the claims it keeps alive, in    the heartbeats';     lease, permit and
                  ``Heartbeats``                   each claim's         slot renewals
                                                   (renewal, lost,      (fenced); a lost
                                                   abort)               lease's event. Never
                                                                        writes an outcome
watcher           its watch and ``state``          the dispatcher's     reads the store's
                                                   (``wake`` sets       change stream. Never
                                                   ``_next_due``)       claims nor writes
caller of stop    ``pool``, ``heartbeats``,        ``idle`` (reads      none: sets flags,
                  ``_watcher``, ``stop_by``, the   the claims, waits    interrupts jobs (not
                  dispatcher's thread (start,      for them); a         graceful), joins and
                  join)                            claim's (abort)      waits within one
                                                                        deadline. Never
                                                                        waits past it
================  ===============================  ===================  ===================

The state that spans the threads is :attr:`Runner.flight` (an
:class:`~mongosched.runner.inflight.InFlight`), made first with the other
:class:`~mongosched.runner.parts.RunnerParts`. Guarded: its ``claims`` (the claims in
flight) and ``finished`` by its ``idle``, whose
condition also tells a stop when a claim leaves; the dispatcher's ``_next_due`` by its
own lock (a caller's :meth:`Runner.wake` takes it too); the settler's queue and writer
by its own lock (:mod:`mongosched.runner.settler`; ``bulk_writes`` only changes in the
writer, one at a time); each :class:`~mongosched.runner.claim.Claim`'s lease by its lock.
Shared: ``free`` counts the free workers' places; the dispatcher takes one before it
claims, and a claim's worker gives it back when its outcome is written, or at once when
the outcome is deferred. Handed between threads: a claim's fields set at admission
reach its worker through the pool's queue, and a deferred outcome reaches the worker
that announces it through the settler's lock. A runner that is not started has no
threads: its public steps run in the caller's.
"""

from __future__ import annotations

import logging
import math
import signal
import threading
import time
from collections.abc import Sequence
from datetime import datetime
from types import FrameType
from typing import Any

from mongosched._core import validate
from mongosched._core.outcome import Decision
from mongosched.errors import ConfigurationError, WorkerShutdown
from mongosched.runner import at_exit
from mongosched.runner.claim import Claim
from mongosched.runner.dispatcher import Dispatcher
from mongosched.runner.heartbeats import Heartbeats
from mongosched.runner.host import RunnerHost
from mongosched.runner.inflight import InFlight
from mongosched.runner.parts import RunnerParts
from mongosched.runner.pool import WorkerPool
from mongosched.runner.registration import Registration
from mongosched.runner.settings import RunnerSettings
from mongosched.runner.settler import Settler
from mongosched.runner.steps import RunnerSteps
from mongosched.runner.watcher import WakeWatcher, wake_mode

__all__ = ["Runner", "RunnerHost"]

log = logging.getLogger("mongosched.runner")


class Runner:
    """Runs an app's jobs. Make one with :meth:`App.runner`.

    :param workers: worker threads (jobs run at once by this runner).
    :param queues: queues to serve (None: every queue).
    :param name: owner name recorded in leases (default ``host:pid:id``).
    :param lease_duration: override the app's.
    :param poll_interval: override the app's.
    :param heartbeat_interval: seconds between lease renewals (at most a third of the
        lease; default exactly that).
    :param reap_interval: seconds between reaper passes (``lease_duration / 3``).
    :param shutdown_timeout: seconds a graceful stop (a signal, or the process
        exiting) waits for jobs in flight.
    :param wake: how it learns of jobs that become due elsewhere: ``"auto"``,
        ``"change_stream"`` or ``"poll"`` (default: the app's ``wake``; see
        :mod:`mongosched.runner.watcher`).
    """

    def __init__(
        self,
        app: RunnerHost,
        *,
        workers: int = 4,
        queues: Sequence[str] | None = None,
        name: str | None = None,
        lease_duration: float | None = None,
        poll_interval: float | None = None,
        heartbeat_interval: float | None = None,
        reap_interval: float | None = None,
        shutdown_timeout: float = 30.0,
        wake: str | None = None,
    ) -> None:
        settings = RunnerSettings(
            app,
            workers=workers,
            queues=queues,
            name=name,
            lease_duration=lease_duration,
            poll_interval=poll_interval,
            heartbeat_interval=heartbeat_interval,
            reap_interval=reap_interval,
        )
        self.app = app
        self.store = app.store
        self.settings = settings
        """Its checked options (each part reads them here)."""
        self.shutdown_timeout = validate.seconds(shutdown_timeout, what="Runner: shutdown_timeout")
        self.wake_mode = wake_mode(
            getattr(app, "wake", "auto") if wake is None else wake, what="Runner"
        )
        self._watcher: WakeWatcher | None = None
        self.flight = InFlight(settings.workers, app.now)
        """What spans its threads: the claims in flight, the free workers' places, the
        stop, whether a batched claim is coming."""
        self.settler = Settler(app.store, gather=settings.gather, crew=self.flight)
        """Writes outcomes: alone, together when several finish at once, or with the
        next batched claim."""
        self.parts = RunnerParts(
            app=app, settings=settings, runner=self, flight=self.flight, settler=self.settler
        )
        """What its pieces share, made before them."""
        self.steps = RunnerSteps(self.parts)
        """The synchronous steps its threads take (claim, run a claim, reap)."""
        self.claimer = self.steps.claimer
        """Claims jobs and admits them (the pause set and the flow-control gate)."""
        self.registration = Registration(self.store.admin, self)
        """This runner's entry in the registry of live runners (:meth:`App.live_runners`)."""
        self.dispatcher = Dispatcher(self.parts, self.steps, registration=self.registration)
        """The thread that claims jobs and hands them to workers."""

    # Its options (held once, in its settings) ---------------------------------------------
    @property
    def name(self) -> str:
        return self.settings.name

    @property
    def workers(self) -> int:
        return self.settings.workers

    @property
    def queues(self) -> list[str] | None:
        return self.settings.queues

    @property
    def lease_duration(self) -> float:
        return self.settings.lease_duration

    @property
    def poll_interval(self) -> float:
        return self.settings.poll_interval

    @property
    def heartbeat_interval(self) -> float:
        return self.settings.heartbeat_interval

    @property
    def reap_interval(self) -> float:
        return self.settings.reap_interval

    @property
    def stop_by(self) -> float:
        """When a stop's deadline falls (a :func:`time.monotonic` time): no holder's
        write retries past it."""
        return self.flight.stop_by

    @property
    def finished(self) -> int:
        """Jobs its workers ran to their end."""
        return self.flight.finished

    # Steps in the caller's thread ------------------------------------------------------------
    # (Not started, a runner has no threads: eager mode, drain and tests call these.)
    def now(self) -> datetime:
        return self.app.now()

    @property
    def claimed(self) -> int:
        """Jobs this runner claimed and admitted (those given back are not counted)."""
        return self.claimer.claimed

    def prepare(self) -> None:
        """See :meth:`RunnerSteps.prepare <mongosched.runner.steps.RunnerSteps.prepare>`."""
        self.steps.prepare()

    def claim_next(self, *, job_id: Any = None) -> Claim | None:
        """See :meth:`RunnerSteps.claim_next <mongosched.runner.steps.RunnerSteps.claim_next>`."""
        return self.steps.claim_next(job_id=job_id)

    def claim_batch(self, limit: int) -> list[Claim]:
        """See :meth:`RunnerSteps.claim_batch <mongosched.runner.steps.RunnerSteps.claim_batch>`."""
        return self.steps.claim_batch(limit)

    def run_claim(self, claim: Claim) -> Decision | None:
        """See :meth:`RunnerSteps.run_claim <mongosched.runner.steps.RunnerSteps.run_claim>`."""
        return self.steps.run_claim(claim)

    def run_claims(self, claims: Sequence[Claim]) -> list[Decision | None]:
        """See :meth:`RunnerSteps.run_claims <mongosched.runner.steps.RunnerSteps.run_claims>`."""
        return self.steps.run_claims(claims)

    def run_until_idle(self, *, limit: int = 10_000) -> int:
        """See :meth:`RunnerSteps.run_until_idle
        <mongosched.runner.steps.RunnerSteps.run_until_idle>`."""
        return self.steps.run_until_idle(limit=limit)

    def reap(self) -> int:
        """See :meth:`RunnerSteps.reap <mongosched.runner.steps.RunnerSteps.reap>`."""
        return self.steps.reap()

    def sweep(self) -> int:
        """See :meth:`RunnerSteps.sweep <mongosched.runner.steps.RunnerSteps.sweep>`."""
        return self.steps.sweep()

    # Lifecycle -------------------------------------------------------------------------------
    @property
    def is_running(self) -> bool:
        return self.dispatcher.is_alive()

    @property
    def in_flight(self) -> int:
        """Jobs this runner holds leases for."""
        return self.flight.count()

    def registered_tasks(self) -> list[str]:
        """The tasks this runner can run."""
        return sorted(self.app.tasks)

    def start(self) -> Runner:
        """Start the dispatcher and workers in background threads; returns at once,
        without waiting for the database: the dispatcher prepares (indexes, declared
        schedules, permits) before it claims, retrying with backoff while the database
        cannot be reached. :attr:`ready` says when it has."""
        if self.is_running:
            raise ConfigurationError(f"runner {self.name} is already started")
        flight = self.flight
        flight.stopping.clear()
        flight.stop_by = math.inf
        flight.pool = WorkerPool(self.workers, "mongosched-worker")
        flight.heartbeats = Heartbeats(self.workers, self.heartbeat_interval, self.name)
        flight.heartbeats.start()
        self.app.attach(self)
        at_exit.runners.add(self)
        log.info(
            "runner %s started: %d worker(s), queues %s, tasks %s, wake %s",
            self.name,
            self.workers,
            "all" if self.queues is None else ",".join(self.queues),
            ",".join(sorted(self.app.tasks)) or "none",
            self.wake_mode,
        )
        self.dispatcher.start()
        if self.wake_mode != "poll":
            self._watcher = WakeWatcher(self, self.wake_mode)
            self._watcher.start()
        self.app.emit("runner:start", runner=self)
        return self

    def wake(self, at: datetime | None = None) -> None:
        """Claim now instead of at the end of the idle wait; with ``at`` (a job's due
        time), also claim again at that time rather than up to a poll interval later."""
        self.dispatcher.wake(at)

    def stop(self, graceful: bool = True, timeout: float | None = 30.0) -> bool:
        """Stop claiming, then wait up to ``timeout`` seconds for the jobs in flight.

        Graceful: in-flight jobs finish normally and keep their leases alive meanwhile
        (if the wait times out they go on, heartbeating, until they finish or the process
        ends). Not graceful: in-flight jobs are interrupted with
        :class:`~mongosched.errors.WorkerShutdown` and go back to ``pending`` for
        another runner. Returns True when nothing is left in flight.

        ``timeout`` is one deadline for everything the stop waits for: the dispatcher
        (and its last write of the outcomes handed off to it), the jobs, their outcome
        writes and what follows them. A database that cannot be reached never holds it longer:
        outcome writes stop retrying at the deadline, and what is not written by then
        is left to the leases' expiry (a warning says how many); this thread itself
        does no I/O.
        """
        flight = self.flight
        deadline = None if timeout is None else time.monotonic() + timeout
        if deadline is not None:
            flight.stop_by = min(flight.stop_by, deadline)
        flight.stopping.set()
        self.dispatcher.wake()
        watcher = self._watcher
        if watcher is not None:
            watcher.stop()
        if not graceful:
            for claim in flight.held():
                claim.abort("shutdown", WorkerShutdown)
        # It may be waiting on an unreachable database: one deadline bounds it all.
        self.dispatcher.join(_remaining(deadline))
        done = flight.wait_idle(_remaining(deadline))
        if watcher is not None:  # its server cursor closes within a getMore's wait
            watcher.join(1.0 if deadline is None else min(1.0, deadline - time.monotonic()))
        if flight.pool is not None:  # first: no claim reaches a worker from now on
            flight.pool.shutdown()
        if flight.heartbeats is not None:  # they end once the jobs in flight are over
            flight.heartbeats.stop()
        at_exit.runners.discard(self)
        self.app.detach(self)
        if done:
            log.info("runner %s stopped", self.name)
        else:
            claims = flight.held()
            unwritten = sum(claim.finished for claim in claims)
            log.warning(
                "runner %s stopped claiming; %d job(s) still running, %d outcome(s) not "
                "written by the stop deadline (left to their leases' expiry: a job whose "
                "outcome is not written runs again)",
                self.name,
                len(claims) - unwritten,
                unwritten,
            )
        self.app.emit("runner:stop", runner=self)
        return done

    def run_forever(self) -> None:
        """Start, and block until SIGINT/SIGTERM (graceful stop; a second signal stops at
        once) or until :meth:`stop` is called from another thread."""
        signals = 0

        def handler(signum: int, frame: FrameType | None) -> None:
            nonlocal signals
            signals += 1
            log.info("signal %s: %s", signum, "stopping" if signals == 1 else "stopping now")
            self.flight.stopping.set()
            self.dispatcher.wake()
            if signals > 1:
                threading.Thread(target=self.stop, kwargs={"graceful": False, "timeout": 5}).start()

        previous = {}
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                previous[sig] = signal.signal(sig, handler)
        try:
            self.start()
            while not self.flight.stopping.wait(0.5):
                pass
            self.stop(graceful=True, timeout=self.shutdown_timeout)
        finally:
            for sig, old in previous.items():
                signal.signal(sig, old)

    # Dispatcher -------------------------------------------------------------------------------
    @property
    def ready(self) -> bool:
        """Whether the runner has prepared its database and is claiming."""
        return self.dispatcher.ready

    def wait_ready(self, timeout: float | None = None) -> bool:
        """Block until :attr:`ready` (or ``timeout`` seconds); returns :attr:`ready`."""
        return self.dispatcher.wait_ready(timeout)

    def health(self) -> dict[str, Any]:
        """How this runner is doing, for health checks and probes: ``healthy`` is False
        when its dispatcher thread is not running although it was started and not
        stopped, or when it has not polled for ten poll intervals (plus a minute, for
        database backoff)."""
        now = time.monotonic()
        dispatcher = self.dispatcher
        started = dispatcher.started and not self.flight.stopping.is_set()
        alive = self.is_running
        since = None if dispatcher.last_poll is None else now - dispatcher.last_poll
        stale = since is not None and since > 10 * self.poll_interval + 60
        return {
            "name": self.name,
            "running": alive,
            "ready": self.ready,
            "healthy": (alive or not started) and not stale,
            "in_flight": self.in_flight,
            "claimed": self.claimed,
            "finished": self.finished,
            "seconds_since_poll": since,
            "wake": "poll" if self._watcher is None else self._watcher.state,
            "last_error": dispatcher.last_error,
        }

    def check_clock(self) -> float | None:
        """Compare this host's clock with the database server's and warn when they
        differ by more than a tenth of the lease (see :meth:`Dispatcher.check_clock
        <mongosched.runner.dispatcher.Dispatcher.check_clock>`): the offset in seconds
        (server ahead: positive), or None."""
        return self.dispatcher.check_clock()

    def report_unknown_tasks(self) -> dict[str, int]:
        """Log the due jobs of tasks this runner does not know (left pending), and
        returns how many of each; a task named after a script run as ``__main__`` is
        explained once (maintenance calls this every minute)."""
        return self.dispatcher.report_unknown_tasks()

    def __repr__(self) -> str:
        return f"<Runner {self.name} workers={self.workers} running={self.is_running}>"


def _remaining(deadline: float | None) -> float | None:
    return None if deadline is None else max(0.0, deadline - time.monotonic())
