"""The :class:`App`: configuration, the task registry, scheduling and events. It holds
the objects that act for it (its operations, transactions and in-process runner),
offers their methods as its own, and gives each runner a :class:`RunnerHost`."""

from __future__ import annotations

import logging
import threading
import time
import weakref
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING, Any, ParamSpec, TypeVar, overload

from mongosched._core import validate
from mongosched._core.delegation import Delegated
from mongosched._core.outcome import Retention
from mongosched._core.scripts import SCRIPT_PREFIX, script_task_warning
from mongosched.errors import ConfigurationError, StoreError, TaskNotRegistered
from mongosched.events import Listener, Listeners
from mongosched.job import Job
from mongosched.operations.admin import AdminOperations
from mongosched.operations.audit import AuditTrail
from mongosched.operations.base import AppParts
from mongosched.operations.bulk import BulkOperations
from mongosched.operations.jobs import Cancellation, JobOperations
from mongosched.operations.scheduling import SchedulingOperations
from mongosched.runner.host import RunnerHost
from mongosched.runner.inprocess import InProcess
from mongosched.runner.runner import Runner
from mongosched.runner.watcher import wake_mode
from mongosched.store import Database, Store, in_process, open_store
from mongosched.task import Task, TaskOptions, task_options
from mongosched.transaction import RETRY_TIME, Transaction, TransactionIntegration, Transactions
from mongosched.workflow import Workflows

if TYPE_CHECKING:
    # Only for the type checker: ``Unpack`` is in ``typing`` from Python 3.11.
    from typing_extensions import Unpack

__all__ = ["App", "Cancellation", "reconfigure", "runner_host"]

log = logging.getLogger("mongosched")

P = ParamSpec("P")
R = TypeVar("R")
T = TypeVar("T")


def utcnow() -> datetime:
    return datetime.now(timezone.utc)


