"""What the dashboard reads and changes, through the public API of :class:`~mongosched.App`
(queries, stats, the operations: bulk by filter, pauses, runners, throughput); nothing
here reaches into the database but through the :class:`~mongosched.store.Store`
protocol's reads.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from mongosched._core.records import PAUSE_KINDS, SORTABLE, JobStatus, Pause, RunnerInfo
from mongosched.errors import ConfigurationError, InvalidJobId, JobNotFound
from mongosched.job import Job
from mongosched.observe import metrics

if TYPE_CHECKING:
    from mongosched.app import App

__all__ = [
    "BULK_ACTIONS",
    "BULK_VERBS",
    "DUE_SCAN_LIMIT",
    "Bucket",
    "Filters",
    "Operations",
    "Overview",
    "PAUSE_KINDS",
    "Row",
    "bulk_label",
]

log = logging.getLogger("mongosched")

BULK_ACTIONS = ("retry", "cancel", "purge")
BULK_VERBS = {"retry": "Retry", "cancel": "Cancel", "purge": "Delete"}
"""What a bulk action's button and its confirmation call it (the same words on both)."""


def bulk_label(action: str, n: int) -> str:
    """A bulk action's button: its verb and how many jobs it touches."""
    return f"{BULK_VERBS[action]} {n:,} job{'' if n == 1 else 's'}"


DUE_SCAN_LIMIT = 2000
"""Due jobs are read (oldest first, through the due-time index) up to this many per
overview; beyond it, the counts of due jobs say "at least"."""


LATER_THAN_NOW = timedelta(milliseconds=1)
"""Stored times are whole milliseconds: a job due after ``now`` is due from this on."""


@dataclass(frozen=True)
class Filters:
    """The jobs page's filter, also the scope of a bulk action."""

    task: str | None = None
    queue: str | None = None
    statuses: tuple[str, ...] = ()
    error_type: str | None = None
    label: str | None = None
    """A job's label (a Django task's path): the task box names one too (see
    :meth:`Operations.resolved`)."""

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
            label=get("label") or None,
        )

    def pairs(self) -> list[tuple[str, str]]:
        """As query parameters (also the hidden fields of a bulk form)."""
        out = [("task", self.task or ""), ("label", self.label or ""), ("queue", self.queue or "")]
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
        if self.label:
            out["label"] = self.label
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


@dataclass
class Overview:
    now: datetime
    totals: dict[str, int]
    tasks: list[Row]
    queues: list[Row]
    oldest_due: dict[str, Any] | None
    unknown_tasks: dict[str, int]
    clock_offset: float | None
    pauses: list[Pause]
    due_capped: bool = False
    due_later: int = 0
    """Pending jobs not due yet (their due time after ``now``)."""
    unserved: dict[tuple[str, str], int] = field(default_factory=dict)
    """How many due jobs (of those read) no live runner serves, by ("queue", name)
    where no runner serves their queue, by ("task", name) where the runners of their
    queue do not register their task; paused queues and tasks left out."""


