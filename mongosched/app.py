"""The :class:`App`: configuration, the task registry, the public API and events."""

from __future__ import annotations

import logging
import os
import threading
import weakref
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from enum import Enum
from typing import TYPE_CHECKING, Any, ParamSpec, TypeVar, overload

from bson import ObjectId
from bson.errors import InvalidId

from . import embedded
from .errors import ConfigurationError, JobNotFound, JobStateError, TaskNotRegistered
from .job import FINAL_STATUSES, Job, JobStatus
from .retry import Retry, to_seconds
from .store import Store, _ms
from .task import (
    SCHEDULE_OPTIONS,
    JobSpec,
    Task,
    check_payload,
    check_priority,
    check_queue,
    check_run_at,
)

if TYPE_CHECKING:
    from .runner import Runner

__all__ = ["App", "Cancellation", "Event", "EVENTS"]

log = logging.getLogger("mongosched")

P = ParamSpec("P")
R = TypeVar("R")

EVENTS = frozenset(
    {
        "job:created",
        "job:start",
        "job:success",
        "job:retry",
        "job:fail",
        "job:cancel",
        "job:lease_lost",
        "runner:start",
        "runner:stop",
    }
)
"""Names accepted by :meth:`App.on`."""


@dataclass(frozen=True)
class Event:
    """What a listener receives.

    ``job`` is the job as of the event (for ``job:*`` events), ``error`` the exception
    (for ``job:retry``, ``job:fail``), ``runner`` the runner involved (if any).
    """

    name: str
    app: App
    job: Job | None = None
    error: BaseException | None = None
    runner: Runner | None = None
    data: Mapping[str, Any] = field(default_factory=dict)


class Cancellation(str, Enum):
    """What :meth:`App.cancel` did."""

    CANCELLED = "cancelled"
    """The job was pending: it is cancelled and will never start."""
    REQUESTED = "requested"
    """The job is running: its context reports cancellation at the next heartbeat, and it
    ends ``cancelled`` when the function returns."""
    ALREADY_FINISHED = "already_finished"
    """The job had already finished: nothing changed."""

    def __str__(self) -> str:
        return self.value


def utcnow() -> datetime:
    return datetime.now(timezone.utc)


SORTABLE = ("updated_at", "created_at", "run_at", "finished_at", "priority")