class App:
    """A mongosched application: where tasks are registered and jobs are stored.

    :param uri: where jobs are stored: a MongoDB URI naming the database
        (``mongodb://host/dbname``), or ``memory://`` for the in-process store (demos
        and tests; ``memory://name`` shares one store by name within the process).
    :param database: instead of ``uri``, a :class:`pymongo.database.Database`.
    :param collection: name of the job collection.
    :param lease_duration: seconds a claim stays valid without a heartbeat; a crashed
        runner's jobs run again this long after its last heartbeat.
    :param poll_interval: seconds an idle runner waits between claims.
    :param clock: callable returning the current time as an aware datetime (tests
        inject a fake, see :class:`mongosched.testing.FakeClock`).
    :param queues: queues the runners serve by default (None: every queue).
    :param keep_completed: how long completed jobs are kept (None: forever).
    :param keep_failed: how long failed and cancelled jobs are kept (None: forever).
    :param keep_audit: how long the audit trail keeps operators' actions (None:
        forever; see :attr:`audit`).
    :param write_concern: write concern of every state change (default ``"majority"``,
        so a failover cannot roll back a claim).
    :param connect_timeout: seconds any call waits for an unreachable MongoDB server
        before it raises :class:`~mongosched.errors.StoreUnavailable` (default 5; the
        URI's ``serverSelectionTimeoutMS`` wins). Runners keep retrying with backoff.
    :param eager: run tasks inline at ``schedule()`` (tests; see :mod:`mongosched.testing`).
    :param wake: how an idle runner learns that a job became due in another process:
        ``"auto"`` (default: a change stream when the server is a replica set or a
        sharded cluster, else polling), ``"change_stream"`` (the same, warning when the
        server cannot) or ``"poll"`` (every ``poll_interval``). ``memory://`` wakes
        the runners of this process sharing the store. See :doc:`/running`.
    """

    def __init__(
        self,
        uri: str | None = None,
        *,
        database: Any = None,
        collection: str = "mongosched_jobs",
        lease_duration: float | timedelta = 30.0,
        poll_interval: float | timedelta = 1.0,
        clock: Callable[[], datetime] | None = None,
        queues: Sequence[str] | None = None,
        keep_completed: timedelta | float | None = timedelta(days=7),
        keep_failed: timedelta | float | None = timedelta(days=30),
        keep_audit: timedelta | float | None = timedelta(days=90),
        write_concern: str | int | None = "majority",
        connect_timeout: float | timedelta = 5.0,
        eager: bool = False,
        wake: str = "auto",
        aging: float | timedelta | None = None,
    ) -> None:
        self.lease_duration = validate.seconds(
            lease_duration, what="App: lease_duration", minimum=0.01
        )
        self.poll_interval = validate.seconds(poll_interval, what="App: poll_interval", strict=True)
        if clock is not None and not callable(clock):
            raise ConfigurationError(f"App: clock must be callable, not {clock!r}")
        self._clock = clock or utcnow
        if isinstance(queues, str):
            raise ConfigurationError("App: queues must be a list of names, not a str")
        self.queues = None if queues is None else [validate.queue(q, task="*") for q in queues]
        self.retention = Retention(
            completed=_keep(keep_completed, "keep_completed"),
            failed=_keep(keep_failed, "keep_failed"),
        )
        if not isinstance(eager, bool):
            raise ConfigurationError(f"App: eager must be True or False, not {eager!r}")
        self.eager = eager
        self.aging = validate.seconds(aging, what="App: aging", strict=True, allow_none=True)
        """The default of ``@app.task(aging=...)`` (see :doc:`/flow-control`)."""
        self.wake = wake_mode(wake, what="App")
        self.uri = uri
        timeout = validate.seconds(connect_timeout, what="App: connect_timeout", strict=True)
        self.store: Store = open_store(
            uri,
            database=database,
            collection=validate.text(collection, what="App: collection"),
            write_concern=write_concern,
            connect_timeout=timeout,
        )
        """Where this app's jobs are stored (see :mod:`mongosched.store`)."""
        self._keep_audit = _keep(keep_audit, "keep_audit")
        self.tasks: dict[str, Task[Any, Any]] = {}
        self.runners: weakref.WeakSet[Runner] = weakref.WeakSet()
        """The :class:`Runner` objects of this app running in this process
        (:meth:`live_runners` reads the runners registered in the store, from every
        process and host)."""
        self._listeners = Listeners(self)
        self._prepared = False
        self._prepare_failures = 0
        self._prepare_error: StoreError | None = None
        self._lock = threading.RLock()
        self._in_process = InProcess(self.runner, self._forked)
        self._workflows = Workflows(self, self._wake, lambda tx: self._transactions.bind(tx))
        self._compose([])

    def _compose(self, integrations: list[TransactionIntegration]) -> None:
        """Make the objects that act for this app, each given what it needs of the
        store and options as they are now (at the start, and again when
        :func:`reconfigure` changes them)."""
        store, now, retention, events = self.store, self.now, self.retention, self._listeners
        self.audit = AuditTrail(store, now=now, keep=self._keep_audit)
        """The audit trail: who retried, cancelled, purged, paused, resumed or edited
        what, and when (see :mod:`mongosched.operations.audit`)."""
        self._transactions = Transactions(store, self._writable, integrations)
        parts = AppParts(
            store,
            writable=self._writable,
            now=now,
            retention=retention,
            events=events,
            tasks=self.tasks,
            audit=self.audit,
        )
        self._jobs = JobOperations(parts, created=self._created)
        self._bulk = BulkOperations(
            parts, wake=self._wake, release_finished=self._jobs.release_for_purge
        )
        self._admin = AdminOperations(parts)
        self._host = RunnerHost(
            store=store,
            tasks=self.tasks,
            lease_duration=self.lease_duration,
            poll_interval=self.poll_interval,
            retention=retention,
            wake=self.wake,
            events=events,
            now=now,
            ensure_schedules=self._admin.ensure_schedules,
            attach=lambda runner: self.runners.add(runner),  # a fork replaces the set
            detach=lambda runner: self.runners.discard(runner),
            bind_transaction=self._transactions.bind,
            pause_schedule=lambda schedule, reason: self._admin.pause(
                schedule=schedule, reason=reason
            ),
        )
        self._scheduling = SchedulingOperations(
            parts,
            transactions=self._transactions,
            jobs=self._jobs,
            named=self._admin.named,
            host=self._host,
            eager=lambda: self.eager,
        )

    # Time and storage --------------------------------------------------------------------
    def now(self) -> datetime:
        """The app clock's current time, aware UTC, in whole milliseconds (as stored)."""
        clock = self._clock
        if clock is utcnow:  # the default clock (a runner asks twice per job)
            # The system clock's whole milliseconds, made at once: a fifth of the cost of
            # datetime.now() and then replace(). Exact (until 2112): a time in ms / 1000
            # is within half a microsecond of its value, which fromtimestamp rounds to.
            return datetime.fromtimestamp(time.time_ns() // 1_000_000 / 1000, timezone.utc)
        value = clock()
        if not isinstance(value, datetime) or value.tzinfo is None or value.utcoffset() is None:
            raise ConfigurationError("App: clock must return a timezone-aware datetime")
        value = value.astimezone(timezone.utc)
        return value.replace(microsecond=value.microsecond // 1000 * 1000)

    @property
    def database(self) -> Database | None:
        """The pymongo ``Database`` the app stores its jobs in: the one given as
        ``database=``, or the URI's (its client made by the app, ``tz_aware``, connected
        at first use); None on ``memory://``. Your own writes through it can join the
        app's transactions (``session=tx.session``, ``current_job().session`` in a
        ``transactional=True`` task: see :doc:`/transactions`)."""
        return self.store.transactions.database()

    def ensure_indexes(self) -> None:
        """Prepare the store for writes now (indexes; otherwise done on the first write)."""
        self.store.prepare()
        self._prepared = True

    def _writable(self) -> Store:
        """The store, prepared for writes once (reads need no indexes, so a read-only
        database user can list and count jobs). A caller that waited while another
        thread tried and failed (a runner starting, another request) gets that failure:
        an unreachable database costs it one ``connect_timeout``, not one more."""
        if not self._prepared:
            failures = self._prepare_failures
            with self._lock:
                if not self._prepared:
                    failed = self._prepare_error
                    if self._prepare_failures != failures and failed is not None:
                        raise type(failed)(str(failed)) from failed
                    try:
                        self.ensure_indexes()
                    except StoreError as exc:
                        self._prepare_failures += 1
                        self._prepare_error = exc
                        raise
        return self.store

    def close(self) -> None:
        """Stop this app's runners and close its connections."""
        for runner in list(self.runners):
            runner.stop(graceful=True)
        self.store.close()
        self._prepared = False

    def _forked(self) -> None:
        """In a forked child: the parent's runners do not survive a fork (their threads
        are not copied)."""
        self._lock = threading.RLock()
        self.runners = weakref.WeakSet()
        self._scheduling.eager_runner = None

    # Registry -----------------------------------------------------------------------------
    @overload
    def task(self, fn: Callable[P, R], /) -> Task[P, R]: ...

    @overload
    def task(self, **options: Unpack[TaskOptions]) -> Callable[[Callable[P, R]], Task[P, R]]: ...

    def task(  # type: ignore[misc]  # mypy cannot match **options to the keyword overload
        self, fn: Callable[..., Any] | None = None, /, **options: Any
    ) -> Any:
        """Register a function as a task, bare (``@app.task``) or with options.

        :param name: registry name (default ``module.qualname``); jobs store it.
        :param queue: default queue of its jobs.
        :param priority: default priority, 1 (first) to 10 (last) (a fraction sorts
            between two).
        :param retry: a :class:`RetryPolicy`, an int (that many retries after the first
            attempt, no delay; ``0``: never retry) or None for the default (2 retries,
            so 3 attempts in all, exponential backoff with jitter).
        :param timeout: seconds a run may take; then it is cancelled and fails with
            :class:`~mongosched.errors.JobTimeout`, and retries by its policy.
        :param concurrency: at most this many of its jobs run at once, across every
            runner in every process.
        :param repeat: run repeatedly by a rule, as ``configure(repeat=...)`` takes it:
            ``Every(seconds=30)`` or ``Cron("0 9 * * *", timezone="Europe/Berlin")``.
            ``cron`` and ``every`` are its shorthands (give one of the three):
        :param cron: run on a cron schedule (5 fields, or 6 with seconds first) in
            ``timezone`` (IANA name, default UTC).
        :param every: run every so many seconds (or a timedelta).
        :param misfire: ``"coalesce"``, ``"skip"`` or ``"all"``: what to do with slots
            missed while no runner was running; ``misfire_grace`` and ``max_catchup``
            bound it (see :doc:`/cron`).
        :param jitter: start each slot at an offset in ``[0, jitter)`` after its time
            (seconds or a timedelta), the same for a slot in every runner.
        :param overlap: what slots that come due while a run still runs do:
            ``"skip"`` (default), ``"buffer_one"``, ``"allow"`` or ``"cancel_running"``
            (see :doc:`/cron`).
        :param pause_after: pause the schedule after this many failed runs in a row.
        :param rate_limit: at most so many of its jobs start per window, across every
            runner: ``"100/m"`` (also ``/s``, ``/h``, ``/d``, ``"10/30s"``), ``(count,
            timedelta)``, or a timedelta (one per interval). See :doc:`/flow-control`.
        :param rate_key: count the rate limit per key: the name of a parameter (its
            value, however the job passes it), or a callable over the job's arguments
            returning the key.
        :param concurrency_key: count the concurrency limit per key, likewise.
        :param transactional: run each attempt in a MongoDB transaction that also
            writes the job's outcome, fenced on its lease: the task's writes made with
            ``current_job().session`` commit if and only if the job completes (see
            :doc:`/transactions`). Its timeout defaults to 60 seconds, MongoDB's own
            limit on a transaction's life.
        :param aging: seconds (or a timedelta) of waiting that raise a job's priority
            by one level, so that a stream of urgent work never starves the rest
            (default: the app's ``aging``, else none). See :doc:`/flow-control`.
        :param fair_key: share claims fairly among the keys of its jobs (a tenant, an
            account): the name of a parameter or a callable, as ``rate_key``. Keys with
            due work take turns, in proportion to ``fair_weights`` (a mapping of key to
            weight; a key not in it weighs 1).
        :param capture_logs: keep the log records its jobs make while they run, with
            the job (:attr:`Job.logs <mongosched.Job.logs>`, written with the outcome):
            True (default: INFO and up), False (none), or the lowest level to keep (as
            ``logging.DEBUG``). See :mod:`mongosched.observe.logs`.

        Any other option is refused with a :class:`~mongosched.errors.ConfigurationError`
        that lists the known ones.
        """
        checked = task_options(options)

        def register(function: Callable[..., Any]) -> Task[Any, Any]:
            if not callable(function):
                raise ConfigurationError(f"@app.task needs a function, not {function!r}")
            given = checked
            repeating = any(checked.get(k) is not None for k in ("repeat", "cron", "every"))
            if self.aging is not None and "aging" not in checked and not repeating:
                given = TaskOptions(**checked, aging=self.aging)  # the app's default
            task: Task[Any, Any] = Task(self, function, **given)
            if task.name.startswith(SCRIPT_PREFIX) and not in_process(self.uri):
                log.warning("%s", script_task_warning(task.name))
            existing = self.tasks.get(task.name)
            if existing is not None and existing.fn is not function:
                same_code = getattr(existing.fn, "__code__", None) is getattr(
                    function, "__code__", 0
                )
                if not same_code:
                    raise ConfigurationError(
                        f"task {task.name!r} is already registered (by {existing.fn!r}); "
                        "give one of them another name=..."
                    )
            self.tasks[task.name] = task
            return task

        if fn is not None:
            if options:
                raise ConfigurationError("use @app.task or @app.task(...), not both")
            return register(fn)
        return register

    def get_task(self, name: str) -> Task[Any, Any]:
        """The registered task called ``name``; raises :class:`TaskNotRegistered`."""
        try:
            return self.tasks[name]
        except (KeyError, TypeError):
            known = ", ".join(sorted(self.tasks)) or "none"
            raise TaskNotRegistered(
                f"no task named {name!r} is registered (registered: {known})"
            ) from None

    # Scheduling -------------------------------------------------------------------------------
    def schedule(self, task: str | Task[Any, Any], *args: Any, **kwargs: Any) -> Job[Any]:
        """Schedule a task by name (or Task), as :meth:`Task.schedule`: every argument
        is payload, bound to the function's parameters (the type checker cannot check
        a call by name; this does, at run time). With options:
        ``app.get_task(name).configure(delay=60).schedule(...)``."""
        target = self.get_task(task) if isinstance(task, str) else task
        return target.schedule(*args, **kwargs)

    schedule_spec = Delegated("_scheduling", SchedulingOperations.schedule_spec)
    schedule_bulk = Delegated("_scheduling", SchedulingOperations.schedule_bulk)
    trigger_schedule = Delegated("_scheduling", SchedulingOperations.trigger_schedule)
    backfill = Delegated("_scheduling", SchedulingOperations.backfill)

    def _created(self, job: Job) -> None:
        self.emit("job:created", job=job)
        self._wake(job.run_at)

    def _wake(self, at: datetime | None = None) -> None:
        """Wake this process's runners (see :meth:`Runner.wake`)."""
        for runner in list(self.runners):
            runner.wake(at)

    # Durable workflows ----------------------------------------------------------------------
    workflow = Delegated("_workflows", Workflows.workflow)
    step = Delegated("_workflows", Workflows.step)
    sleep = Delegated("_workflows", Workflows.sleep)
    wait_for = Delegated("_workflows", Workflows.wait_for)
    gather = Delegated("_workflows", Workflows.gather)
    send = Delegated("_workflows", Workflows.send)
    set_event = Delegated("_workflows", Workflows.set_event)
    get_event = Delegated("_workflows", Workflows.get_event)
    steps = Delegated("_workflows", Workflows.steps)
    is_workflow = Delegated("_workflows", Workflows.is_workflow)
    cancel_workflow = Delegated("_workflows", Workflows.cancel_workflow)
    retry_workflow = Delegated("_workflows", Workflows.retry_workflow)
    fork_workflow = Delegated("_workflows", Workflows.fork_workflow)

    # Transactions ---------------------------------------------------------------------------
    transaction = Delegated("_transactions", Transactions.transaction)
    joined = Delegated("_transactions", Transactions.joined)
    add_transaction_integration = Delegated(
        "_transactions", Transactions.add_transaction_integration
    )

    def with_transaction(
        self, callback: Callable[[Transaction], T], *, timeout: float = RETRY_TIME
    ) -> T:
        """Run ``callback(tx)`` in a new transaction (:meth:`transaction`) and commit;
        after a transient error (a write conflict, a lost connection, yours or
        mongosched's) run it all again, for up to ``timeout`` seconds, as pymongo's
        ``ClientSession.with_transaction`` does. Returns what ``callback`` returned."""
        return self._transactions.run(callback, timeout)

    # What users do with stored jobs, schedules and pauses: methods of the objects this
    # app holds (mongosched/operations/), with their signatures and docstrings.
    get_job = Delegated("_jobs", JobOperations.get_job)
    get_jobs = Delegated("_jobs", JobOperations.get_jobs)
    count_jobs = Delegated("_jobs", JobOperations.count_jobs)
    cancel = Delegated("_jobs", JobOperations.cancel)
    update_job = Delegated("_jobs", JobOperations.update_job)
    retry_job = Delegated("_jobs", JobOperations.retry_job)
    delete_job = Delegated("_jobs", JobOperations.delete_job)
    purge = Delegated("_jobs", JobOperations.purge)
    stats = Delegated("_jobs", JobOperations.stats)
    retry_jobs = Delegated("_bulk", BulkOperations.retry_jobs)
    cancel_jobs = Delegated("_bulk", BulkOperations.cancel_jobs)
    purge_jobs = Delegated("_bulk", BulkOperations.purge_jobs)
    throughput = Delegated("_bulk", BulkOperations.throughput)
    pause = Delegated("_admin", AdminOperations.pause)
    resume = Delegated("_admin", AdminOperations.resume)
    pauses = Delegated("_admin", AdminOperations.pauses)
    schedules = Delegated("_admin", AdminOperations.schedules)
    ensure_schedules = Delegated("_admin", AdminOperations.ensure_schedules)
    update_schedule = Delegated("_admin", AdminOperations.update_schedule)
    live_runners = Delegated("_admin", AdminOperations.live_runners)

    # Events ---------------------------------------------------------------------------------------
    def on(self, event: str, listener: Listener | None = None) -> Any:
        """Call ``listener(event)`` on each ``event`` (see :data:`~mongosched.EVENTS`);
        also usable as a decorator, ``@app.on("job:fail")``. Listeners run synchronously
        in the thread that made the event; whatever one raises is logged and ignored."""
        if listener is None:
            return lambda fn: self._listeners.add(event, fn)
        return self._listeners.add(event, listener)

    def off(self, event: str, listener: Listener) -> None:
        """Remove a listener added with :meth:`on`."""
        self._listeners.remove(event, listener)

    def emit(self, name: str, **fields: Any) -> None:
        """Send an event to its listeners (the runner and the app do)."""
        self._listeners.emit(name, **fields)

    # Runners --------------------------------------------------------------------------------------
    def runner(
        self, *, workers: int = 4, queues: Sequence[str] | None = None, **options: Any
    ) -> Runner:
        """A :class:`~mongosched.runner.runner.Runner` for this app (not started)."""
        return Runner(
            self._host,
            workers=workers,
            queues=queues if queues is not None else self.queues,
            **options,
        )

    def run_worker(
        self, *, workers: int = 4, queues: Sequence[str] | None = None, **options: Any
    ) -> None:
        """Run a runner in this thread until SIGINT or SIGTERM (then stop gracefully;
        a second signal stops at once)."""
        self.runner(workers=workers, queues=queues, **options).run_forever()

    def start_runner(
        self, *, workers: int = 4, queues: Sequence[str] | None = None, **options: Any
    ) -> Runner:
        """Start one runner in background daemon threads of this process, once; for
        running inside a web server process. Cheap once it runs, so a framework may call
        it on every request. A process forked while it runs (a pre-forking server's
        worker) starts its own at the fork, with the same options; the parent keeps its
        own (so start it in the workers, not in a server's master: see
        :doc:`/deployment`)."""
        return self._in_process.start(workers=workers, queues=queues, **options)

    @property
    def in_process_runner(self) -> Runner | None:
        """The runner :meth:`start_runner` started in this process, while it runs."""
        return self._in_process.runner

    def stop_runner(self, *, graceful: bool = True, timeout: float | None = 30.0) -> bool:
        """Stop the runner :meth:`start_runner` started (see :meth:`Runner.stop`); a
        later :meth:`start_runner` starts a new one. True when no job is left in flight."""
        return self._in_process.stop(graceful=graceful, timeout=timeout)

    def __repr__(self) -> str:
        return f"<App {self.store!r} tasks={len(self.tasks)}>"


def runner_host(app: App) -> RunnerHost:
    """``app`` as its runners see it (what :meth:`App.runner` gives the runners it
    makes): for a runner made otherwise, as :func:`mongosched.testing.drain` makes one."""
    return app._host


def reconfigure(app: App, source: App) -> None:
    """Give ``app`` the store and options of ``source`` (``uri``, ``lease_duration``,
    ``poll_interval``, ``clock``, ``queues``, retention, ``eager``, ``wake``, its
    transaction integrations), keeping ``app``'s tasks and listeners: for integrations
    whose settings change while tasks registered at import stay bound to ``app``
    (Django's ``override_settings`` in tests). The in-process runner, if running,
    stops and starts again on the new store; other runners keep the store and options
    they started with. The previous store is closed unless one of them uses it.
    ``source`` is not to be used afterwards."""
    restart = app.in_process_runner is not None
    if restart:
        app.stop_runner(graceful=False, timeout=5.0)
    with app._lock:
        previous = app.store
        app.store, app.uri = source.store, source.uri
        app.lease_duration, app.poll_interval = source.lease_duration, source.poll_interval
        app._clock, app.queues = source._clock, source.queues
        app.retention, app.eager = source.retention, source.eager
        app._keep_audit = source._keep_audit
        app.wake = source.wake
        app._prepared, app._prepare_error = source._prepared, None
        app._compose(source._transactions.integrations)
    if previous is not app.store and all(r.store is not previous for r in app.runners):
        previous.close()
    if restart:
        app.start_runner(**app._in_process.options)


def _keep(value: Any, name: str) -> timedelta | None:
    seconds = validate.seconds(value, what=f"App: {name}", allow_none=True)
    return None if seconds is None else timedelta(seconds=seconds)
