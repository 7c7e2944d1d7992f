"""The operator's verbs of ``mongosched``: bulk ``retry``, ``cancel`` and ``purge`` by
filter, ``pause`` and ``resume``, ``pauses``, ``schedule-edit``, ``trigger``,
``backfill``, ``runners`` (``workers``, its old name) and ``audit``."""

from __future__ import annotations

import argparse
from datetime import datetime, timedelta
from typing import Any

from mongosched.app import App
from mongosched.cli.exits import EXIT_OK, EXIT_USAGE, CommandError
from mongosched.cli.output import listing, out, print_json
from mongosched.job import Job

__all__ = [
    "audit",
    "backfill",
    "bulk",
    "pause",
    "pauses",
    "resume",
    "runners",
    "schedule_edit",
    "trigger",
]

FILTERS = (
    "task",
    "queue",
    "status",
    "error_type",
    "since",
    "before",
    "created_since",
    "created_before",
)
ACTIONS = {
    "retry": ("retry_jobs", "retried", "would retry"),
    "cancel": ("cancel_jobs", "cancelled (or asked to cancel)", "would cancel"),
    "purge": ("purge_jobs", "deleted", "would delete"),
}


def _when(app: App, value: datetime | timedelta | None) -> datetime | None:
    """A ``--since``/``--before`` value: a time, or a duration ago."""
    if isinstance(value, timedelta):
        return app.now() - value
    return value


def bulk(app: App, args: argparse.Namespace) -> int:
    """``retry``, ``cancel`` or ``purge`` every job that matches the filters."""
    if not args.all and all(getattr(args, name, None) in (None, []) for name in FILTERS):
        raise CommandError(
            f"{args.verb}: give a filter (--task, --queue, --status, --error-type, --since, "
            "--before, --created-since, --created-before) or --all for every job",
            EXIT_USAGE,
        )
    method, done, would = ACTIONS[args.verb]
    # Finished jobs are found by when they finished; unfinished ones by when they were made.
    finished = args.verb != "cancel"
    since, before = _when(app, args.since), _when(app, args.before)
    filters: dict[str, Any] = {
        "task": args.task,
        "queue": args.queue,
        "status": args.status or None,
        "error_type": args.error_type,
        "created_after": _when(app, args.created_since) or (None if finished else since),
        "created_before": _when(app, args.created_before) or (None if finished else before),
        "finished_after": since if finished else None,
        "finished_before": before if finished else None,
    }
    count = getattr(app, method)(**filters, dry_run=args.dry_run, batch_size=args.batch_size)
    if args.json:
        print_json({"action": args.verb, "dry_run": args.dry_run, "count": count})
    else:
        out(f"{would if args.dry_run else done} {count} job(s)")
    return EXIT_OK


def _target(args: argparse.Namespace) -> dict[str, Any]:
    return {"queue": args.queue, "task": args.task, "schedule": args.schedule}


def _named(args: argparse.Namespace) -> str:
    for kind in ("queue", "task", "schedule"):
        if getattr(args, kind) is not None:
            return f"{kind} {getattr(args, kind)}"
    return ""


def pause(app: App, args: argparse.Namespace) -> int:
    app.pause(**_target(args))
    out(f"{_named(args)} paused: runners stop claiming it within one poll interval")
    return EXIT_OK


def resume(app: App, args: argparse.Namespace) -> int:
    app.resume(**_target(args))
    out(f"{_named(args)} resumed")
    return EXIT_OK


def pauses(app: App, args: argparse.Namespace) -> int:
    listing(
        app.pauses(),
        as_json=args.json,
        json_row=lambda p: p,
        empty="nothing is paused",
        headers=["KIND", "NAME", "SINCE (UTC)", "REASON"],
        row=lambda p: [p.kind, p.name, p.since, p.reason or ""],
    )
    return EXIT_OK


def schedule_edit(app: App, args: argparse.Namespace) -> int:
    row = app.update_schedule(
        args.schedule,
        cron=args.cron,
        every=args.every,
        timezone=args.timezone,
        priority=args.priority,
        queue=args.queue,
    )
    if args.json:
        print_json(row)
    else:
        zone = f" in {row['timezone']}" if row["timezone"] else ""
        out(
            f"schedule {row['id']} ({row['task']}): {row['rule']}{zone}, queue {row['queue']}, "
            f"priority {row['priority']}; next run {row['next_run']}"
        )
    return EXIT_OK


def trigger(app: App, args: argparse.Namespace) -> int:
    job = app.trigger_schedule(args.schedule)
    if args.json:
        print_json({"id": job.id, "task": job.task, "run_at": job.run_at})
    else:
        out(f"schedule {args.schedule} triggered: job {job.id} runs now")
    return EXIT_OK


def backfill(app: App, args: argparse.Namespace) -> int:
    start, end = _when(app, args.start), _when(app, args.end)
    assert start is not None and end is not None
    lanes = app.backfill(args.schedule, start, end, at_once=args.at_once)
    if args.json:
        print_json([{"id": j.id, "first": j.scheduled_for, "last": _last(j)} for j in lanes])
    elif not lanes:
        out(f"schedule {args.schedule} has no slot from {start} to {end}")
    else:
        out(f"schedule {args.schedule}: backfill from {start} to {end} in {len(lanes)} job(s)")
        for job in lanes:
            out(f"  job {job.id}: slots {job.scheduled_for} to {_last(job)}")
    return EXIT_OK


def _last(job: Job[Any]) -> Any:
    return (job.repeat or {}).get("until")


def runners(app: App, args: argparse.Namespace) -> int:
    listing(
        app.live_runners(),
        as_json=args.json,
        json_row=lambda w: w,
        empty="no runners registered",
        headers=[
            "NAME",
            "HOST",
            "PID",
            "QUEUES",
            "THREADS",
            "IN FLIGHT",
            "STARTED (UTC)",
            "LAST SEEN (UTC)",
            "STALE",
            "VERSION",
        ],
        row=lambda w: [
            w.name,
            w.host,
            w.pid,
            "all" if w.queues is None else ",".join(w.queues),
            w.workers,
            w.in_flight,
            w.started_at,
            w.last_seen,
            "stale" if w.stale else "-",
            w.version,
        ],
    )
    return EXIT_OK


def audit(app: App, args: argparse.Namespace) -> int:
    listing(
        app.audit.entries(limit=args.limit),
        as_json=args.json,
        json_row=lambda e: e,
        empty="no operator action recorded",
        headers=["AT (UTC)", "ACTOR", "VIA", "ACTION", "JOBS", "TARGET", "DETAIL", "KNOWN BY"],
        row=lambda e: [e.at, e.actor, e.via, e.action, e.count, e.target, e.detail, e.known_by],
    )
    return EXIT_OK
