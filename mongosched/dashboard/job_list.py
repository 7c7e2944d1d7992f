"""The dashboard's jobs list (reads only): the filter form, a page of jobs in a stable
order through the index, and the pager.
"""

from __future__ import annotations

import json
from typing import Any

from mongosched._core.records import SORTABLE, JobStatus
from mongosched.dashboard.data import Filters, Operations, bulk_label
from mongosched.dashboard.render import Context, Markup, ago, badge, duration, fmt, join, table
from mongosched.dashboard.views import boxed, link, number, read_count, run_time
from mongosched.errors import ConfigurationError, OutOfBounds
from mongosched.job import Job

__all__ = ["PER_PAGE", "jobs_page"]

PER_PAGE = 50

MAX_PAGE = 1_000_000
"""The last page the jobs list shows (fifty million jobs in)."""

SORT_LABELS = {
    "updated_at": "Updated",
    "created_at": "Created",
    "run_at": "Due",
    "finished_at": "Finished",
    "priority": "Priority",
}


def read_sort(ctx: Context) -> tuple[str, int]:
    value = ctx.request.arg("sort", "-updated_at")
    direction = -1 if value.startswith("-") else 1
    name = value.lstrip("-")
    return (name, direction) if name in SORTABLE else ("updated_at", -1)


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
        number(total),
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
