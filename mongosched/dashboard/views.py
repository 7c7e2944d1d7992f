"""The dashboard's pages (reads only): the overview and the jobs list, and the pieces
the other pages share (links, pause buttons, panels). A job's page is in
:mod:`.job_detail`; the schedules, runners and audit pages in :mod:`.fleet`.

Each view takes the :class:`~.data.Operations`, the page :class:`~.render.Context` and
returns the HTML of the page; links to actions go to their confirmation pages
(:mod:`.actions`), so nothing here writes.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from datetime import timedelta
from typing import Any
from urllib.parse import quote

from mongosched._core import validate
from mongosched._core.records import (
    SORTABLE,
    JobStatus,
)
from mongosched._core.validate import MAX_COUNT
from mongosched.dashboard.chart import throughput_chart
from mongosched.dashboard.data import DUE_SCAN_LIMIT, Filters, Operations, Row, bulk_label
from mongosched.dashboard.render import (
    Context,
    Markup,
    ago,
    badge,
    duration,
    fmt,
    join,
    table,
)
from mongosched.errors import ConfigurationError, OutOfBounds
from mongosched.job import Job

__all__ = [
    "PER_PAGE",
    "boxed",
    "jobs_page",
    "link",
    "notice",
    "overview_page",
    "pause_link",
    "read_count",
    "run_time",
    "runner_anchor",
]

PER_PAGE = 50
MAX_PAGE = 1_000_000
"""The last page the jobs list shows (fifty million jobs in)."""
CARD_LINK = (
    '<a class="card {}" href="{}"><span class="label">{}</span><span class="value">{}</span></a>'
)
CARD = '<div class="card {}"{}><span class="label">{}</span><span class="value">{}</span></div>'
SORT_LABELS = {
    "updated_at": "Updated",
    "created_at": "Created",
    "run_at": "Due",
    "finished_at": "Finished",
    "priority": "Priority",
}
NOTICES = {
    "retried": "Job queued to run again.",
    "cancelled": "Job cancelled.",
    "requested": "Job is running: cancellation requested, it stops at its next heartbeat.",
    "already_finished": "Job had already finished: nothing to cancel.",
    "purged": "Job deleted.",
    "workflow-cancelled": "Workflow cancelled, and the jobs it gathered.",
    "forked": "A new run of the workflow, from the chosen step.",
    "paused": "Paused.",
    "resumed": "Resumed.",
    "bulk-retry": "{n} job(s) queued to run again.",
    "bulk-cancel": "{n} job(s) cancelled.",
    "bulk-purge": "{n} job(s) deleted.",
    "edited": "Schedule changed; its next run is recomputed.",
    "triggered": "Schedule runs once now; its next run did not move.",
    "backfilled": "Backfill started: {n} job(s) run the range's slots.",
    "backfill-empty": "No slot of the schedule lies in that range: nothing to run.",
}
"""What an action's redirect says (by code: no text from the URL reaches the page)."""


def notice(ctx: Context) -> Markup | None:
    code = ctx.request.arg("done")
    if code not in NOTICES:
        return None
    n = read_count(ctx, "n", default=0, minimum=0)
    text = NOTICES[code].format(n=n)
    return fmt('<div class="notice" role="status">{}</div>', text)


def link(ctx: Context, path: str, text: Any, params: Iterable[tuple[str, str]] = ()) -> Markup:
    return fmt('<a href="{}">{}</a>', ctx.url(path, params), text)


def jobs_link(ctx: Context, text: Any, **where: str) -> Markup:
    """A count linking to the jobs it counts (a zero stays plain)."""
    if str(text) in ("0", ""):
        return fmt('<span class="zero">{}</span>', text)
    return link(ctx, "/jobs", text, list(where.items()))


def runner_anchor(name: str) -> str:
    """The id of a runner's row on the runners page (a job's lease holder links to it)."""
    return "runner-" + quote(name, safe="")


