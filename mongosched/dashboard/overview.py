"""The dashboard's overview page (reads only): cards over a time window, the
throughput chart, warnings, the pauses, and the queues' and tasks' counts.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from mongosched.dashboard.chart import throughput_chart
from mongosched.dashboard.data import DUE_SCAN_LIMIT, Operations, Row
from mongosched.dashboard.render import Context, Markup, ago, badge, duration, fmt, join, table
from mongosched.dashboard.views import jobs_link, number, pause_link

__all__ = ["overview_page"]

CARD_LINK = (
    '<a class="card {}" href="{}"><span class="label">{}</span><span class="value">{}</span></a>'
)

CARD = '<div class="card {}"{}><span class="label">{}</span><span class="value">{}</span></div>'

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
        ("Due", number(due), "due" if due else "", ctx.url("/jobs", [("status", "pending")])),
        (
            "Due later",
            number(view.due_later),
            "",
            ctx.url("/jobs", [("status", "pending"), ("sort", "run_at")]),
        ),
        (
            "Running",
            number(totals.get("running", 0)),
            "",
            ctx.url("/jobs", [("status", "running")]),
        ),
        (
            f"Failed, {label}",
            number(failed),
            "bad" if failed else "",
            ctx.url("/jobs", [("status", "failed"), ("sort", "-finished_at")]),
        ),
        (
            f"Completed, {label}",
            number(completed),
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
                number(n),
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


def _counts_table(ctx: Context, rows: list[Row], now: Any, kind: str) -> Markup:
    out = []
    for row in rows:
        due = f"{row.due}+" if row.due_capped else str(row.due)
        late = row.late_seconds(now)
        cells: list[Any] = [
            jobs_link(ctx, row.name, **{kind: row.name}),
            jobs_link(ctx, due, **{kind: row.name, "status": "pending"}),
            jobs_link(ctx, number(row.running), **{kind: row.name, "status": "running"}),
            jobs_link(ctx, number(row.failed), **{kind: row.name, "status": "failed"}),
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
