"""The dashboard's actions that run a repeating schedule's slots on demand: run it
once now (``/schedules/trigger``) and backfill a range of its slots
(``/schedules/backfill``), each a confirmation form (GET) and the action (POST)."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

from mongosched.dashboard.data import Operations
from mongosched.dashboard.fleet import labelled_inputs
from mongosched.dashboard.http import Response, redirect
from mongosched.dashboard.render import Context, Markup, fmt, stamp
from mongosched.errors import MongoschedError

__all__ = ["backfill_action", "trigger_action"]

Answer = tuple[str, Markup, int] | Response

BACKFILL_FIELDS = (
    ("start", "First slot at or after", "ISO 8601, UTC unless it says: 2026-11-20T00:00"),
    ("end", "Last slot at or before", "ISO 8601, UTC unless it says"),
    ("at_once", "At most at once", "1: one slot after another"),
)


def _row(ops: Operations, ctx: Context) -> dict[str, Any] | None:
    request = ctx.request
    wanted = request.field("id") if request.method == "POST" else request.arg("id")
    return next((r for r in ops.schedules() if str(r["id"]) == wanted), None)


def _form(
    ctx: Context, row: dict[str, Any], text: Markup, button: str, inputs: Markup, error: str | None
) -> Markup:
    problem = fmt('<div class="warning" role="alert">{}</div>', error) if error else Markup("")
    return fmt(
        '{}<section class="panel confirm"><p>{}</p>'
        '<form method="post" action="{}" class="edit">{}'
        '<input type="hidden" name="id" value="{}">{}'
        '<div class="buttons"><button type="submit" class="button primary">{}</button> '
        '<a class="button" href="{}">Go back</a></div></form></section>',
        problem,
        text,
        ctx.url(ctx.request.path),
        ctx.csrf(),
        str(row["id"]),
        inputs,
        button,
        ctx.url("/schedules"),
    )


def _missing() -> Answer:
    return "Not found", Markup("<p>There is no such repeating schedule.</p>"), 404


def trigger_action(ops: Operations, ctx: Context) -> Answer:
    """Run a schedule once now, its next slot unmoved."""
    row = _row(ops, ctx)
    if row is None:
        return _missing()
    error = None
    if ctx.request.method == "POST":
        try:
            ops.app.trigger_schedule(row["id"])
        except MongoschedError as exc:
            error = str(exc)
        else:
            return redirect(ctx.url("/schedules") + "?done=triggered")
    text = fmt(
        "Run schedule <strong>{}</strong> once now, as a job of its own. Its next run "
        "({}) does not move.",
        row["task"],
        stamp(row.get("next_run")),
    )
    title = f"Run {row['task']} now"
    return title, _form(ctx, row, text, "Run now", Markup(""), error), 400 if error else 200


def backfill_action(ops: Operations, ctx: Context) -> Answer:
    """Run the slots of a range of a schedule, each once, at most N at a time."""
    row = _row(ops, ctx)
    if row is None:
        return _missing()
    request = ctx.request
    values = {"start": "", "end": "", "at_once": "1"}
    error = None
    if request.method == "POST":
        values = {name: request.field(name).strip() for name in values}
        try:
            start, end = _time(values["start"], "start"), _time(values["end"], "end")
            at_once = int(values["at_once"] or "1")
        except ValueError as exc:
            error = str(exc) if "time" in str(exc) else "at most at once must be a whole number"
        else:
            try:
                lanes = ops.app.backfill(row["id"], start, end, at_once=at_once)
            except MongoschedError as exc:
                error = str(exc)
            else:
                code = "backfilled" if lanes else "backfill-empty"
                return redirect(ctx.url("/schedules") + f"?done={code}&n={len(lanes)}")
    inputs = labelled_inputs(BACKFILL_FIELDS, values)
    text = fmt(
        "Run the slots of schedule <strong>{}</strong> (<code>{}</code>) in a range, each "
        "once, in order, at most so many at a time. Its own slots go on as before.",
        row["task"],
        row["rule"],
    )
    title = f"Backfill {row['task']}"
    return title, _form(ctx, row, text, "Backfill", inputs, error), 400 if error else 200


def _time(text: str, name: str) -> datetime:
    try:
        value = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise ValueError(f"{name}: give a time as ISO 8601, e.g. 2026-11-20T00:00") from None
    return value if value.tzinfo else value.replace(tzinfo=timezone.utc)