def boxed(content: Markup) -> Markup:
    """A table (or what says there is none) in a panel of its own."""
    return fmt('<section class="panel flush">{}</section>', content)


def _number(n: int) -> str:
    return f"{n:,}"


# Overview ---------------------------------------------------------------------------------
WINDOWS = {
    "1h": ("1 h", timedelta(hours=1), timedelta(minutes=2)),
    "24h": ("24 h", timedelta(days=1), timedelta(hours=1)),
    "7d": ("7 d", timedelta(days=7), timedelta(hours=6)),
}
"""The overview's time windows: what the cards and the chart count finished jobs over
(``?window=``), each with its label and the chart's bucket."""
DEFAULT_WINDOW = "24h"


def window_picker(ctx: Context, chosen: str) -> Markup:
    links = join(
        fmt(
            '<a href="{}"{}>{}</a>',
            ctx.url("/", [("window", key)]),
            Markup(' aria-current="page"') if key == chosen else Markup(""),
            label,
        )
        for key, (label, _, _) in WINDOWS.items()
    )
    return fmt('<nav class="window" aria-label="Time window">{}</nav>', links)


def overview_page(ops: Operations, ctx: Context) -> tuple[str, Markup]:
    view = ops.overview()
    now = view.now
    totals = view.totals
    late = None if view.oldest_due is None else view.oldest_due.get("late_seconds")
    due = sum(row.due for row in view.tasks)
    chosen = ctx.request.arg("window", DEFAULT_WINDOW)
    chosen = chosen if chosen in WINDOWS else DEFAULT_WINDOW
    label, span, bucket = WINDOWS[chosen]
    buckets = ops.throughput(now, span, bucket)  # the cards count what the chart draws
    completed = sum(b.completed for b in buckets)
    failed = sum(b.failed for b in buckets)
    cards = [
        ("Due", _number(due), "due" if due else "", ctx.url("/jobs", [("status", "pending")])),
        (
            "Due later",
            _number(view.due_later),
            "",
            ctx.url("/jobs", [("status", "pending"), ("sort", "run_at")]),
        ),
        (
            "Running",
            _number(totals.get("running", 0)),
            "",
            ctx.url("/jobs", [("status", "running")]),
        ),
        (
            f"Failed, {label}",
            _number(failed),
            "bad" if failed else "",
            ctx.url("/jobs", [("status", "failed"), ("sort", "-finished_at")]),
        ),
        (
            f"Completed, {label}",
            _number(completed),
            "",
            ctx.url("/jobs", [("status", "completed"), ("sort", "-finished_at")]),
        ),
        ("Oldest due job late by", duration(late), "bad" if late and late > 60 else "", ""),
    ]
    card_html = join(
        fmt(
            (CARD_LINK if href else CARD),
            css,
            href or Markup(""),
            label,
            value,
        )
        for label, value, css, href in cards
    )
    warnings: list[Markup] = []
    if view.clock_offset is not None and abs(view.clock_offset) > 2:
        warnings.append(
            fmt(
                '<div class="warning">The database clock is {} {} this host\'s.</div>',
                duration(abs(view.clock_offset)),
                "ahead of" if view.clock_offset > 0 else "behind",
            )
        )
    if view.unknown_tasks:
        names = ", ".join(f"{name} ({n})" for name, n in view.unknown_tasks.items())
        warnings.append(
            fmt(
                '<div class="warning">Due jobs of tasks this app does not register: {}.</div>',
                names,
            )
        )
    for (kind, name), n in view.unserved.items():
        warnings.append(
            fmt(
                '<div class="warning">No live runner serves {} {}: {}{} job{} {} due{}.</div>',
                kind,
                jobs_link(ctx, name, **{kind: name, "status": "pending"}),
                _number(n),
                "+" if view.due_capped else "",
                "" if n == 1 else "s",
                "is" if n == 1 else "are",
                " there" if kind == "queue" else "",
            )
        )
    chart = fmt(
        '<section class="panel"><h2>Throughput, last {}</h2>{}</section>',
        label,
        throughput_chart(buckets),
    )
    pauses = Markup("")
    if view.pauses:
        rows = [
            (p.kind, p.name, ago(p.since, now), pause_link(ctx, p.kind, p.name, paused=True))
            for p in view.pauses
        ]
        pauses = fmt(
            '<section class="panel"><h2>Paused</h2>{}</section>',
            table(["Kind", "Name", "Since", ""], rows, empty=""),
        )
    queues = fmt(
        '<section class="panel"><h2>Queues</h2>{}</section>',
        _counts_table(ctx, view.queues, now, "queue"),
    )
    tasks = fmt(
        '<section class="panel"><h2>Tasks</h2>{}</section>',
        _counts_table(ctx, view.tasks, now, "task"),
    )
    body = fmt(
        '{}<div class="cards">{}</div>{}<div class="grid2">{}{}</div>{}{}',
        window_picker(ctx, chosen),
        card_html,
        join(warnings),
        chart,
        queues,
        pauses,
        tasks,
    )
    return "Overview", body