class App:
    """A mongosched application: where tasks are registered and jobs are stored.

    :param uri: a MongoDB URI naming the database (``mongodb://host/dbname``), or
        ``mongomock://`` for the embedded in-memory stand-in (tests, demos).
    :param database: instead of ``uri``, a :class:`pymongo.database.Database`.
    :param collection: name of the job collection.
    :param lease_duration: seconds a claim stays valid without a heartbeat; a crashed
        worker's jobs run again this long after its last heartbeat.
    :param poll_interval: seconds an idle runner waits between claims.
    :param clock: callable returning the current time as an aware UTC datetime
        (tests inject a fake).
    :param queues: queues the runners serve by default (None: every queue).
    :param keep_completed: how long completed jobs are kept (None: forever).
    :param keep_failed: how long failed and cancelled jobs are kept (None: forever).
    :param write_concern: write concern of every state change (default ``"majority"``,
        so a failover cannot roll back a claim).
    :param eager: run tasks inline at ``schedule()`` (tests; see :mod:`mongosched.testing`).
    """

    def __init__(
        self,
        uri: str | None = None,
        *,
        database: Any = None,
        collection: str = "mongosched_jobs",
        lease_duration: float = 30.0,
        poll_interval: float = 1.0,
        clock: Callable[[], datetime] | None = None,
        queues: Sequence[str] | None = None,
        keep_completed: timedelta | float | None = timedelta(days=7),
        keep_failed: timedelta | float | None = timedelta(days=30),
        write_concern: str | int | None = "majority",
        eager: bool = False,
    ) -> None:
        if (uri is None) == (database is None):
            raise ConfigurationError("App: give exactly one of uri or database")
        if uri is not None and not isinstance(uri, str):
            raise ConfigurationError(f"App: uri must be a str, not {type(uri).__name__}")
        self.uri = uri
        self.collection = collection
        self.lease_duration = _positive(lease_duration, "lease_duration")
        self.poll_interval = _positive(poll_interval, "poll_interval")
        self._clock = clock or utcnow
        self.queues = None if queues is None else [check_queue(q, task="*") for q in queues]
        self.keep_completed = _keep(keep_completed, "keep_completed")
        self.keep_failed = _keep(keep_failed, "keep_failed")
        self.write_concern = write_concern
        self.eager = eager
        self.tasks: dict[str, Task[Any, Any]] = {}
        self._listeners: dict[str, list[Callable[[Event], Any]]] = {}
        self._database = database
        self._client: Any = None
        self._store_obj: Store | None = None
        self._indexes_ready = False
        self._lock = threading.RLock()
        self._runners: weakref.WeakSet[Runner] = weakref.WeakSet()
        self._in_process_runner: Runner | None = None
        self._pid = os.getpid()
        if uri is not None:
            self._check_uri(uri)
        _register_fork_handler(self)

    # Time -------------------------------------------------------------------------
    def now(self) -> datetime:
        """The app clock's current time, aware UTC, in whole milliseconds (as stored)."""
        value = self._clock()
        if value.tzinfo is None or value.utcoffset() is None:
            raise ConfigurationError("App: clock must return a timezone-aware datetime")
        return _ms(value.astimezone(timezone.utc))

    # Connection --------------------------------------------------------------------------
    def _check_uri(self, uri: str) -> None:
        if embedded.parse_embedded_uri(uri) is not None:
            return
        from pymongo.uri_parser import parse_uri

        try:
            parsed = parse_uri(uri)
        except Exception as exc:  # pymongo raises InvalidURI, ConfigurationError, ValueError
            raise ConfigurationError(f"App: invalid MongoDB URI: {exc}") from None
        if not parsed.get("database"):
            raise ConfigurationError(
                "App: the URI names no database; use mongodb://host/dbname or App(database=...)"
            )

    @property
    def database(self) -> Any:
        """The database (connected lazily, and again in a forked child)."""
        with self._lock:
            if self._database is None:
                assert self.uri is not None
                target = embedded.parse_embedded_uri(self.uri)
                if target is not None:
                    self._client = embedded.embedded_client(target[0])
                    self._database = self._client.get_database(target[1])
                else:
                    import pymongo

                    self._client = pymongo.MongoClient(self.uri, tz_aware=True, connect=False)
                    self._database = self._client.get_default_database()
            return self._database

    @property
    def _reader(self) -> Store:
        """The store, for reads: creates no index, so a read-only database user can
        look at jobs (``mongosched jobs list``, ``stats``, ``Job.refresh``)."""
        with self._lock:
            if self._store_obj is None:
                self._store_obj = Store(
                    self.database, collection=self.collection, write_concern=self.write_concern
                )
            return self._store_obj

    @property
    def _store(self) -> Store:
        """The store, for writes: the indexes are created on first use."""
        with self._lock:
            store = self._reader
            if not self._indexes_ready:
                store.ensure_indexes()
                self._indexes_ready = True
            return store

    def ensure_indexes(self) -> None:
        """Create the collection's indexes now (otherwise done on the first write)."""
        self._store.ensure_indexes()

    def close(self) -> None:
        """Stop this app's runners and close its own MongoDB client."""
        for runner in list(self._runners):
            runner.stop(graceful=True)
        with self._lock:
            if self._client is not None:
                self._client.close()
            self._client = None
            if self.uri is not None:
                self._database = None
            self._store_obj = None
            self._indexes_ready = False

    def _after_fork(self) -> None:
        """In a forked child: forget the parent's client and runners (neither survives
        a fork); the next use connects afresh."""
        self._pid = os.getpid()
        self._lock = threading.RLock()
        self._client = None
        if self.uri is not None:
            self._database = None
        self._store_obj = None
        self._indexes_ready = False
        self._runners = weakref.WeakSet()
        self._in_process_runner = None

    # Registry ---------------------------------------------------------------------------------
    @overload
    def task(self, fn: Callable[P, R], /) -> Task[P, R]: ...

    @overload
    def task(
        self,
        *,
        name: str | None = None,
        queue: str = "default",
        priority: int = 5,
        retry: Retry | int | None = None,
        timeout: float | timedelta | None = None,
        concurrency: int | None = None,
        cron: str | None = None,
        every: float | timedelta | None = None,
        timezone: str | None = None,
        misfire: str = "coalesce",
        misfire_grace: float | timedelta | None = None,
        max_catchup: int = 100,
    ) -> Callable[[Callable[P, R]], Task[P, R]]: ...

    def task(  # type: ignore[misc]  # mypy cannot match **options to the keyword overload
        self, fn: Callable[..., Any] | None = None, /, **options: Any
    ) -> Any:
        """Register a function as a task, bare (``@app.task``) or with options.

        :param name: registry name (default ``module.qualname``); jobs store it.
        :param queue: default queue of its jobs.
        :param priority: default priority, 1 (first) to 10 (last).
        :param retry: a :class:`Retry`, an int (that many attempts, no delay) or None
            for the default (3 attempts, exponential backoff with jitter).
        :param timeout: seconds a run may take; then it is cancelled and fails with
            :class:`~mongosched.errors.JobTimeout`, and retries by its policy.
        :param concurrency: at most this many of its jobs run at once, across every
            runner in every process.
        :param cron: run on a cron schedule (5 fields, or 6 with seconds first) in
            ``timezone`` (IANA name, default UTC).
        :param every: run every so many seconds (or a timedelta).
        :param misfire: ``"coalesce"``, ``"skip"`` or ``"all"``: what to do with slots
            missed while no runner was running; ``misfire_grace`` and ``max_catchup``
            bound it (see :doc:`/cron`).
        """

        def register(function: Callable[..., Any]) -> Task[Any, Any]:
            if not callable(function):
                raise ConfigurationError(f"@app.task needs a function, not {function!r}")
            task: Task[Any, Any] = Task(self, function, **options)
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
                raise TypeError("use @app.task or @app.task(...), not both")
            return register(fn)
        return register

    def get_task(self, name: str) -> Task[Any, Any]:
        """The registered task called ``name``; raises :class:`TaskNotRegistered`."""
        try:
            return self.tasks[name]
        except KeyError:
            known = ", ".join(sorted(self.tasks)) or "none"
            raise TaskNotRegistered(
                f"no task named {name!r} is registered (registered: {known})"
            ) from None

    # Scheduling ---------------------------------------------------------------------------------
    def schedule(self, task: str | Task[Any, Any], *args: Any, **kwargs: Any) -> Job:
        """Schedule a task by name (or Task); same arguments as :meth:`Task.schedule`."""
        target = self.get_task(task) if isinstance(task, str) else task
        return target.schedule(*args, **kwargs)

    def _schedule_spec(self, spec: JobSpec) -> Job:
        doc = spec.build(self.now())
        if self.eager:
            from .testing import run_eagerly

            return run_eagerly(self, spec.task, doc)
        stored, created = self._store.insert(doc)
        job = Job(self, stored)
        if created:
            self._created(job)
        return job

    def schedule_bulk(self, specs: Iterable[JobSpec]) -> list[Job]:
        """Schedule many jobs in one round trip (``[task.job(...), ...]``). Returns the
        jobs in order; where a dedupe key was held, the job holding it."""
        now = self.now()
        specs = list(specs)
        for spec in specs:
            if not isinstance(spec, JobSpec):
                raise ConfigurationError(
                    f"schedule_bulk takes task.job(...) specs, not {type(spec).__name__}"
                )
        docs = [spec.build(now) for spec in specs]
        if self.eager:
            from .testing import run_eagerly

            pairs = zip(specs, docs, strict=True)
            return [run_eagerly(self, spec.task, doc) for spec, doc in pairs]
        jobs = []
        for stored, created in self._store.insert_many(docs):
            job = Job(self, stored)
            if created:
                self._created(job)
            jobs.append(job)
        return jobs

    def ensure_schedules(self, *, queues: Sequence[str] | None = None) -> list[str]:
        """Put the repeating schedules declared with ``@app.task(cron=...)`` or
        ``every=...`` in place: each is one document, created once however many
        processes do this at the same time, and updated (next slot recomputed) when its
        rule, queue, priority or attempts changed in code.

        Every runner does this when it starts, for the queues it serves (``queues``;
        None: every queue). Call it from a deploy step to have the schedules before any
        runner starts. Returns the names of the tasks whose schedule was created.
        """
        store = self._store
        now = self.now()
        created = []
        for task in self.tasks.values():
            if task.rule is None or (queues is not None and task.queue not in queues):
                continue
            if store.upsert_schedule(task._schedule_document(now), now):
                log.info("schedule for %s created (%s)", task.name, task.rule)
                created.append(task.name)
        return created

    def _created(self, job: Job) -> None:
        self.emit("job:created", job=job)
        for runner in list(self._runners):
            runner.wake()

    # Queries -------------------------------------------------------------------------------------
    def get_job(self, job_id: Any) -> Job | None:
        """The job with that id (an ObjectId or its hex string), or None."""
        doc = self._reader.get(_job_id(job_id))
        return None if doc is None else Job(self, doc)

    def _require_job(self, job_id: Any) -> Job:
        job = self.get_job(job_id)
        if job is None:
            raise JobNotFound(f"no job with id {job_id}")
        return job

    def get_jobs(
        self,
        *,
        task: str | None = None,
        status: str | JobStatus | Iterable[str | JobStatus] | None = None,
        queue: str | None = None,
        sort: tuple[str, int] = ("updated_at", -1),
        limit: int = 50,
        skip: int = 0,
    ) -> list[Job]:
        """Jobs matching every filter given, sorted (then by id, so pages are stable).

        Filters and sorts use indexes: ``task`` (with ``status``) and ``status`` lead an
        index each, sorted by ``updated_at``.
        """
        field_, direction = sort
        if field_ not in SORTABLE or direction not in (1, -1):
            raise ConfigurationError(
                f"get_jobs: sort must be (field, 1 or -1) with field in {', '.join(SORTABLE)}"
            )
        if not isinstance(limit, int) or limit < 0 or not isinstance(skip, int) or skip < 0:
            raise ConfigurationError("get_jobs: limit and skip must be ints >= 0")
        query = self._job_query(task=task, status=status, queue=queue)
        docs = self._reader.find(
            query, sort=[(field_, direction), ("_id", direction)], skip=skip, limit=limit
        )
        return [Job(self, d) for d in docs]

    def count_jobs(
        self,
        *,
        task: str | None = None,
        status: str | JobStatus | Iterable[str | JobStatus] | None = None,
        queue: str | None = None,
    ) -> int:
        """How many jobs match the filters (as :meth:`get_jobs`)."""
        return self._reader.count(self._job_query(task=task, status=status, queue=queue))

    @staticmethod
    def _job_query(*, task: str | None, status: Any, queue: str | None) -> dict[str, Any]:
        query: dict[str, Any] = {}
        if task is not None:
            query["task"] = task
        if status is not None:
            statuses = _statuses(status)
            query["status"] = statuses[0] if len(statuses) == 1 else {"$in": statuses}
        if queue is not None:
            query["queue"] = queue
        return query

    # Control -------------------------------------------------------------------------------------
    def cancel(self, job_id: Any) -> Cancellation:
        """Cancel a job: a pending one at once; a running one at its next heartbeat
        (it ends ``cancelled`` when its function returns). A finished job is left as
        it is, and the result says so. A repeating job stops for good."""
        job_id = _job_id(job_id)
        now = self.now()
        doc = self._store.cancel_pending(job_id, self._final_update("cancelled", now))
        if doc is not None:
            job = Job(self, doc)
            log.info("job %s (%s) cancelled", job.id, job.task)
            self.emit("job:cancel", job=job)
            return Cancellation.CANCELLED
        doc = self._store.request_cancel(job_id, now)
        if doc is not None:
            log.info("job %s (%s) is running: cancellation requested", doc["_id"], doc["task"])
            return Cancellation.REQUESTED
        job = self._require_job(job_id)
        if job.status is JobStatus.PENDING or job.status is JobStatus.RUNNING:
            return self.cancel(job_id)  # it changed status between our two writes
        log.info("job %s (%s) already %s: nothing to cancel", job.id, job.task, job.status)
        return Cancellation.ALREADY_FINISHED

    def update_job(self, job_id: Any, **changes: Any) -> Job:
        """Change a pending job: ``priority``, ``run_at`` (or ``delay``), ``queue``,
        ``args``, ``kwargs``. Raises :class:`JobStateError` unless it is pending."""
        job_id = _job_id(job_id)
        allowed = {"priority", "run_at", "delay", "queue", "args", "kwargs"}
        unknown = set(changes) - allowed
        if unknown:
            raise ConfigurationError(
                f"update_job: cannot change {', '.join(sorted(unknown))} "
                f"(only {', '.join(sorted(allowed))})"
            )
        current = self._require_job(job_id)
        name = current.task
        now = self.now()
        new: dict[str, Any] = {"updated_at": now}
        if "priority" in changes:
            new["priority"] = check_priority(changes["priority"], task=name)
        if "queue" in changes:
            new["queue"] = check_queue(changes["queue"], task=name)
        if "run_at" in changes and "delay" in changes:
            raise ConfigurationError(f"task {name!r}: give either delay or run_at, not both")
        if "run_at" in changes:
            new["run_at"] = _ms(check_run_at(changes["run_at"], task=name))
        if "delay" in changes:
            delay = to_seconds(changes["delay"], what=f"task {name!r}: delay")
            assert delay is not None
            if delay < 0:
                raise ConfigurationError(f"task {name!r}: delay must be >= 0, not {delay}")
            new["run_at"] = _ms(now + timedelta(seconds=delay))
        if "args" in changes or "kwargs" in changes:
            args = list(changes.get("args", current.args))
            kwargs = dict(changes.get("kwargs", current.kwargs))
            clash = SCHEDULE_OPTIONS & set(kwargs)
            if clash:
                raise ConfigurationError(f"task {name!r}: kwargs may not use {sorted(clash)}")
            check_payload(name, args, kwargs)
            new.update(args=args, kwargs=kwargs)
        doc = self._store.update_where({"_id": job_id, "status": "pending"}, {"$set": new})
        if doc is None:
            status = self._require_job(job_id).status
            raise JobStateError(f"job {job_id} ({name}) is {status}; only pending jobs can change")
        return Job(self, doc)

    def retry_job(self, job_id: Any) -> Job:
        """Run a failed or cancelled job again: back to pending, due now, attempts reset.
        Raises :class:`JobStateError` for any other status, or when its dedupe key is now
        held by another job."""
        from pymongo.errors import DuplicateKeyError

        job = self._require_job(job_id)
        if job.status not in (JobStatus.FAILED, JobStatus.CANCELLED):
            raise JobStateError(
                f"job {job.id} ({job.task}) is {job.status}; only failed or cancelled jobs "
                "can be retried"
            )
        now = self.now()
        new: dict[str, Any] = {"status": "pending", "attempts": 0, "run_at": now, "updated_at": now}
        doc = job.to_dict()
        if doc.get("dedupe_key") is not None:
            new[f"dedupe_{doc.get('dedupe_scope', 'active')}"] = doc["dedupe_key"]
        if doc.get("repeat"):
            new["scheduled_for"] = now
        unset = {k: "" for k in ("finished_at", "expire_at", "cancel_requested", "result")}
        try:
            updated = self._store.update_where(
                {"_id": job.id, "status": job.status.value}, {"$set": new, "$unset": unset}
            )
        except DuplicateKeyError:
            raise JobStateError(
                f"job {job.id} ({job.task}): dedupe key {doc.get('dedupe_key')!r} is held by "
                "another job now"
            ) from None
        if updated is None:
            raise JobStateError(f"job {job.id} ({job.task}) changed status; not retried")
        result = Job(self, updated)
        self._created(result)
        return result

    def purge(
        self,
        *,
        status: str | Iterable[str] = ("completed",),
        older_than: timedelta | float = timedelta(0),
        task: str | None = None,
    ) -> int:
        """Delete finished jobs of the given final statuses that finished more than
        ``older_than`` ago. Returns how many were deleted."""
        statuses = _statuses(status)
        bad = [s for s in statuses if JobStatus(s) not in FINAL_STATUSES]
        if bad:
            raise ConfigurationError(f"purge: only final statuses can be purged, not {bad}")
        age = to_seconds(older_than, what="purge: older_than")
        assert age is not None
        if age < 0:
            raise ConfigurationError("purge: older_than must be >= 0")
        query: dict[str, Any] = {
            "status": {"$in": statuses},
            "finished_at": {"$lte": self.now() - timedelta(seconds=age)},
        }
        if task is not None:
            query["task"] = task
        deleted = self._store.delete_many(query)
        log.info("purged %d %s job(s)", deleted, "/".join(statuses))
        return deleted

    def stats(self) -> dict[str, Any]:
        """Counts by task and status, the oldest due pending job, the running leases,
        due jobs whose task no runner of this app knows, and ``clock_offset``: seconds
        the server's clock is ahead of this app's (None where the server does not say)."""
        now = self.now()
        by_task: dict[str, dict[str, int]] = {}
        totals: dict[str, int] = {s.value: 0 for s in JobStatus}
        for row in self._reader.counts_by_task_status():
            task, status = row["_id"]["task"], row["_id"]["status"]
            by_task.setdefault(task, {})[status] = row["n"]
            totals[status] = totals.get(status, 0) + row["n"]
        oldest = self._reader.find(
            {"status": "pending", "run_at": {"$lte": now}}, sort=[("run_at", 1)], limit=1
        )
        running = self._reader.find(
            {"status": "running"},
            sort=[("lease.until", 1)],
            projection={"task": 1, "lease": 1, "started_at": 1},
            limit=1000,
        )
        offset = self._reader.clock_offset(self.now)
        return {
            "now": now,
            "clock_offset": None if offset is None else offset.total_seconds(),
            "totals": totals,
            "by_task": by_task,
            "oldest_due": None
            if not oldest
            else {
                "id": oldest[0]["_id"],
                "task": oldest[0]["task"],
                "run_at": oldest[0]["run_at"],
                "late_seconds": (now - oldest[0]["run_at"]).total_seconds(),
            },
            "running": [
                {
                    "id": d["_id"],
                    "task": d["task"],
                    "owner": (d.get("lease") or {}).get("owner"),
                    "lease_until": (d.get("lease") or {}).get("until"),
                    "expired": bool(d.get("lease") and d["lease"]["until"] < now),
                }
                for d in running
            ],
            "unknown_tasks": {
                r["_id"]: r["n"] for r in self._reader.unknown_due_tasks(self.tasks, now)
            },
        }

    def schedules(self) -> list[dict[str, Any]]:
        """Every repeating job: task, rule, timezone, status, next run, last run."""
        docs = self._reader.find({"repeat": {"$exists": True}}, sort=[("task", 1)], limit=0)
        rows = []
        for doc in docs:
            repeat = doc.get("repeat") or {}
            last = doc.get("last_run") or {}
            rows.append(
                {
                    "id": doc["_id"],
                    "task": doc["task"],
                    "rule": repeat.get("cron") or f"every {repeat.get('every')}s",
                    "timezone": repeat.get("timezone"),
                    "status": doc["status"],
                    "next_run": doc.get("run_at") if doc["status"] == "pending" else None,
                    "last_run": last.get("finished_at"),
                    "last_status": last.get("status"),
                    "last_error": last.get("error"),
                }
            )
        return rows

    # Outcome documents (shared by the runner, the reaper and cancel) -----------------------------
    def _expire_at(self, status: str, now: datetime) -> datetime | None:
        keep = self.keep_completed if status == "completed" else self.keep_failed
        return None if keep is None else _ms(now + keep)

    def _final_update(self, status: str, now: datetime, **fields: Any) -> dict[str, Any]:
        """Update that ends a job in a final status and frees its dedupe key."""
        update: dict[str, Any] = {
            "$set": {
                "status": status,
                "lease": None,
                "finished_at": now,
                "updated_at": now,
                **fields,
            },
            "$unset": {"dedupe_active": "", "dedupe_pending": ""},
        }
        expire_at = self._expire_at(status, now)
        if expire_at is not None:
            update["$set"]["expire_at"] = expire_at
        return update

    # Events --------------------------------------------------------------------------------------
    def on(self, event: str, listener: Callable[[Event], Any] | None = None) -> Any:
        """Call ``listener(event)`` on each ``event`` (see :data:`EVENTS`); also usable as
        a decorator, ``@app.on("job:fail")``. Listeners run synchronously in the thread
        that made the event; an exception in one is logged and otherwise ignored."""
        if event not in EVENTS:
            raise ConfigurationError(f"unknown event {event!r}; known: {', '.join(sorted(EVENTS))}")

        def add(fn: Callable[[Event], Any]) -> Callable[[Event], Any]:
            self._listeners.setdefault(event, []).append(fn)
            return fn

        return add if listener is None else add(listener)

    def off(self, event: str, listener: Callable[[Event], Any]) -> None:
        """Remove a listener added with :meth:`on`."""
        try:
            self._listeners.get(event, []).remove(listener)
        except ValueError:
            pass

    def emit(self, name: str, **fields: Any) -> None:
        for listener in list(self._listeners.get(name, ())):
            try:
                listener(Event(name=name, app=self, **fields))
            except Exception:
                log.exception("listener %r for %s raised; ignored", listener, name)

    # Runners -------------------------------------------------------------------------------------
    def runner(
        self, *, workers: int = 4, queues: Sequence[str] | None = None, **options: Any
    ) -> Runner:
        """A :class:`~mongosched.runner.Runner` for this app (not started)."""
        from .runner import Runner

        return Runner(
            self, workers=workers, queues=queues if queues is not None else self.queues, **options
        )

    def run_worker(
        self, *, workers: int = 4, queues: Sequence[str] | None = None, **options: Any
    ) -> None:
        """Run a worker in this thread until SIGINT or SIGTERM (then stop gracefully;
        a second signal stops at once)."""
        self.runner(workers=workers, queues=queues, **options).run_forever()

    def start_runner(
        self, *, workers: int = 4, queues: Sequence[str] | None = None, **options: Any
    ) -> Runner:
        """Start one runner in background daemon threads of this process, once (again
        in a forked child); for running inside a web server process. Cheap once it runs,
        so a framework may call it on every request."""
        running = self.in_process_runner
        if running is not None:
            return running
        with self._lock:
            runner = self._in_process_runner
            if runner is None or not runner.is_running:
                runner = self.runner(workers=workers, queues=queues, **options)
                runner.start()
                self._in_process_runner = runner
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
        where = self.uri if self.uri is not None else repr(self._database)
        return f"<App {where} tasks={len(self.tasks)}>"


