"""What the dashboard reads and changes, through the public API of :class:`~mongosched.App`.

The operations API (bulk operations by filter, pauses, live workers, throughput,
metrics) is used where the app offers it and its part of the dashboard is left out
where it does not; nothing here reaches into the store.
"""

from __future__ import annotations

import importlib
import inspect
import logging
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from ..errors import InvalidJobId, JobNotFound
from ..job import Job
from ..records import SORTABLE, JobStatus

if TYPE_CHECKING:
    from ..app import App

__all__ = [
    "BULK_ACTIONS",
    "DUE_SCAN_LIMIT",
    "Bucket",
    "Filters",
    "Operations",
    "Overview",
    "PauseView",
    "Row",
    "WorkerView",
]

log = logging.getLogger("mongosched")

BULK_ACTIONS = {"retry": "retry_jobs", "cancel": "cancel_jobs", "purge": "purge_jobs"}
"""Bulk action → the App method that carries it out."""
DUE_SCAN_LIMIT = 500
"""Without a per-queue summary from the app, due jobs are counted up to this many a
task (shown as "500+")."""
PAUSE_KINDS = ("queue", "task", "schedule")


@dataclass(frozen=True)
class Filters:
    """The jobs page's filter, also the scope of a bulk action."""

    task: str | None = None
    queue: str | None = None
    statuses: tuple[str, ...] = ()
    error_type: str | None = None

    @classmethod
    def read(cls, get: Callable[[str], str], get_all: Callable[[str], list[str]]) -> Filters:
        """From a query or a form: unknown statuses are dropped (a page never fails on
        a stale link)."""
        known = {s.value for s in JobStatus}
        statuses = tuple(dict.fromkeys(s.lower() for s in get_all("status") if s.lower() in known))
        return cls(
            task=get("task") or None,
            queue=get("queue") or None,
            statuses=statuses,
            error_type=get("error") or None,
        )

    def pairs(self) -> list[tuple[str, str]]:
        """As query parameters (also the hidden fields of a bulk form)."""
        out = [("task", self.task or ""), ("queue", self.queue or "")]
        out += [("status", s) for s in self.statuses]
        out.append(("error", self.error_type or ""))
        return [(k, v) for k, v in out if v]

    @property
    def empty(self) -> bool:
        return not self.pairs()

    def as_kwargs(self) -> dict[str, Any]:
        """The App's keyword filters."""
        out: dict[str, Any] = {}
        if self.task:
            out["task"] = self.task
        if self.queue:
            out["queue"] = self.queue
        if self.statuses:
            out["status"] = list(self.statuses)
        if self.error_type:
            out["error_type"] = self.error_type
        return out


@dataclass
class Row:
    """One line of the overview: a task or a queue."""

    name: str
    pending: int = 0
    due: int = 0
    due_capped: bool = False
    running: int = 0
    failed: int = 0
    completed: int = 0
    cancelled: int = 0
    other: dict[str, int] = field(default_factory=dict)
    oldest_due: datetime | None = None
    paused: bool = False

    def late_seconds(self, now: datetime) -> float | None:
        return (
            None if self.oldest_due is None else max(0.0, (now - self.oldest_due).total_seconds())
        )


@dataclass(frozen=True)
class Bucket:
    start: datetime
    completed: int
    failed: int


@dataclass(frozen=True)
class PauseView:
    kind: str
    name: str
    since: datetime | None


@dataclass(frozen=True)
class WorkerView:
    """A live runner (from the app's registry), or, without one, a lease owner."""

    name: str
    host: str | None = None
    pid: int | None = None
    queues: tuple[str, ...] | None = None
    tasks: int | None = None
    workers: int | None = None
    in_flight: int = 0
    started_at: datetime | None = None
    last_seen: datetime | None = None
    version: str | None = None
    stale: bool = False


@dataclass
class Overview:
    now: datetime
    totals: dict[str, int]
    tasks: list[Row]
    queues: list[Row]
    oldest_due: dict[str, Any] | None
    unknown_tasks: dict[str, int]
    clock_offset: float | None
    pauses: list[PauseView]


def _attr(obj: Any, name: str, default: Any = None) -> Any:
    if isinstance(obj, dict):
        return obj.get(name, default)
    return getattr(obj, name, default)


