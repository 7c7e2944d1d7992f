"""The dashboard's writes, each behind a confirmation page.

A link (GET) shows what will happen — for a bulk action, how many jobs the filter
matches now (a dry run) — and a form; the form POSTs (with the CSRF token, checked
before any of this runs) and the answer redirects to a page that says what was done.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any
from urllib.parse import quote

from mongosched._core.records import JobStatus
from mongosched.dashboard.data import (
    BULK_ACTIONS,
    BULK_VERBS,
    PAUSE_KINDS,
    Filters,
    Operations,
    bulk_label,
)
from mongosched.dashboard.http import (
    BadInput,
    Request,
    Response,
    query_string,
    redirect,
    whole_number,
)
from mongosched.dashboard.render import Context, Markup, fmt, hidden_fields, join
from mongosched.errors import MongoschedError, OutOfBounds
from mongosched.job import Job

__all__ = ["JOB_ACTIONS", "bulk_action", "done", "job_action", "pause_action", "safe_next"]

JOB_ACTIONS = ("retry", "cancel", "purge", "cancel-workflow", "retry-workflow", "fork")

Page = tuple[str, Markup, int]
"""A page to show: title, body, HTTP status."""


# How a browser reads a URL (the WHATWG URL standard, for http and https): the C0
# controls and spaces around it are stripped, tabs and newlines anywhere removed, a
# backslash in the path is a slash, and what the path and the query may not hold as
# they are is percent-encoded (besides controls, spaces and non-ASCII characters).
C0_OR_SPACE = "".join(map(chr, range(0x21)))
TAB_OR_NEWLINE = str.maketrans("", "", "\t\n\r")
PATH_ENCODED = '"<>`{}'
QUERY_ENCODED = "\"<>'"
DOT_SEGMENTS = frozenset({".", "..", "%2e", ".%2e", "%2e.", "%2e%2e"})
ENCODED_SEPARATOR = re.compile("%(2f|5c)", re.IGNORECASE)


def safe_next(value: str, default: str = "/") -> str:
    """Where to send the browser back to: ``value`` if, read as a browser reads a
    URL, it is a path that stays under the dashboard once its mount point is put in
    front (no scheme, no host, no dot segment to climb out of it, no encoded slash or
    backslash that the server would decode into one), given back as the browser would
    send it (percent-encoded, without a fragment); anything else becomes
    ``default``."""
    text = value.strip(C0_OR_SPACE).translate(TAB_OR_NEWLINE).partition("#")[0]
    path, mark, query = text.partition("?")
    path = path.replace("\\", "/")
    if (
        not path.startswith("/")
        or path.startswith("//")
        or ENCODED_SEPARATOR.search(path)
        or any(segment.lower() in DOT_SEGMENTS for segment in path.split("/"))
    ):
        return default
    return _encoded(path, PATH_ENCODED) + mark + _encoded(query, QUERY_ENCODED)


def _encoded(text: str, special: str) -> str:
    """``text`` with controls, spaces, non-ASCII characters and ``special`` ones
    percent-encoded (as UTF-8; a lone surrogate as a replacement), as a browser
    sends them."""
    return "".join(
        c if " " < c < "\x7f" and c not in special else quote(c, safe="", errors="replace")
        for c in text
    )


def done(ctx: Context, path: str, code: str, n: int | None = None) -> Response:
    """See the page at ``path`` (which may carry a query), saying what was done."""
    params = query_string([("done", code)] + ([("n", str(n))] if n is not None else []))
    return redirect(ctx.url(path) + ("&" + params[1:] if "?" in path else params))


def _confirm(
    ctx: Context,
    title: str,
    text: Markup,
    button: str,
    *,
    back: str,
    fields: list[tuple[str, str]] | None = None,
    danger: bool = False,
    error: str | None = None,
) -> Page:
    problem = fmt('<div class="warning" role="alert">{}</div>', error) if error else Markup("")
    body = fmt(
        '{}<section class="panel confirm"><p>{}</p>'
        '<form method="post" action="{}">{}{}'
        '<button type="submit" class="button {}">{}</button> '
        '<a class="button" href="{}">Go back</a></form></section>',
        problem,
        text,
        ctx.url(ctx.request.path),
        ctx.csrf(),
        hidden_fields(fields or []),
        "danger" if danger else "primary",
        button,
        ctx.url(back),
    )
    return title, body, 409 if error else 200


# One job -----------------------------------------------------------------------------------
def job_action(ops: Operations, ctx: Context, job: Job, action: str) -> Page | Response:
    """Retry, cancel or delete one job: the confirmation (GET) or the deed (POST)."""
    path = f"/jobs/{job.id}"
    describe = fmt('<strong>{}</strong> <span class="mono">{}</span>', job.task, job.id)

    def retry() -> Response:
        ops.app.retry_job(job.id)
        return done(ctx, path, "retried")

    def cancel() -> Response:
        return done(ctx, path, str(ops.app.cancel(job.id)))

    def delete() -> Response:
        ops.app.delete_job(job.id)
        return done(ctx, "/jobs", "purged")

    position = (ctx.request.field if ctx.request.method == "POST" else ctx.request.arg)("from")

    def cancel_workflow() -> Response:
        ops.app.cancel_workflow(job.id)
        return done(ctx, path, "workflow-cancelled")

    def retry_workflow() -> Response:
        ops.app.retry_workflow(job.id)
        return done(ctx, path, "retried")

    def fork() -> Response:
        forked = ops.app.fork_workflow(job.id, whole_number(position, "from", minimum=0))
        return done(ctx, f"/jobs/{forked.id}", "forked")

    steps: dict[str, tuple[str, Markup, str, bool, Callable[[], Response]]] = {
        "cancel-workflow": (
            "Cancel workflow",
            fmt("Cancel workflow {} and the jobs it gathered that have not ended?", describe),
            "Cancel workflow",
            True,
            cancel_workflow,
        ),
        "retry-workflow": (
            "Retry workflow",
            fmt("Run workflow {} again from its failed step? Earlier steps are kept.", describe),
            "Retry workflow",
            False,
            retry_workflow,
        ),
        "fork": (
            "Fork workflow",
            fmt(
                "Start a new run of {} that keeps its steps before position {}?", describe, position
            ),
            "Fork",
            False,
            fork,
        ),
        "retry": (
            "Retry job",
            fmt(
                "Run {} again now? It is {}; its attempts start again from zero.",
                describe,
                job.status.value,
            ),
            "Retry",
            False,
            retry,
        ),
        "cancel": (
            "Cancel job",
            fmt(
                "Cancel {}? It is {}: {}",
                describe,
                job.status.value,
                "a running job stops at its next heartbeat."
                if job.status is JobStatus.RUNNING
                else "it will never start."
                + (" A repeating schedule stops for good." if job.repeat else ""),
            ),
            "Cancel job",
            True,
            cancel,
        ),
        "purge": (
            "Delete job",
            fmt("Delete {} for good? It is {}.", describe, job.status.value),
            "Delete",
            True,
            delete,
        ),
    }
    title, text, button, danger, deed = steps[action]
    fields = [("from", position)] if action == "fork" else []
    if ctx.request.method == "POST":
        try:
            return deed()
        except (BadInput, OutOfBounds):
            raise  # the page answers 400, as for a malformed number
        except MongoschedError as exc:
            return _confirm(
                ctx, title, text, button, back=path, fields=fields, danger=danger, error=str(exc)
            )
    return _confirm(ctx, title, text, button, back=path, fields=fields, danger=danger)


# Bulk ---------------------------------------------------------------------------------------
def describe_filter(filters: Filters) -> Markup:
    parts = []
    if filters.task:
        parts.append(fmt("task <strong>{}</strong>", filters.task))
    if filters.queue:
        parts.append(fmt("queue <strong>{}</strong>", filters.queue))
    if filters.statuses:
        parts.append(fmt("status <strong>{}</strong>", " or ".join(filters.statuses)))
    if filters.error_type:
        parts.append(fmt("error type <strong>{}</strong>", filters.error_type))
    if not parts:
        return Markup("of <strong>every task and queue</strong> (no filter)")
    return Markup("with ") + join(parts, ", ")


BULK_WORDS = {
    "retry": ("failed, cancelled or expired", False),
    "cancel": ("pending or running", True),
    "purge": ("finished", True),
}


def bulk_action(ops: Operations, ctx: Context, action: str) -> Page | Response:
    """Retry, cancel or delete every job the filter matches (the filter comes from the
    query on the confirmation page, from hidden fields on the POST)."""
    if action not in BULK_ACTIONS:
        return "Not available", Markup("<p>This app has no such bulk action.</p>"), 404
    request: Request = ctx.request
    if request.method == "POST":
        filters = Filters.read(request.field, lambda name: request.form.get(name, []))
    else:
        filters = Filters.read(request.arg, request.args)
    which, danger = BULK_WORDS[action]
    button = BULK_VERBS[action]
    title = f"{button} jobs"
    back = ctx.url("/jobs", filters.pairs())[len(ctx.request.root) :]
    try:
        if request.method == "POST":
            n = ops.bulk(action, filters, dry_run=False)
            return done(ctx, back, f"bulk-{action}", n)
        count = ops.bulk(action, filters, dry_run=True)
    except OutOfBounds:
        raise  # the page answers 400
    except MongoschedError as exc:
        return _confirm(ctx, title, Markup(""), button, back=back, error=str(exc))
    if count == 0:
        text = fmt("No {} job {}: nothing to do.", which, describe_filter(filters))
        body = fmt(
            '<section class="panel confirm"><p>{}</p>'
            '<a class="button" href="{}">Go back</a></section>',
            text,
            ctx.url(back),
        )
        return title, body, 200
    text = fmt(
        "{} <strong>{}</strong> {} job{} {}?",
        button,
        f"{count:,}",
        which,
        "" if count == 1 else "s",
        describe_filter(filters),
    )
    return _confirm(
        ctx,
        title,
        text,
        bulk_label(action, count),
        back=back,
        fields=filters.pairs(),
        danger=danger,
    )


# Pause, resume -----------------------------------------------------------------------------
PAUSE_TEXT = {
    "queue": "Runners stop claiming jobs of queue {} within a poll interval; running jobs finish.",
    "task": "Runners stop claiming jobs of task {} within a poll interval; running jobs finish.",
    "schedule": "The repeating schedule {} stops starting new runs; a running one finishes.",
}
RESUME_TEXT = {
    "queue": "Runners claim jobs of queue {} again; what is due runs.",
    "task": "Runners claim jobs of task {} again; what is due runs.",
    "schedule": "The schedule {} runs again; missed slots follow its misfire policy.",
}


def pause_action(ops: Operations, ctx: Context, resume: bool) -> Page | Response:
    """Pause or resume a queue, a task or a schedule (``kind`` and ``name``)."""
    request = ctx.request
    get: Callable[[str], Any] = request.field if request.method == "POST" else request.arg
    kind, name = get("kind"), get("name")
    back = safe_next(get("next"))
    if kind not in PAUSE_KINDS or not name:
        return (
            "Bad request",
            Markup("<p>Say what to pause: a queue, a task or a schedule, by name.</p>"),
            400,
        )
    verb = "Resume" if resume else "Pause"
    text = (RESUME_TEXT if resume else PAUSE_TEXT)[kind]
    what = fmt("<strong>{}</strong>", name)
    title = f"{verb} {kind}"
    fields = [("kind", kind), ("name", name), ("next", back)]
    if request.method == "POST":
        try:
            ops.pause(kind, name, resume=resume)
        except OutOfBounds:
            raise  # the page answers 400
        except (MongoschedError, ValueError) as exc:
            return _confirm(
                ctx, title, fmt(text, what), verb, back=back, fields=fields, error=str(exc)
            )
        return done(ctx, back, "resumed" if resume else "paused")
    return _confirm(
        ctx, title, fmt(text, what), f"{verb} {kind}", back=back, fields=fields, danger=not resume
    )