def _positive(value: Any, name: str) -> float:
    seconds = to_seconds(value, what=f"App: {name}")
    assert seconds is not None
    if seconds <= 0:
        raise ConfigurationError(f"App: {name} must be > 0, not {seconds}")
    return seconds


def _keep(value: Any, name: str) -> timedelta | None:
    seconds = to_seconds(value, what=f"App: {name}", allow_none=True)
    if seconds is None:
        return None
    if seconds < 0:
        raise ConfigurationError(f"App: {name} must be >= 0")
    return timedelta(seconds=seconds)


def _job_id(job_id: Any) -> Any:
    if isinstance(job_id, Job):
        return job_id.id
    if isinstance(job_id, str) and len(job_id) == 24:
        try:
            return ObjectId(job_id)
        except InvalidId:
            return job_id
    return job_id


def _statuses(status: Any) -> list[str]:
    items = [status] if isinstance(status, (str, JobStatus)) else list(status)
    out = []
    for item in items:
        try:
            out.append(JobStatus(item).value)
        except ValueError:
            raise ConfigurationError(
                f"unknown status {item!r}; known: {', '.join(s.value for s in JobStatus)}"
            ) from None
    return out


_apps: weakref.WeakSet[App] = weakref.WeakSet()


def _register_fork_handler(app: App) -> None:
    _apps.add(app)


def _reset_after_fork() -> None:
    for app in list(_apps):
        app._after_fork()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_reset_after_fork)