class Operations:
    """The dashboard's view of an App: reads for the pages, the actions' writes."""

    def __init__(self, app: App) -> None:
        self.app = app

    # Jobs -------------------------------------------------------------------------------
    def jobs(
        self, filters: Filters, sort: tuple[str, int], page: int, per_page: int
    ) -> tuple[list[Job], int]:
        """One page of jobs (index-backed) and how many match in all."""
        field_name, direction = sort
        if field_name not in SORTABLE:
            field_name = "updated_at"
        kwargs = filters.as_kwargs()
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

    def resolved(self, filters: Filters, *, stored: list[str], labels: list[str]) -> Filters:
        """``filters`` whose task names a label (a Django task's path, typed in the task
        box or picked from its suggestions) rather than a task: a filter by that label.
        ``stored`` (:meth:`stored_tasks`) and ``labels``: already read for this page."""
        name = filters.task
        if name is None or filters.label is not None or name in self.app.tasks:
            return filters
        if name in stored or name not in labels:
            return filters
        return replace(filters, task=None, label=name)

    def stored_tasks(self) -> list[str]:
        """The tasks of stored jobs, from the store's index."""
        return self.app.store.admin.task_names()

    def labels(self) -> list[str]:
        """The labels of stored jobs (Django tasks' paths), from the store's index."""
        return self.app.store.admin.labels()

    # Overview ---------------------------------------------------------------------------
    def overview(self) -> Overview:
        """Counts per task (stats) and per queue (index-backed counts), and the due
        jobs of each, oldest first (one read through the due-time index)."""
        stats = self.app.stats(running=False)  # (the running jobs have a page of their own)
        now: datetime = stats["now"]
        pauses = self.app.pauses()
        paused = {(p.kind, p.name) for p in pauses}
        tasks: dict[str, Row] = {
            name: _row(name, counts) for name, counts in stats["by_task"].items()
        }
        for name in self.app.tasks:
            tasks.setdefault(name, Row(name))
        queues: dict[str, Row] = {}
        runners = [r for r in self.app.live_runners() if not r.stale]
        for name in self.known_queues(runners=runners, pauses=pauses):
            counts = {
                status.value: self.app.count_jobs(queue=name, status=status)
                for status in (JobStatus.PENDING, JobStatus.RUNNING, JobStatus.FAILED)
            }
            queues[name] = _row(name, counts)
        oldest = self.app.get_jobs(
            status=JobStatus.PENDING, sort=("run_at", 1), limit=DUE_SCAN_LIMIT
        )
        due = [job for job in oldest if job.run_at <= now]
        for job in due:
            name = job.label or job.task  # as stats() counts it
            for row in (
                tasks.setdefault(name, Row(name)),
                queues.setdefault(job.queue, Row(job.queue)),
            ):
                row.due += 1
                if row.oldest_due is None:
                    row.oldest_due = job.run_at
        capped = len(due) == DUE_SCAN_LIMIT
        for kind, rows in (("task", tasks), ("queue", queues)):
            for row in rows.values():
                row.paused = (kind, row.name) in paused
                row.due_capped = capped and row.due > 0
        unserved = _unserved(due, runners, paused)
        # Counted on the due-time index (status, run_at): after now, to the millisecond.
        later = self.app.count_jobs(status=JobStatus.PENDING, due_after=now + LATER_THAN_NOW)
        return Overview(
            now=now,
            totals=stats["totals"],
            tasks=sorted(tasks.values(), key=lambda r: r.name),
            queues=sorted(queues.values(), key=lambda r: r.name),
            oldest_due=stats.get("oldest_due"),
            unknown_tasks=stats.get("unknown_tasks") or {},
            clock_offset=stats.get("clock_offset"),
            pauses=pauses,
            due_capped=capped,
            due_later=later,
            unserved=unserved,
        )

    def known_queues(
        self, *, runners: list[RunnerInfo] | None = None, pauses: list[Pause] | None = None
    ) -> list[str]:
        """Queues named by the app's tasks and runners, holding pending jobs (from the
        claim index), served by a live runner, or paused. ``runners`` and ``pauses``:
        already read for this page (else read here)."""
        names = {task.queue for task in self.app.tasks.values()}
        names.update(self.app.queues or ())
        names.update(self.app.store.admin.pending_queues())
        for runner in self.app.live_runners() if runners is None else runners:
            names.update(runner.queues or ())
        pauses = self.app.pauses() if pauses is None else pauses
        names.update(p.name for p in pauses if p.kind == "queue")
        return sorted(names)

    def task_names(self, *, runners: list[RunnerInfo], stored: list[str]) -> list[str]:
        """The tasks registered here or by a live runner, and those with jobs stored
        (the filter's suggestions). ``runners`` and ``stored`` (:meth:`stored_tasks`):
        already read for this page."""
        names = set(self.app.tasks)
        names.update(stored)
        for runner in runners:
            names.update(runner.tasks)
        return sorted(names)

    def throughput(self, now: datetime, span: timedelta, bucket: timedelta) -> list[Bucket]:
        """Completed and failed jobs per ``bucket`` over the last ``span``, up to and
        including ``now`` (the buckets start a millisecond after ``now - span``, so
        that one finished at ``now`` falls in the last)."""
        rows = self.app.throughput(since=now - span + LATER_THAN_NOW, bucket=bucket)
        return [Bucket(start, done, failed) for start, done, failed in rows]

    # Schedules, pauses, runners --------------------------------------------------------
    def schedules(self) -> list[dict[str, Any]]:
        return self.app.schedules()

    def pauses(self) -> list[Pause]:
        return self.app.pauses()

    def pause(self, kind: str, name: str, resume: bool = False) -> None:
        if kind not in PAUSE_KINDS:
            raise ValueError(f"cannot pause a {kind!r}")
        method = self.app.resume if resume else self.app.pause
        method(**{kind: name})

    def live_runners(self) -> list[RunnerInfo]:
        return self.app.live_runners()

    # Actions ------------------------------------------------------------------------------
    def bulk(self, action: str, filters: Filters, *, dry_run: bool) -> int:
        methods: dict[str, Callable[..., int]] = {
            "retry": self.app.retry_jobs,
            "cancel": self.app.cancel_jobs,
            "purge": self.app.purge_jobs,
        }
        return methods[action](**filters.as_kwargs(), dry_run=dry_run)

    def bulk_counts(self, filters: Filters) -> dict[str, int]:
        """How many jobs each bulk action would touch under ``filters`` (its dry run,
        an index-backed count), for the actions that apply to at least one: an action
        the filter's statuses rule out (cancel on failed jobs) is left out."""
        counts = {}
        for action in BULK_ACTIONS:
            try:
                n = self.bulk(action, filters, dry_run=True)
            except ConfigurationError:
                continue
            if n:
                counts[action] = n
        return counts

    def metrics(self) -> str:
        """The Prometheus text exposition of :mod:`mongosched.observe.metrics`."""
        return metrics.render(self.app)


def _unserved(
    due: list[Job], runners: list[RunnerInfo], paused: set[tuple[str, str]]
) -> dict[tuple[str, str], int]:
    """Due jobs no live runner (of ``runners``) would claim, by queue or by task (see
    :attr:`Overview.unserved`)."""
    verdicts: dict[tuple[str, str], tuple[str, str] | None] = {}
    out: dict[tuple[str, str], int] = {}
    for job in due:
        pair = (job.queue, job.task)
        if pair not in verdicts:
            serving = [r for r in runners if r.queues is None or job.queue in r.queues]
            verdict: tuple[str, str] | None = None
            if ("queue", job.queue) in paused or ("task", job.task) in paused:
                verdict = None
            elif not serving:
                verdict = ("queue", job.queue)
            elif not any(job.task in r.tasks for r in serving):
                verdict = ("task", job.task)
            verdicts[pair] = verdict
        found = verdicts[pair]
        if found is not None:
            out[found] = out.get(found, 0) + 1
    return out


def _row(name: str, counts: dict[str, int]) -> Row:
    known = {"pending", "running", "failed", "completed", "cancelled"}
    return Row(
        name=name,
        pending=counts.get("pending", 0),
        running=counts.get("running", 0),
        failed=counts.get("failed", 0),
        completed=counts.get("completed", 0),
        cancelled=counts.get("cancelled", 0),
        other={k: v for k, v in counts.items() if k not in known},
    )
