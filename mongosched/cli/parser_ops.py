"""The options of the operator's verbs (:mod:`.operations`): bulk retry, cancel and
purge by filter, pause, resume, pauses, schedule-edit, trigger, backfill, audit,
runners and workers."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from mongosched._core.records import RETRYABLE_STATUSES, JobStatus
from mongosched.cli import operations

__all__ = ["OPERATION_VERBS", "add_operation_verbs"]

OPERATION_VERBS = {
    "retry": "run again every failed, cancelled or expired job matching the filters",
    "cancel": "cancel every unfinished job matching the filters",
    "purge": "delete every finished job matching the filters",
    "pause": "stop every runner claiming a queue's, task's or schedule's jobs",
    "resume": "let runners claim a paused queue's, task's or schedule's jobs again",
    "pauses": "list what is paused",
    "schedule-edit": "change a repeating schedule's rule, timezone, priority or queue",
    "trigger": "run a repeating schedule once now, its next slot unmoved",
    "backfill": "run the slots of a past range of a repeating schedule, each once",
    "runners": "list the runners registered (every process and host), stale ones marked",
    "audit": "list operators' actions, newest first: who did what, on how many jobs",
}

STATUSES = {
    "retry": [s.value for s in RETRYABLE_STATUSES],
    "cancel": [s.value for s in JobStatus if not s.is_final],
    "purge": [s.value for s in JobStatus if s.is_final],
}


def add_operation_verbs(
    commands: Any,
    verb: Callable[[Any, str, str], argparse.ArgumentParser],
    status_option: Callable[..., None],
    json_flag: Callable[[argparse.ArgumentParser], None],
    types: dict[str, Callable[[str], Any]],
) -> None:
    """Add the operator's verbs to ``commands`` (with the main parser's helpers)."""
    for name in ("retry", "cancel", "purge"):
        sub = verb(commands, name, OPERATION_VERBS[name])
        status_option(sub, STATUSES[name], "only these statuses", "; default all of them")
        sub.add_argument("--task", metavar="NAME", help="only jobs of this task")
        sub.add_argument("--queue", metavar="Q", help="only jobs in this queue")
        sub.add_argument(
            "--error-type", metavar="TYPE", help="only jobs whose last error is of this type"
        )
        which = "made" if name == "cancel" else "finished"
        sub.add_argument(
            "--since", type=types["when"], metavar="WHEN", help=f"{which} at or after: 2h or a time"
        )
        sub.add_argument(
            "--before", type=types["when"], metavar="WHEN", help=f"{which} before: 7d or a time"
        )
        sub.add_argument(
            "--created-since", type=types["when"], metavar="WHEN", help="made at or after"
        )
        sub.add_argument("--created-before", type=types["when"], metavar="WHEN", help="made before")
        sub.add_argument("--all", action="store_true", help="no filter: every job it applies to")
        sub.add_argument("--dry-run", action="store_true", help="only count the jobs that match")
        sub.add_argument(
            "--batch-size",
            type=types["positive_int"],
            default=500,
            metavar="N",
            help="ids per write (default 500)",
        )
        json_flag(sub)
        sub.set_defaults(run=operations.bulk)

    for name, run in (("pause", operations.pause), ("resume", operations.resume)):
        sub = verb(commands, name, OPERATION_VERBS[name])
        target = sub.add_mutually_exclusive_group(required=True)
        target.add_argument("--queue", metavar="Q", help="a queue")
        target.add_argument("--task", metavar="NAME", help="a task")
        target.add_argument(
            "--schedule", metavar="NAME", help="a repeating schedule: its task's name or its id"
        )
        sub.set_defaults(run=run)

    listed = verb(commands, "pauses", OPERATION_VERBS["pauses"])
    json_flag(listed)
    listed.set_defaults(run=operations.pauses)

    def schedule_verb(name: str) -> argparse.ArgumentParser:
        """A verb about one repeating schedule, named as its first argument."""
        sub = verb(commands, name, OPERATION_VERBS[name])
        sub.add_argument("schedule", metavar="NAME", help="its task's name, or the schedule's id")
        return sub

    edit = schedule_verb("schedule-edit")
    rule = edit.add_mutually_exclusive_group()
    rule.add_argument("--cron", metavar="EXPR", help="a new cron rule, e.g. '*/15 * * * *'")
    rule.add_argument(
        "--every", type=types["duration"], metavar="DURATION", help="a new interval: 30s, 5m"
    )
    edit.add_argument("--timezone", metavar="ZONE", help="IANA name, with cron")
    edit.add_argument(
        "--priority", type=types["priority"], metavar="N", help="1 (first) to 10 (last)"
    )
    edit.add_argument("--queue", metavar="Q", help="the queue its runs go to")
    json_flag(edit)
    edit.set_defaults(run=operations.schedule_edit)

    trigger = schedule_verb("trigger")
    json_flag(trigger)
    trigger.set_defaults(run=operations.trigger)

    backfill = schedule_verb("backfill")
    for flag, what in (("--start", "the first slot"), ("--end", "the last slot")):
        backfill.add_argument(
            flag,
            type=types["when"],
            required=True,
            metavar="WHEN",
            help=f"{what} to run, at or after (--end: at or before) it: 7d (ago) or a time",
        )
    backfill.add_argument(
        "--at-once",
        type=types["positive_int"],
        default=1,
        metavar="N",
        help="run at most N slots at a time (default 1: one after another)",
    )
    json_flag(backfill)
    backfill.set_defaults(run=operations.backfill)

    audit = verb(commands, "audit", OPERATION_VERBS["audit"])
    audit.add_argument(
        "--limit", type=types["positive_int"], default=50, metavar="N", help="default 50"
    )
    json_flag(audit)
    audit.set_defaults(run=operations.audit)

    listed = verb(commands, "runners", OPERATION_VERBS["runners"])
    json_flag(listed)
    listed.set_defaults(run=operations.runners)
