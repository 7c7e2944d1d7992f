"""The dashboard's pages about the system rather than single jobs: the repeating
schedules (and the form that edits one at runtime) and the live runners."""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from mongosched.dashboard.data import Operations
from mongosched.dashboard.http import Response, redirect
from mongosched.dashboard.render import (
    Context,
    Markup,
    ago,
    badge,
    duration,
    fmt,
    join,
    stamp,
    table,
    when,
)
from mongosched.dashboard.views import boxed, link, pause_link, runner_anchor
from mongosched.errors import MongoschedError

__all__ = [
    "audit_page",
    "labelled_inputs",
    "rule_text",
    "runners_page",
    "schedule_edit",
    "schedules_page",
]


def rule_text(rule: str) -> str:
    """``every 3600.0s`` as ``every 1 h``; a cron rule as it is."""
    match = re.fullmatch(r"every ([0-9.]+)s", rule)
    return f"every {duration(float(match[1]))}" if match else rule


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
                fmt(
                    '<a class="button small" href="{}">Edit…</a> {} '
                    '<a class="button small" href="{}">Run now…</a> '
                    '<a class="button small" href="{}">Backfill…</a>',
                    ctx.url("/schedules/edit", [("id", name)]),
                    pause_link(ctx, "schedule", name, paused=paused),
                    ctx.url("/schedules/trigger", [("id", name)]),
                    ctx.url("/schedules/backfill", [("id", name)]),
                ),
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
    entries = ops.app.audit.entries(limit=AUDIT_LIMIT)
    rows = [
        [
            stamp(e.at),
            e.actor,
            e.via,
            e.action,
            "" if e.count is None else f"{e.count:,}",
            e.target,
            e.detail or "",
        ]
        for e in entries
    ]
    headers = ["When (UTC)", "Who", "Via", "Action", "Jobs", "What", "Detail"]
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
    return "Audit trail", note + boxed(table(headers, rows, empty="No action recorded yet."))


# Editing a schedule ------------------------------------------------------------------------
def schedule_edit(ops: Operations, ctx: Context) -> tuple[str, Markup, int] | Response:
    """The form that changes a schedule's rule, timezone, priority or queue (GET), and
    the change (POST: only the fields that differ from the schedule as shown)."""
    request = ctx.request
    post = request.method == "POST"
    schedule_id = request.field("id") if post else request.arg("id")
    row = next((r for r in ops.schedules() if str(r["id"]) == schedule_id), None)
    if row is None:
        return "Not found", Markup("<p>There is no such repeating schedule.</p>"), 404
    rule = str(row["rule"])
    every = re.fullmatch(r"every ([0-9.]+)s", rule)
    current = {
        "cron": "" if every else rule,
        "every": f"{float(every[1]):g}" if every else "",
        "timezone": "" if every else str(row.get("timezone") or "UTC"),
        "priority": str(row.get("priority", "")),
        "queue": str(row.get("queue") or ""),
    }
    values = {name: request.field(name).strip() for name in current} if post else current
    error = None
    if post:
        changes: dict[str, Any] = {
            name: value for name, value in values.items() if value != current[name] and value
        }
        try:
            if "every" in changes:
                changes["every"] = float(changes["every"])
                changes.pop("timezone", None)
            if "priority" in changes:
                changes["priority"] = int(changes["priority"])
        except ValueError:
            error = "every must be a number of seconds, and priority a whole number"
        if error is None and not changes:
            error = "Nothing was changed."
        if error is None:
            try:
                ops.app.update_schedule(row["id"], **changes)
            except MongoschedError as exc:
                error = str(exc)
            else:
                return redirect(ctx.url("/schedules") + "?done=edited")
    title = f"Edit schedule {row['task']}"
    return title, _edit_form(ctx, row, values, error), 400 if error else 200


FIELDS = (
    ("cron", "Cron expression", "e.g. 30 2 * * *: leave empty to run every N seconds"),
    ("every", "Every (seconds)", "instead of a cron expression"),
    ("timezone", "Timezone", "IANA name, with cron: e.g. Europe/Berlin"),
    ("priority", "Priority", "1 runs before 10"),
    ("queue", "Queue", ""),
)


def labelled_inputs(fields: Iterable[tuple[str, str, str]], values: dict[str, str]) -> Markup:
    """A form's text inputs, each with its label and hint (``fields``: name, label,
    hint), filled with ``values``."""
    return join(
        fmt(
            '<label>{}<input name="{}" value="{}" autocomplete="off">'
            '<span class="hint">{}</span></label>',
            label,
            name,
            values.get(name, ""),
            hint,
        )
        for name, label, hint in fields
    )


def _edit_form(
    ctx: Context, row: dict[str, Any], values: dict[str, str], error: str | None
) -> Markup:
    problem = fmt('<div class="warning" role="alert">{}</div>', error) if error else Markup("")
    inputs = labelled_inputs(FIELDS, values)
    return fmt(
        '{}<section class="panel confirm"><p>Schedule <strong>{}</strong> '
        '(<span class="mono">{}</span>) runs <code>{}</code>. A new rule takes effect at '
        "once: the next run is recomputed from now. A run in progress is not changed "
        "(try again when it ends).</p>"
        '<form method="post" action="{}" class="edit">{}'
        '<input type="hidden" name="id" value="{}">{}'
        '<div class="buttons"><button type="submit" class="button primary">Save changes</button> '
        '<a class="button" href="{}">Go back</a></div></form></section>',
        problem,
        row["task"],
        row["id"],
        rule_text(str(row["rule"])),
        ctx.url("/schedules/edit"),
        ctx.csrf(),
        str(row["id"]),
        inputs,
        ctx.url("/schedules"),
    )