def pause_link(ctx: Context, kind: str, name: str, *, paused: bool = False) -> Markup:
    """A button to pause ``name`` (a ``kind``), or to resume it when ``paused``."""
    return fmt(
        '<a class="button small" href="{}">{}</a>',
        ctx.url(
            "/resume" if paused else "/pause",
            [("kind", kind), ("name", name), ("next", ctx.request.path)],
        ),
        "Resume" if paused else "Pause",
    )


def _counts_table(ctx: Context, rows: list[Row], now: Any, kind: str) -> Markup:
    out = []
    for row in rows:
        due = f"{row.due}+" if row.due_capped else str(row.due)
        late = row.late_seconds(now)
        cells: list[Any] = [
            jobs_link(ctx, row.name, **{kind: row.name}),
            jobs_link(ctx, due, **{kind: row.name, "status": "pending"}),
            jobs_link(ctx, _number(row.running), **{kind: row.name, "status": "running"}),
            jobs_link(ctx, _number(row.failed), **{kind: row.name, "status": "failed"}),
            fmt('<span class="{}">{}</span>', "late" if late and late > 60 else "", duration(late)),
            (badge("paused") + Markup(" ") if row.paused else Markup(""))
            + pause_link(ctx, kind, row.name, paused=row.paused),
        ]
        out.append(cells)
    headers = [kind.capitalize(), "Due", "Running", "Failed", "Late by", ""]
    note = Markup("")
    if any(row.due_capped for row in rows):
        note = fmt(
            '<p class="muted small">The {} jobs due longest were counted: "+" means more.</p>',
            f"{DUE_SCAN_LIMIT:,}",
        )
    return table(headers, out, empty=f"No {kind}s yet.", css="numbers") + note


# Jobs -------------------------------------------------------------------------------------
def read_sort(ctx: Context) -> tuple[str, int]:
    value = ctx.request.arg("sort", "-updated_at")
    direction = -1 if value.startswith("-") else 1
    name = value.lstrip("-")
    return (name, direction) if name in SORTABLE else ("updated_at", -1)


def read_count(
    ctx: Context, name: str, *, default: int, minimum: int = 1, maximum: int = MAX_COUNT
) -> int:
    """A count from the query (``name``): what is not a whole number (a stale or
    hand-made link) reads as ``default``; one beyond its bounds raises
    :class:`~mongosched.errors.OutOfBounds` (the page answers 400, saying so)."""
    text = ctx.request.arg(name)
    if not text:
        return default
    try:
        return validate.parse_whole(text, what=name, minimum=minimum, maximum=maximum)
    except OutOfBounds:
        raise
    except ConfigurationError:
        return default


def read_page(ctx: Context) -> int:
    return read_count(ctx, "page", default=1, maximum=MAX_PAGE)


