"""The :class:`App`: configuration, the task registry, the public API and events."""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import threading
import time
import weakref
from collections.abc import Callable, Iterable, Sequence
from datetime import datetime, timedelta, timezone
from typing import Any, ParamSpec, TypeVar, overload

from mongosched._core import validate
from mongosched._core.outcome import Retention
from mongosched._core.records import JobRecord, JobStatus
from mongosched.errors import ConfigurationError, StoreError, TaskNotRegistered, TransactionError
from mongosched.events import Listener, Listeners
from mongosched.job import Job
from mongosched.limits import RateSpec
from mongosched.operations.admin import Admin, declaration, schedule_row
from mongosched.operations.bulk import BulkControl
from mongosched.operations.jobs import Cancellation, JobControl
from mongosched.retry import RetryPolicy
from mongosched.runner import dependencies
from mongosched.runner.runner import Runner
from mongosched.runner.wakeup import wake_mode
from mongosched.schedule import Rule
from mongosched.store import Store, in_process, open_store
from mongosched.task import SCRIPT_PREFIX, JobSpec, Task, script_task_warning, task_options
from mongosched.transaction import Transaction, TransactionIntegration, current

__all__ = ["App", "Cancellation"]

log = logging.getLogger("mongosched")

P = ParamSpec("P")
R = TypeVar("R")
T = TypeVar("T")

TRANSACTION_RETRY_TIME = 120.0
"""Seconds :meth:`App.with_transaction` runs a transaction again after transient
errors (pymongo's ``with_transaction`` allows as long)."""


def utcnow() -> datetime:
    return datetime.now(timezone.utc)


