"""The dashboard's pages about the system rather than single jobs: the repeating
schedules, the live runners and the audit trail (reads only; the forms that act on a
schedule are in :mod:`.schedule_forms`)."""

from __future__ import annotations

import re
from typing import Any

from mongosched._core.records import JobStatus
from mongosched.dashboard.data import Operations
from mongosched.dashboard.render import (
    Context,
    Markup,
    ago,
    badge,
    duration,
    fmt,
    stamp,
    table,
    when,
)
from mongosched.dashboard.views import boxed, link, pause_link, runner_anchor

__all__ = [
    "audit_page",
    "every_seconds",
    "rule_text",
    "runners_page",
    "schedules_page",
]


def every_seconds(rule: str) -> float | None:
    """The seconds of a schedule row's ``every 3600.0s`` rule; None for a cron rule."""
    match = re.fullmatch(r"every ([0-9.]+)s", rule)
    return float(match[1]) if match else None


def rule_text(rule: str) -> str:
    """``every 3600.0s`` as ``every 1 h``; a cron rule as it is."""
    every = every_seconds(rule)
    return rule if every is None else f"every {duration(every)}"


# Schedules, runners -----------------------------------------------------------------------
def schedules_page(ops: Operations, ctx: Context) -> tuple[str, Markup]:
    now = ops.app.now()
    rows = []
    for row in ops.schedules():
        paused = bool(row.get("paused"))
        name = str(row["id"])
        edited = row.get("edited_at")
        rule = fmt("<code>{}</code>", rule_text(str(row["rule"])))
        if edited is not None:
            rule += fmt(
                ' <span class="muted small" title="edited at runtime {}">edited</span>', edited
            )
        rows.append(
            [
                link(ctx, f"/jobs/{name}", row["task"]),
                rule,
                row.get("timezone") or "UTC",
                row.get("queue") or "",
                _state(row, paused),
                when(row.get("next_run"), now),
                ago(row.get("last_run"), now),
                _last(row),
                _missed(row, now),
                _actions(ctx, name, paused, finished=JobStatus(row["status"]).is_final),
            ]
        )
    headers = [
        "Task",
        "Rule",
        "Timezone",
        "Queue",
        "State",
        "Next run",
        "Last run",
        "Last result",
        "Missed slots",
        "",
    ]
    return "Schedules", boxed(table(headers, rows, empty="No repeating schedules."))


def _actions(ctx: Context, name: str, paused: bool, *, finished: bool) -> Markup:
    """A schedule's buttons: none for a finished one (a cancelled declared schedule,
    listed as switched off, takes no edit, trigger or backfill), but the resume that
    removes a pause left from before it ended."""
    if finished:
        return pause_link(ctx, "schedule", name, paused=True) if paused else Markup("")
    return fmt(
        '<a class="button small" href="{}">Edit…</a> {} '
        '<a class="button small" href="{}">Run now…</a> '
        '<a class="button small" href="{}">Backfill…</a>',
        ctx.url("/schedules/edit", [("id", name)]),
        pause_link(ctx, "schedule", name, paused=paused),
        ctx.url("/schedules/trigger", [("id", name)]),
        ctx.url("/schedules/backfill", [("id", name)]),
    )


def _state(row: dict[str, Any], paused: bool) -> Markup:
    """Its status, or paused, with why when it paused itself."""
    if not paused:
        return badge(row["status"])
    reason = row.get("paused_reason")
    if not reason:
        return badge("paused")
    return badge("paused") + fmt('<div class="muted small">{}</div>', reason)


def _last(row: dict[str, Any]) -> Markup:
    """How its last run ended, and how many runs failed in a row."""
    if not row.get("last_status"):
        return Markup("")
    failures = row.get("failures") or 0
    if failures < 2:
        return badge(row["last_status"])
    return badge(row["last_status"]) + fmt(' <span class="muted">({} in a row)</span>', failures)


def _missed(row: dict[str, Any], now: Any) -> Markup:
    """How many slots never ran, the latest and why."""
    count = row.get("missed") or 0
    if not count:
        return fmt('<span class="zero">{}</span>', 0)
    return fmt(
        '{} <div class="muted small">latest {} (by {} policy)</div>',
        count,
        ago(row.get("missed_last"), now),
        row.get("missed_reason") or "?",
    )


def runners_page(ops: Operations, ctx: Context) -> tuple[str, Markup]:
    now = ops.app.now()
    rows = [
        [
            fmt('<span class="mono" id="{}">{}</span>', runner_anchor(w.name), w.name),
            w.host,
            str(w.pid),
            ", ".join(w.queues) if w.queues else "all",
            fmt('<span title="{}">{}</span>', ", ".join(w.tasks), len(w.tasks)),
            str(w.workers),
            str(w.in_flight),
            ago(w.started_at, now),
            ago(w.last_seen, now),
            w.version,
            badge("stale") if w.stale else badge("live"),
        ]
        for w in ops.live_runners()
    ]
    headers = [
        "Runner", "Host", "PID", "Queues", "Tasks", "Threads", "In flight", "Started",
        "Last seen", "Version", "State",
    ]  # fmt: skip
    note = Markup(
        '<p class="muted">Every runner registers itself and refreshes its entry every few '
        "seconds; one not seen for a while is shown stale (it may have died), and is "
        "forgotten later.</p>"
    )
    return "Runners", note + boxed(table(headers, rows, empty="No runner is registered."))


AUDIT_LIMIT = 200
"""Entries the audit page lists (the newest)."""


def audit_page(ops: Operations, ctx: Context) -> tuple[str, Markup]:
    """The newest entries; with ``?job=ID``, that job's only. An entry of one job links
    to the job's page."""
    wanted = ctx.request.arg("job")
    job = ops.job(wanted) if wanted else None
    entries = ops.app.audit.entries(
        limit=AUDIT_LIMIT, job=None if not wanted else job.id if job is not None else wanted
    )
    rows = [
        [
            stamp(e.at),
            e.actor,
            e.via,
            e.action,
            "" if e.count is None else f"{e.count:,}",
            e.target if e.job is None else link(ctx, f"/jobs/{e.job}", e.target),
            e.detail or "",
            e.known_by or "",
        ]
        for e in entries
    ]
    headers = ["When (UTC)", "Who", "Via", "Action", "Jobs", "What", "Detail", "Known by"]
    keep = ops.app.audit.keep
    kept = "for good" if keep is None else f"for {duration(keep.total_seconds())}"
    note = fmt(
        '<p class="muted">What operators did (retry, cancel, delete, purge, edit, pause, '
        "resume, schedule edits, triggers, backfills), through the API, the command line "
        "or this dashboard, newest first: the latest {}, kept {} "
        "(<code>mongosched audit</code> lists them too).</p>",
        AUDIT_LIMIT,
        kept,
    )
    if wanted:
        note = fmt(
            '<p class="crumbs">{} / job <span class="mono">{}</span> · {}</p>',
            link(ctx, "/audit", "Audit trail"),
            wanted,
            link(ctx, f"/jobs/{wanted}", "its page"),
        )
    return "Audit trail", note + boxed(table(headers, rows, empty="No action recorded yet."))
