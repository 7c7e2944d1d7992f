"""The dashboard's forms that act on one repeating schedule: change its rule, timezone,
priority or queue at runtime (``/schedules/edit``), run it once now
(``/schedules/trigger``) and backfill a range of its slots (``/schedules/backfill``),
each a form (GET) and the action (POST)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from mongosched._core import validate
from mongosched.dashboard.actions import done
from mongosched.dashboard.data import Operations
from mongosched.dashboard.fleet import every_seconds, rule_text
from mongosched.dashboard.http import Response
from mongosched.dashboard.render import Context, Markup, fmt, join, stamp
from mongosched.errors import ConfigurationError, MongoschedError, OutOfBounds

__all__ = ["backfill_action", "schedule_edit", "trigger_action"]

Answer = tuple[str, Markup, int] | Response

EDIT_FIELDS = (
    ("cron", "Cron expression", "e.g. 30 2 * * *: leave empty to run every N seconds"),
    ("every", "Every (seconds)", "instead of a cron expression"),
    ("timezone", "Timezone", "IANA name, with cron: e.g. Europe/Berlin"),
    ("priority", "Priority", "1 runs before 10"),
    ("queue", "Queue", ""),
)
BACKFILL_FIELDS = (
    ("start", "First slot at or after", "ISO 8601, UTC unless it says: 2026-11-20T00:00"),
    ("end", "Last slot at or before", "ISO 8601, UTC unless it says"),
    ("at_once", "At most at once", "1: one slot after another"),
)


def _row(ops: Operations, ctx: Context) -> dict[str, Any] | None:
    """The schedule the form is about: ``id`` in the query (GET) or the form (POST)."""
    request = ctx.request
    wanted = request.field("id") if request.method == "POST" else request.arg("id")
    return next((r for r in ops.schedules() if str(r["id"]) == wanted), None)


class _Refused(Exception):
    """A field the form's action cannot take: its message is shown above the form."""


def _missing() -> Answer:
    return "Not found", Markup("<p>There is no such repeating schedule.</p>"), 404


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


def _answer(
    ctx: Context,
    row: dict[str, Any],
    title: str,
    text: Markup,
    button: str,
    inputs: Markup,
    act: Callable[[], Response],
) -> Answer:
    """The form (GET); on POST, ``act()``'s redirect, or the form again with why it was
    refused (a bad field, or the App's error) above it."""
    error = None
    if ctx.request.method == "POST":
        try:
            return act()
        except (_Refused, MongoschedError) as exc:
            error = str(exc)
    return title, _form(ctx, row, text, button, inputs, error), 400 if error else 200


def _form(
    ctx: Context, row: dict[str, Any], text: Markup, button: str, inputs: Markup, error: str | None
) -> Markup:
    """The panel that says what the action does (``text``) and its form, posting back
    to this page with the schedule's id and the CSRF field; ``error`` above it."""
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


def _posted(ctx: Context, values: dict[str, str]) -> dict[str, str]:
    """The form's fields as posted (stripped), else ``values`` as first shown."""
    request = ctx.request
    if request.method != "POST":
        return values
    return {name: request.field(name).strip() for name in values}


def schedule_edit(ops: Operations, ctx: Context) -> Answer:
    """The form that changes a schedule's rule, timezone, priority or queue (GET), and
    the change (POST: only the fields that differ from the schedule as shown)."""
    row = _row(ops, ctx)
    if row is None:
        return _missing()
    rule = str(row["rule"])
    every = every_seconds(rule)
    current = {
        "cron": rule if every is None else "",
        "every": "" if every is None else f"{every:g}",
        "timezone": str(row.get("timezone") or "UTC") if every is None else "",
        "priority": str(row.get("priority", "")),
        "queue": str(row.get("queue") or ""),
    }
    values = _posted(ctx, current)

    def edit() -> Response:
        changes: dict[str, Any] = {
            name: value for name, value in values.items() if value != current[name] and value
        }
        try:
            if "every" in changes:
                changes["every"] = validate.parse_duration(changes["every"], what="every")
                changes.pop("timezone", None)
            if "priority" in changes:
                changes["priority"] = validate.parse_whole(
                    changes["priority"], what="priority", maximum=10
                )
        except OutOfBounds:
            raise
        except ConfigurationError:
            raise _Refused(
                "every must be a number of seconds, and priority a whole number"
            ) from None
        if not changes:
            raise _Refused("Nothing was changed.")
        ops.app.update_schedule(row["id"], **changes)
        return done(ctx, "/schedules", "edited")

    text = fmt(
        'Schedule <strong>{}</strong> (<span class="mono">{}</span>) runs <code>{}</code>. '
        "A new rule takes effect at once: the next run is recomputed from now. A run in "
        "progress is not changed (try again when it ends).",
        row["task"],
        row["id"],
        rule_text(rule),
    )
    inputs = labelled_inputs(EDIT_FIELDS, values)
    return _answer(ctx, row, f"Edit schedule {row['task']}", text, "Save changes", inputs, edit)


def trigger_action(ops: Operations, ctx: Context) -> Answer:
    """Run a schedule once now, its next slot unmoved."""
    row = _row(ops, ctx)
    if row is None:
        return _missing()

    def trigger() -> Response:
        ops.app.trigger_schedule(row["id"])
        return done(ctx, "/schedules", "triggered")

    text = fmt(
        "Run schedule <strong>{}</strong> once now, as a job of its own. Its next run "
        "({}) does not move.",
        row["task"],
        stamp(row.get("next_run")),
    )
    return _answer(ctx, row, f"Run {row['task']} now", text, "Run now", Markup(""), trigger)


def backfill_action(ops: Operations, ctx: Context) -> Answer:
    """Run the slots of a range of a schedule, each once, at most N at a time."""
    row = _row(ops, ctx)
    if row is None:
        return _missing()
    values = _posted(ctx, {"start": "", "end": "", "at_once": "1"})

    def backfill() -> Response:
        start = validate.parse_time(values["start"], what="start")
        end = validate.parse_time(values["end"], what="end")
        at_once = validate.parse_whole(values["at_once"] or "1", what="at most at once")
        lanes = ops.app.backfill(row["id"], start, end, at_once=at_once)
        code = "backfilled" if lanes else "backfill-empty"
        return done(ctx, "/schedules", code, len(lanes))

    text = fmt(
        "Run the slots of schedule <strong>{}</strong> (<code>{}</code>) in a range, each "
        "once, in order, at most so many at a time. Its own slots go on as before.",
        row["task"],
        row["rule"],
    )
    inputs = labelled_inputs(BACKFILL_FIELDS, values)
    return _answer(ctx, row, f"Backfill {row['task']}", text, "Backfill", inputs, backfill)