class App(JobControl, BulkControl, Admin):
    """A mongosched application: where tasks are registered and jobs are stored.

    :param uri: where jobs are stored: a MongoDB URI naming the database
        (``mongodb://host/dbname``), or ``memory://`` for the in-process store (demos
        and tests; ``memory://name`` shares one store by name within the process).
    :param database: instead of ``uri``, a :class:`pymongo.database.Database`.
    :param collection: name of the job collection.
    :param lease_duration: seconds a claim stays valid without a heartbeat; a crashed
        worker's jobs run again this long after its last heartbeat.
    :param poll_interval: seconds an idle runner waits between claims.
    :param clock: callable returning the current time as an aware datetime (tests
        inject a fake, see :class:`mongosched.testing.FakeClock`).
    :param queues: queues the runners serve by default (None: every queue).
    :param keep_completed: how long completed jobs are kept (None: forever).
    :param keep_failed: how long failed and cancelled jobs are kept (None: forever).
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
        write_concern: str | int | None = "majority",
        connect_timeout: float | timedelta = 5.0,
        eager: bool = False,
        wake: str = "auto",
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
        self._in_process_runner: Runner | None = None
        self._in_process_options: dict[str, Any] = {}
        self._running_at_fork = False
        self._warned_fork = False
        self._eager_runner: Runner | None = None
        self._integrations: list[TransactionIntegration] = []
        _apps.add(self)

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

    def reconfigure(self, source: App) -> None:
        """Take ``source``'s store and options (``uri``, ``lease_duration``,
        ``poll_interval``, ``clock``, ``queues``, retention, ``eager``, ``wake``, its
        transaction integrations) and keep this
        app's tasks and listeners: for integrations whose settings change while tasks
        registered at import stay bound to this app (Django's ``override_settings`` in
        tests). The in-process runner, if running, stops and starts again on the new
        store; other runners keep the store they started with. The previous store is
        closed unless one of them uses it. ``source`` is not to be used afterwards."""
        with self._lock:
            restart = self.in_process_runner is not None
        if restart:
            self.stop_runner(graceful=False, timeout=5.0)
        with self._lock:
            previous = self.store
            self.store, self.uri = source.store, source.uri
            self.lease_duration, self.poll_interval = source.lease_duration, source.poll_interval
            self._clock, self.queues = source._clock, source.queues
            self.retention, self.eager = source.retention, source.eager
            self.wake = source.wake
            self._integrations = source._integrations
            self._prepared, self._prepare_error = source._prepared, None
            self._eager_runner = None
        if previous is not self.store and all(r.store is not previous for r in self.runners):
            previous.close()
        if restart:
            self.start_runner(**self._in_process_options)

    def close(self) -> None:
        """Stop this app's runners and close its connections."""
        for runner in list(self.runners):
            runner.stop(graceful=True)
        self.store.close()
        self._prepared = False

    def _before_fork(self) -> None:
        self._running_at_fork = self.in_process_runner is not None

    def _after_fork_in_parent(self) -> None:
        """A process that forks while its in-process runner runs copies live threads
        into the child (where they are dead) and goes on running jobs itself: right for
        a web worker that forks now and then, wrong for a server's master. Say so, once."""
        forked_running, self._running_at_fork = self._running_at_fork, False
        if forked_running and not self._warned_fork:
            self._warned_fork = True
            log.warning(
                "process %d forked while its in-process runner was running: the child "
                "starts its own, and this one keeps its own. If this is a server's master "
                "that forks its workers (gunicorn --preload, uWSGI without lazy-apps), start "
                "the runner in the workers instead (gunicorn's post_worker_init; see the "
                "deployment docs)",
                os.getpid(),
            )

    def _after_fork(self) -> None:
        """In a forked child: the parent's runners do not survive a fork (their threads
        are not copied). A child whose parent was running an in-process runner starts
        its own, with the same options: a pre-forking server's workers each run one."""
        restart = self._running_at_fork
        self._running_at_fork = False
        self._lock = threading.RLock()
        self.runners = weakref.WeakSet()
        self._in_process_runner = None
        self._eager_runner = None
        if restart:
            try:
                self.start_runner(**self._in_process_options)
            except Exception:  # a fork handler must not raise; say so where operators look
                log.exception("could not start the in-process runner in child %d", os.getpid())

    # Registry -----------------------------------------------------------------------------
    @overload
    def task(self, fn: Callable[P, R], /) -> Task[P, R]: ...

    @overload
    def task(
        self,
        *,
        name: str | None = None,
        queue: str = "default",
        priority: float = 5,
        retry: RetryPolicy | int | None = None,
        timeout: float | timedelta | None = None,
        concurrency: int | None = None,
        repeat: Rule | None = None,
        cron: str | None = None,
        every: float | timedelta | None = None,
        timezone: str | None = None,
        misfire: str = "coalesce",
        misfire_grace: float | timedelta | None = None,
        max_catchup: int = 100,
        rate_limit: RateSpec | None = None,
        rate_key: str | Callable[..., Any] | None = None,
        concurrency_key: str | Callable[..., Any] | None = None,
        transactional: bool = False,
    ) -> Callable[[Callable[P, R]], Task[P, R]]: ...

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

        Any other option is refused with a :class:`~mongosched.errors.ConfigurationError`
        that lists the known ones.
        """
        checked = task_options(options)

        def register(function: Callable[..., Any]) -> Task[Any, Any]:
            if not callable(function):
                raise ConfigurationError(f"@app.task needs a function, not {function!r}")
            task: Task[Any, Any] = Task(self, function, **checked)
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

    def schedule_spec(self, spec: JobSpec) -> Job[Any]:
        """Schedule one job made by ``task.job(...)`` (what :meth:`Task.schedule` does)."""
        return self.schedule_bulk([spec])[0]

    def schedule_bulk(self, specs: Iterable[JobSpec], *, session: Any = None) -> list[Job[Any]]:
        """Schedule many jobs in one round trip: ``[task.job(...),
        task.configure(delay=60).job(...), ...]``. Returns the jobs in order; where a
        dedupe key was held, the job holding it.

        ``session``: a :class:`~mongosched.transaction.Transaction` or a pymongo
        ``ClientSession`` in a transaction (as ``configure(session=...)``): the jobs
        exist if and only if it commits. Without one, inside ``with
        app.transaction()`` or a transactional task, they join that transaction."""
        now = self.now()
        specs = list(specs)
        for spec in specs:
            if not isinstance(spec, JobSpec):
                raise ConfigurationError(
                    f"schedule_bulk takes task.job(...) specs, not {type(spec).__name__}"
                )
        tx = self._transaction_of(specs, session)
        store = self._writable()
        if tx is not None:
            if self.eager and not tx.sees_commit:
                raise TransactionError(
                    "eager mode runs a job when its transaction commits, which a session of "
                    "your own does out of mongosched's sight: use app.transaction()"
                )
            store = store.within(tx.handle)
        records = [dependencies.checked(store, spec.build(now), now) for spec in specs]
        stored = store.insert(records)
        jobs = []
        for record, created in stored:
            if created and record.status is JobStatus.WAITING:
                if tx is not None and tx.handle.deferred:  # stored at the commit
                    tx.on_commit(functools.partial(self._link, record))
                else:
                    record = self._link(record, store)
            job = Job(record, self.store)
            jobs.append(job)
            if not created:
                continue
            if self.eager and record.status is JobStatus.PENDING:
                if tx is None:
                    jobs[-1] = self._run_eagerly(record)
                else:
                    tx.on_commit(functools.partial(self._run_eagerly, record))
            elif tx is None:
                self._created(job)
            else:
                tx.on_commit(functools.partial(self._created, job))
        return jobs

    def _transaction_of(self, specs: Sequence[JobSpec], session: Any) -> Transaction | None:
        """The transaction jobs are scheduled in: ``session`` or the one their options
        name (one for all), else the one this code runs in, if it is this app's."""
        given = [s for s in (session, *(spec.options.session for spec in specs)) if s is not None]
        ambient = current()
        if ambient is not None and ambient.store is not self.store:
            ambient = None
        for integration in self._integrations if ambient is None else ():
            ambient = integration.current()
            if ambient is not None:
                break
        if not given:
            return ambient
        chosen = given[0]
        what = f"task {specs[0].task.name!r}: session" if specs else "session"
        if any(other is not chosen for other in given):
            raise TransactionError(f"{what}: the jobs of one call must share one session")
        if ambient is not None and chosen is ambient.session and chosen is not None:
            chosen = ambient  # the session of the transaction this code runs in
        if isinstance(chosen, Transaction):
            if chosen.store is not self.store:
                raise TransactionError(f"{what}: the transaction is another app's")
            if not chosen.active:
                raise TransactionError(f"{what}: the transaction has ended")
            return chosen
        try:
            return self.joined(chosen)
        except TransactionError as exc:
            raise TransactionError(f"{what}: {exc}") from None

    def joined(
        self, session: Any, *, on_commit: Callable[[Callable[[], Any]], Any] | None = None
    ) -> Transaction:
        """The transaction a caller's pymongo ``session`` is in, for jobs to join
        (what ``configure(session=...)`` does with it). ``on_commit``: how the session's
        owner runs a callback after its commit (Django's ``connection.on_commit``), so
        that the events and wake-ups of the jobs follow it. Raises
        :class:`~mongosched.errors.TransactionError` (see :meth:`Store.join
        <mongosched.store.Store.join>`)."""
        store = self._writable()
        return Transaction(store, store.join(session), owned=False, on_commit=on_commit)

    def add_transaction_integration(self, integration: TransactionIntegration) -> None:
        """Let jobs scheduled without ``session=`` join a framework's own transaction
        (``integration.current()``), and make the framework's writes in a transactional
        task join the task's (``integration.bind``). The Django integration adds one
        for a project whose database is MongoDB."""
        self._integrations.append(integration)

    def bind_transaction(self, transaction: Transaction) -> contextlib.ExitStack:
        """Within the block, the integrations' writes join ``transaction`` (the
        runner does this around a transactional task's function)."""
        stack = contextlib.ExitStack()
        for integration in self._integrations:
            stack.enter_context(integration.bind(transaction))
        return stack

    # Transactions ---------------------------------------------------------------------------
    def transaction(self) -> Transaction:
        """A new transaction, for jobs to exist only if your writes commit::

            with app.transaction() as tx:
                orders.insert_one(order, session=tx.session)
                send_receipt.schedule(order["_id"])  # joins tx

        The block commits when it ends, or aborts when it raises; jobs scheduled in it
        (without ``session=``) join it. On MongoDB it runs in a session of the app's
        client (``tx.session``; give the app your client's database with
        ``App(database=...)`` so that your writes share it); on ``memory://`` the jobs
        are held until the commit and ``tx.session`` is None. A write conflict raises
        :class:`~mongosched.errors.TransactionConflict`; :meth:`with_transaction`
        runs the block again instead. See :doc:`/transactions`."""
        store = self._writable()
        return Transaction(store, store.begin(), owned=True)

    def with_transaction(
        self, callback: Callable[[Transaction], T], *, timeout: float = TRANSACTION_RETRY_TIME
    ) -> T:
        """Run ``callback(tx)`` in a new transaction (:meth:`transaction`) and commit;
        after a transient error (a write conflict, a lost connection, yours or
        mongosched's) run it all again, for up to ``timeout`` seconds, as pymongo's
        ``ClientSession.with_transaction`` does. Returns what ``callback`` returned."""
        deadline = time.monotonic() + validate.seconds(timeout, what="with_transaction: timeout")
        while True:
            tx = self.transaction()
            try:
                with tx:
                    result = callback(tx)
                return result
            except Exception as exc:
                if not tx.handle.retryable(exc) or time.monotonic() >= deadline:
                    raise
                log.info("transaction aborted (%s); running it again", exc)

    def _link(self, record: JobRecord, store: Store | None = None) -> JobRecord:
        """A job stored waiting: resolve the dependencies that ended already (read
        after the insert, so none that ends meanwhile is missed). ``store``: the
        store's view of a transaction the job was stored in."""
        store = store or self.store
        statuses = store.link_dependencies(record.depends_on, self.now(), record.id)
        return dependencies.resolve_new(
            store,
            record,
            statuses,
            now=self.now(),
            retention=self.retention,
            emit=self.emit_record,
        )

    def emit_record(self, event: str, record: JobRecord) -> None:
        """Send ``event`` about a stored job (the flow-control steps do)."""
        self.emit(event, job=Job(record, self.store))

    def _run_eagerly(self, record: JobRecord) -> Job:
        """Run a just-stored job here until it finishes (retries without their delays).
        A repeating job runs once and stays pending for its next slot."""
        self.emit("job:created", job=Job(record, self.store))
        if self._eager_runner is None:
            self._eager_runner = Runner(self, workers=1, name="eager")
        runner = self._eager_runner
        while True:
            claim = runner.claim_next(job_id=record.id)
            if claim is None:
                break
            decision = runner.run_claim(claim)
            if decision is None or decision.event != "job:retry":
                break
        return self._require_job(record.id)

    def ensure_schedules(self, *, queues: Sequence[str] | None = None) -> list[str]:
        """Put the repeating schedules declared with ``@app.task(cron=...)`` or
        ``every=...`` in place: each is one job, created once however many processes do
        this at the same time, and updated (next slot recomputed) when its rule, queue,
        priority or attempts changed in code.

        Every runner does this when it starts, for the queues it serves (``queues``;
        None: every queue). Call it from a deploy step to have the schedules before any
        runner starts. Returns the names of the tasks whose schedule was created.

        A schedule an operator edited (:meth:`update_schedule`) keeps the edit as long
        as the code declares it as it did before the edit; once the declaration in code
        changes, the code wins and the edit is dropped. Both cases are logged.
        """
        store = self._writable()
        now = self.now()
        created = []
        for task in self.tasks.values():
            if task.rule is None or (queues is not None and task.queue not in queues):
                continue
            record = task.schedule_record(now)
            if not self._code_wins(record):
                continue
            if store.upsert_schedule(record, now):
                log.info("schedule for %s created (%s)", task.name, task.rule)
                created.append(task.name)
        return created

    def _code_wins(self, declared: JobRecord) -> bool:
        """Whether a schedule's declaration in code is to be applied (see
        :meth:`ensure_schedules`): not over an operator's edit made since the code last
        changed it."""
        current = self.store.get(declared.id)
        if current is None or current.edit is None:
            return True
        code = declaration(
            declared.repeat, declared.queue, declared.priority, declared.max_attempts
        )
        if code == current.edit.declared:
            log.info(
                "schedule %s keeps the operator's edit of %s (%s, queue %s, priority %s) "
                "over its declaration in code, which has not changed since",
                declared.task,
                current.edit.at,
                *_described(current),
            )
            return False
        log.warning(
            "schedule %s: its declaration in code changed since an operator edited it at %s; "
            "the code's (%s, queue %s, priority %s) replaces the edit",
            declared.task,
            current.edit.at,
            *_described(declared),
        )
        return True

    def _created(self, job: Job) -> None:
        self.emit("job:created", job=job)
        for runner in list(self.runners):
            runner.wake(job.run_at)

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

    def listening(self, name: str) -> bool:
        """Whether event ``name`` has listeners (:meth:`on`)."""
        return self._listeners.listening(name)

    # Runners --------------------------------------------------------------------------------------
    def runner(
        self, *, workers: int = 4, queues: Sequence[str] | None = None, **options: Any
    ) -> Runner:
        """A :class:`~mongosched.runner.runner.Runner` for this app (not started)."""
        return Runner(
            self, workers=workers, queues=queues if queues is not None else self.queues, **options
        )

    def attach(self, runner: Runner) -> None:
        """A runner of this app started (runners call this)."""
        self.runners.add(runner)

    def detach(self, runner: Runner) -> None:
        """A runner of this app stopped (runners call this)."""
        self.runners.discard(runner)

    def run_worker(
        self, *, workers: int = 4, queues: Sequence[str] | None = None, **options: Any
    ) -> None:
        """Run a worker in this thread until SIGINT or SIGTERM (then stop gracefully;
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
        running = self.in_process_runner
        if running is not None:
            return running
        with self._lock:
            runner = self._in_process_runner
            if runner is None or not runner.is_running:
                runner = self.runner(workers=workers, queues=queues, **options)
                runner.start()
                self._in_process_runner = runner
                self._in_process_options = {"workers": workers, "queues": queues, **options}
            return runner

    @property
    def in_process_runner(self) -> Runner | None:
        """The runner :meth:`start_runner` started in this process, while it runs."""
        runner = self._in_process_runner
        return runner if runner is not None and runner.is_running else None

    def stop_runner(self, *, graceful: bool = True, timeout: float | None = 30.0) -> bool:
        """Stop the runner :meth:`start_runner` started (see :meth:`Runner.stop`); a
        later :meth:`start_runner` starts a new one. True when no job is left in flight."""
        with self._lock:
            runner, self._in_process_runner = self._in_process_runner, None
        return True if runner is None else runner.stop(graceful=graceful, timeout=timeout)

    def __repr__(self) -> str:
        return f"<App {self.store!r} tasks={len(self.tasks)}>"


def _described(record: JobRecord) -> tuple[Any, str, float]:
    """A schedule's rule, queue and priority, as the declaration log lines name them."""
    return schedule_row(record, False)["rule"], record.queue, record.priority


def _keep(value: Any, name: str) -> timedelta | None:
    seconds = validate.seconds(value, what=f"App: {name}", allow_none=True)
    return None if seconds is None else timedelta(seconds=seconds)


_apps: weakref.WeakSet[App] = weakref.WeakSet()


def _before_fork() -> None:
    for app in list(_apps):
        app._before_fork()


def _reset_after_fork() -> None:
    for app in list(_apps):
        app._after_fork()


def _after_fork_in_parent() -> None:
    for app in list(_apps):
        app._after_fork_in_parent()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(
        before=_before_fork, after_in_parent=_after_fork_in_parent, after_in_child=_reset_after_fork
    )