def filter_form(
    ctx: Context,
    ops: Operations,
    filters: Filters,
    sort: tuple[str, int],
    *,
    stored: list[str],
    labels: list[str],
) -> Markup:
    """The jobs page's filter, its boxes suggesting the names known (``stored``: the
    tasks of stored jobs, and ``labels``, as read for this page)."""
    runners = ops.live_runners()  # read once for both suggestion lists
    names = ops.task_names(runners=runners, stored=stored)
    tasks = join(fmt('<option value="{}">', name) for name in names)
    tasks += join(fmt('<option value="{}" label="label">', name) for name in labels)
    queues = join(fmt('<option value="{}">', name) for name in ops.known_queues(runners=runners))
    statuses = join(
        fmt(
            '<label class="check"><input type="checkbox" name="status" value="{}"{}> {}</label>',
            s.value,
            Markup(" checked") if s.value in filters.statuses else Markup(""),
            s.value,
        )
        for s in JobStatus
    )
    sorts = join(
        fmt(
            '<option value="{}"{}>{}</option>',
            f"{'-' if direction < 0 else ''}{name}",
            Markup(" selected") if (name, direction) == sort else Markup(""),
            f"{SORT_LABELS.get(name, name)} {'↓ newest' if direction < 0 else '↑ oldest'}"
            if name != "priority"
            else f"Priority {'↓ high' if direction < 0 else '↑ low'}",
        )
        for name in SORTABLE
        for direction in (-1, 1)
    )
    return fmt(
        '<form method="get" action="{action}" class="filters" role="search">'
        '<label>Task<input name="task" list="task-names" value="{task}" autocomplete="off"></label>'
        '<datalist id="task-names">{tasks}</datalist>'
        '<label>Queue<input name="queue" list="queue-names" value="{queue}" autocomplete="off">'
        '</label><datalist id="queue-names">{queues}</datalist>'
        '<label>Error type<input name="error" value="{error}" '
        'placeholder="e.g. ValueError"></label>'
        '<label>Sort<select name="sort">{sorts}</select></label>'
        '<fieldset class="statuses"><legend>Status</legend>{statuses}</fieldset>'
        '<div class="buttons"><button type="submit" class="button primary">Filter</button>'
        '<a class="button" href="{action}">Reset</a></div></form>',
        action=ctx.url("/jobs"),
        task=filters.task or filters.label or "",
        queue=filters.queue or "",
        error=filters.error_type or "",
        tasks=tasks,
        queues=queues,
        sorts=sorts,
        statuses=statuses,
    )


