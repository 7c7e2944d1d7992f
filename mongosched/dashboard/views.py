"""The pieces the dashboard's pages share (reads only): links, a count linking to the
jobs it counts, a runner's anchor, panels, pause buttons, the notice an action's
redirect shows, a count read from the query, a job's run time. The pages are in
:mod:`.overview`, :mod:`.job_list`, :mod:`.job_detail` and :mod:`.fleet`.

Each page takes the :class:`~.data.Operations`, the page :class:`~.render.Context` and
returns the HTML of the page; links to actions go to their confirmation pages
(:mod:`.actions`), so no page writes.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any
from urllib.parse import quote

from mongosched._core.records import JobStatus
from mongosched._core.validate import MAX_COUNT
from mongosched.dashboard.http import whole_number
from mongosched.dashboard.render import Context, Markup, fmt
from mongosched.job import Job

__all__ = [
    "boxed",
    "jobs_link",
    "link",
    "notice",
    "number",
    "pause_link",
    "read_count",
    "run_time",
    "runner_anchor",
]

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


def number(n: int) -> str:
    """``n`` with thousands separators."""
    return f"{n:,}"


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


def read_count(
    ctx: Context, name: str, *, default: int, minimum: int = 1, maximum: int = MAX_COUNT
) -> int:
    """A count from the query (``name``; ``default`` when not given), in ASCII digits
    and within its bounds, else the page answers 400 saying so (see
    :func:`~mongosched.dashboard.http.whole_number`)."""
    text = ctx.request.arg(name)
    if not text:
        return default
    return whole_number(text, name, minimum=minimum, maximum=maximum)


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