class Operations:
    """The dashboard's view of an App: reads for the pages, the actions' writes."""

    def __init__(self, app: App) -> None:
        self.app = app

    # What the app offers ----------------------------------------------------------------
    def supports(self, name: str) -> bool:
        """Whether the app has the operation ``name`` (e.g. ``retry_jobs``)."""
        return callable(getattr(self.app, name, None))

    def filter_names(self) -> set[str]:
        """The keyword filters ``get_jobs`` takes (``error_type`` came later)."""
        try:
            return set(inspect.signature(self.app.get_jobs).parameters)
        except (TypeError, ValueError):  # pragma: no cover - a builtin
            return {"task", "status", "queue"}

    @property
    def can_pause(self) -> bool:
        return self.supports("pause") and self.supports("resume")

    def bulk_actions(self) -> list[str]:
        return [action for action, method in BULK_ACTIONS.items() if self.supports(method)]

    def job_purge_method(self) -> Callable[[Any], Any] | None:
        for name in ("purge_job", "delete_job"):
            method = getattr(self.app, name, None)
            if callable(method):
                return method  # type: ignore[no-any-return]
        return None

    # Jobs -------------------------------------------------------------------------------
    def _filters(self, filters: Filters) -> dict[str, Any]:
        kwargs = filters.as_kwargs()
        if "error_type" in kwargs and "error_type" not in self.filter_names():
            raise LookupError("filtering by error type needs a newer mongosched")
        return kwargs

    def jobs(
        self, filters: Filters, sort: tuple[str, int], page: int, per_page: int
    ) -> tuple[list[Job], int]:
        """One page of jobs (index-backed) and how many match in all."""
        field_name, direction = sort
        if field_name not in SORTABLE:
            field_name = "updated_at"
        kwargs = self._filters(filters)
        total = self.app.count_jobs(**kwargs)
        jobs = self.app.get_jobs(
            **kwargs, sort=(field_name, direction), limit=per_page, skip=(page - 1) * per_page
        )
        return jobs, total

    def job(self, job_id: str) -> Job | None:
        try:
            return self.app.get_job(job_id)
        except (InvalidJobId, JobNotFound):
            return None

    # Overview ---------------------------------------------------------------------------
    def overview(self) -> Overview:
        stats = self.app.stats()
        now: datetime = stats["now"]
        pauses = self.pauses()
        paused = {(p.kind, p.name) for p in pauses}
        tasks: dict[str, Row] = {}
        for name, counts in stats["by_task"].items():
            tasks[name] = _row(name, counts)
        for name in self.app.tasks:
            tasks.setdefault(name, Row(name))
        for row in tasks.values():
            self._due(row, now, task=row.name)
            row.paused = ("task", row.name) in paused
        queues = self._queues(now, set(tasks), paused)
        return Overview(
            now=now,
            totals=stats["totals"],
            tasks=sorted(tasks.values(), key=lambda r: r.name),
            queues=queues,
            oldest_due=stats.get("oldest_due"),
            unknown_tasks=stats.get("unknown_tasks") or {},
            clock_offset=stats.get("clock_offset"),
            pauses=pauses,
        )

    def _due(self, row: Row, now: datetime, **where: Any) -> None:
        """Due pending jobs of a task or queue, and the oldest one's due time (read
        through the status index, sorted by due time, up to :data:`DUE_SCAN_LIMIT`)."""
        if not row.pending:
            return
        jobs = self.app.get_jobs(
            **where, status="pending", sort=("run_at", 1), limit=DUE_SCAN_LIMIT
        )
        due = [job for job in jobs if job.run_at <= now]
        row.due = len(due)
        row.due_capped = len(due) == DUE_SCAN_LIMIT
        row.oldest_due = due[0].run_at if due else None

    def known_queues(self, extra: Iterable[str] = ()) -> list[str]:
        """Queues named by the app's tasks, its runners' queues, the live workers'
        queues and the pauses."""
        names = {task.queue for task in self.app.tasks.values()}
        names.update(self.app.queues or ())
        for worker in self.workers() if self.supports("workers") else []:
            names.update(worker.queues or ())
        names.update(p.name for p in self.pauses() if p.kind == "queue")
        names.update(extra)
        return sorted(names)

    def _queues(self, now: datetime, tasks: set[str], paused: set[tuple[str, str]]) -> list[Row]:
        summary = getattr(self.app, "queue_stats", None)
        if callable(summary):  # an app that summarises queues itself
            rows = []
            for name, counts in summary().items():
                row = _row(name, counts)
                row.paused = ("queue", name) in paused
                rows.append(row)
            return sorted(rows, key=lambda r: r.name)
        rows = []
        for name in self.known_queues():
            counts = {
                status.value: self.app.count_jobs(queue=name, status=status.value)
                for status in (JobStatus.PENDING, JobStatus.RUNNING, JobStatus.FAILED)
            }
            row = _row(name, counts)
            self._due(row, now, queue=name)
            row.paused = ("queue", name) in paused
            rows.append(row)
        return rows

    def task_names(self) -> list[str]:
        """Every task with stored jobs or registered here (for the filter's choices)."""
        names = set(self.app.tasks)
        names.update(task for task, _ in self.app.store.counts())
        return sorted(names)

    def throughput(self, now: datetime, span: timedelta, bucket: timedelta) -> list[Bucket]:
        """Completed and failed jobs per ``bucket`` over the last ``span``."""
        since = now - span
        method = getattr(self.app, "throughput", None)
        if callable(method):
            rows = method(since=since, bucket=bucket)
            return [Bucket(start, int(done), int(failed)) for start, done, failed in rows]
        # Without the app's own count: the most recently finished jobs, bucketed here.
        count = int(span / bucket)
        buckets = [[0, 0] for _ in range(count)]
        finished = self.app.get_jobs(
            status=["completed", "failed"], sort=("finished_at", -1), limit=5000
        )
        for job in finished:
            at = job.finished_at
            if at is None or at < since:
                continue
            index = min(count - 1, int((at - since) / bucket))
            buckets[index][0 if job.status is JobStatus.COMPLETED else 1] += 1
        return [Bucket(since + i * bucket, c, f) for i, (c, f) in enumerate(buckets)]

    # Schedules, pauses, workers --------------------------------------------------------
    def schedules(self) -> list[dict[str, Any]]:
        return self.app.schedules()

    def pauses(self) -> list[PauseView]:
        method = getattr(self.app, "pauses", None)
        if not callable(method):
            return []
        return [
            PauseView(str(_attr(p, "kind")), str(_attr(p, "name")), _attr(p, "since"))
            for p in method()
        ]

    def pause(self, kind: str, name: str, resume: bool = False) -> None:
        if kind not in PAUSE_KINDS:
            raise ValueError(f"cannot pause a {kind!r}")
        method = getattr(self.app, "resume" if resume else "pause")
        method(**{kind: name})

    def workers(self) -> list[WorkerView]:
        """The live runners, or without a registry the owners of running leases."""
        method = getattr(self.app, "workers", None)
        if callable(method):
            out = []
            for w in method():
                queues = _attr(w, "queues")
                out.append(
                    WorkerView(
                        name=str(_attr(w, "name") or _attr(w, "id")),
                        host=_attr(w, "host"),
                        pid=_attr(w, "pid"),
                        queues=None if queues is None else tuple(queues),
                        tasks=_count(_attr(w, "tasks")),
                        workers=_attr(w, "workers"),
                        in_flight=_count(_attr(w, "in_flight")) or 0,
                        started_at=_attr(w, "started_at"),
                        last_seen=_attr(w, "last_seen"),
                        version=_attr(w, "version"),
                        stale=bool(_attr(w, "stale", False)),
                    )
                )
            return out
        owners: dict[str, int] = {}
        for record in self.app.store.running():
            if record.lease is not None:
                owners[record.lease.owner] = owners.get(record.lease.owner, 0) + 1
        return [WorkerView(name=owner, in_flight=n) for owner, n in sorted(owners.items())]

    @property
    def live_registry(self) -> bool:
        return self.supports("workers")

    # Actions ------------------------------------------------------------------------------
    def bulk(self, action: str, filters: Filters, *, dry_run: bool) -> int:
        method = getattr(self.app, BULK_ACTIONS[action])
        return int(method(**self._filters(filters), dry_run=dry_run))

    def metrics(self) -> str | None:
        """The Prometheus exposition, or None where :mod:`mongosched.metrics` is not
        there."""
        try:
            module = importlib.import_module("mongosched.metrics")
        except ImportError:
            return None
        text: str = module.render(self.app)
        return text


def _row(name: str, counts: dict[str, int]) -> Row:
    known = {"pending", "running", "failed", "completed", "cancelled"}
    return Row(
        name=name,
        pending=counts.get("pending", 0),
        running=counts.get("running", 0),
        failed=counts.get("failed", 0),
        completed=counts.get("completed", 0),
        cancelled=counts.get("cancelled", 0),
        due=counts.get("due", 0),
        other={k: v for k, v in counts.items() if k not in known and k != "due"},
    )


def _count(value: Any) -> int | None:
    """A number, or the length of a list (``in_flight`` may list the jobs)."""
    if value is None:
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, Sequence) and not isinstance(value, str):
        return len(value)
    return None