def jobs_page(ops: Operations, ctx: Context) -> tuple[str, Markup]:
    stored, labels = ops.stored_tasks(), ops.labels()  # for the filter and its suggestions
    filters = ops.resolved(
        Filters.read(ctx.request.arg, ctx.request.args), stored=stored, labels=labels
    )
    sort = read_sort(ctx)
    page = read_page(ctx)
    form = filter_form(ctx, ops, filters, sort, stored=stored, labels=labels)
    try:
        jobs, total = ops.jobs(filters, sort, page, PER_PAGE)
    except OutOfBounds:
        raise  # the page answers 400
    except ConfigurationError as exc:
        return "Jobs", form + fmt('<div class="warning">{}</div>', str(exc))
    now = ops.app.now()
    rows = [_job_row(ctx, job, now) for job in jobs]
    pages = max(1, -(-total // PER_PAGE))
    sort_param = f"{'-' if sort[1] < 0 else ''}{sort[0]}"
    base = filters.pairs() + ([("sort", sort_param)] if sort_param != "-updated_at" else [])
    bulk = join(
        fmt(
            '<a class="button small" href="{}">{}…</a>',
            ctx.url(f"/bulk/{action}", filters.pairs()),
            bulk_label(action, n),
        )
        for action, n in (ops.bulk_counts(filters) if total else {}).items()
    )
    summary = fmt(
        '<div class="summary"><span>{} job{} match</span><span class="bulk">{}</span></div>',
        _number(total),
        "" if total == 1 else "s",
        bulk,
    )
    listing = table(
        [
            "Job",
            "Task",
            "Queue",
            "Status",
            "Arguments",
            "Attempts",
            "Run time",
            "Due",
            "Updated",
            "Error",
        ],
        rows,
        empty="No jobs match this filter.",
        css="jobs",
    )
    return "Jobs", form + summary + boxed(listing) + _pager(ctx, page, pages, base)


def _job_row(ctx: Context, job: Job, now: Any) -> list[Any]:
    error = job.error
    return [
        fmt(
            '<a class="mono" href="{}" title="Job {}">{}</a>',
            ctx.url(f"/jobs/{job.id}"),
            job.id,
            _short(job.id),
        ),
        _task_cell(ctx, job),
        job.queue,
        badge(job.status),
        _arguments(job),
        f"{job.attempts}/{job.max_attempts}",
        duration(run_time(job, now)),
        ago(job.run_at, now),
        ago(job.updated_at, now),
        fmt(
            '<span class="error" title="{}">{}</span>',
            error.message,
            _cut(f"{error.type}: {error.message}", ERROR_CHARS),
        )
        if error
        else "",
    ]


def _task_cell(ctx: Context, job: Job) -> Any:
    """A job's task, or its label (a Django task's path) over the task that runs it."""
    if job.label is None:
        return job.task
    return fmt(
        '{}<br><span class="muted small cut" title="{}">{}</span>',
        link(ctx, "/jobs", job.label, [("label", job.label)]),
        job.task,
        job.task,
    )


ARGS_CHARS = 80
ERROR_CHARS = 100
"""How much of a job's arguments and error message the jobs list shows (the whole text
is the cell's tooltip, and on the job's page)."""


def _arguments(job: Job) -> Markup:
    """The call's arguments (:attr:`Job.call`: a Django task's own) as text, ``"a", 2,
    key=3``, cut to :data:`ARGS_CHARS`."""
    args, kwargs = job.call
    parts = [_compact(a) for a in args]
    parts += [f"{key}={_compact(value)}" for key, value in kwargs.items()]
    text = ", ".join(parts)
    return fmt('<span class="args" title="{}">{}</span>', text, _cut(text, ARGS_CHARS))


def _compact(value: Any) -> str:
    try:
        return json.dumps(value, default=repr, ensure_ascii=False, separators=(",", ":"))
    except (TypeError, ValueError):
        return repr(value)


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def run_time(job: Job, now: Any) -> float | None:
    """How long the job ran (its last attempt), or has been running."""
    if job.started_at is None:
        return None
    if job.status is JobStatus.RUNNING:
        end = now
    elif job.finished_at is not None and job.finished_at >= job.started_at:
        end = job.finished_at
    else:
        return None
    return float((end - job.started_at).total_seconds())


def _short(job_id: Any) -> str:
    """A job's id as the list shows it: its last 8 characters (the part that differs
    between jobs made close together), the whole id as the tooltip."""
    text = str(job_id)
    return text if len(text) <= 9 else "…" + text[-8:]


def _pager(ctx: Context, page: int, pages: int, base: list[tuple[str, str]]) -> Markup:
    if pages <= 1:
        return Markup("")

    def at(n: int, label: str) -> Markup:
        params = base + ([("page", str(n))] if n > 1 else [])
        return fmt(
            '<a class="button small" href="{}" rel="{}">{}</a>',
            ctx.url("/jobs", params),
            "prev" if n < page else "next",
            label,
        )

    prev = (
        at(page - 1, "← Previous")
        if page > 1
        else Markup('<span class="button small disabled">← Previous</span>')
    )
    nxt = (
        at(page + 1, "Next →")
        if page < pages
        else Markup('<span class="button small disabled">Next →</span>')
    )
    return fmt(
        '<nav class="pager" aria-label="Pages">{}<span>Page {} of {}</span>{}</nav>',
        prev,
        page,
        pages,
        nxt,
    )
