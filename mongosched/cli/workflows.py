"""The ``workflows`` verb: a workflow's steps as a timeline, and its operator actions."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import asdict
from typing import Any

from mongosched.app import App
from mongosched.cli.exits import EXIT_NOT_FOUND, EXIT_OK, CommandError
from mongosched.cli.output import cell, out, print_json, to_json
from mongosched.cli.verbs import jobs_cancel, jobs_retry, require_job

__all__ = ["add_arguments"]


def _workflow(app: App, job_id: str) -> Any:
    job = require_job(app, job_id)
    if not app.is_workflow(job.task):
        raise CommandError(f"job {job.id} ({job.task}) is not a workflow", EXIT_NOT_FOUND)
    return job


def show(app: App, args: argparse.Namespace) -> int:
    job = _workflow(app, args.id)
    steps = app.steps(job.id)
    if args.json:
        print_json(
            {
                "id": job.id,
                "task": job.task,
                "status": job.status,
                "steps": [asdict(step) for step in steps],
            }
        )
        return EXIT_OK
    out(f"workflow {job.id} ({cell(job.task)}): {job.status}")
    for step in steps:
        if step.error is not None:
            outcome = f"error {step.error.get('type')}: {step.error.get('message')}"
        elif step.kind.value == "sleep":
            outcome = f"until {cell(step.until)}"
        elif step.kind.value == "wait":
            outcome = f"for event {step.name!r} until {cell(step.until)}"
        elif step.kind.value == "event":
            outcome = "no event by the deadline" if step.event is None else "received"
            outcome += f" {step.name!r}" + (
                "" if step.event is None else f": {to_json(step.value)}"
            )
        elif step.kind.value == "gather":
            outcome = "jobs " + ", ".join(str(child) for child in step.children)
        else:
            outcome = f"result {to_json(step.value)}"
        out(
            f"  {step.position:>3}  {step.kind.value:<6}  {cell(step.name)}  "
            f"tries {step.attempts}  {cell(step.started_at)} to {cell(step.finished_at)}  "
            f"{cell(outcome)}"
        )
    last = steps[-1] if steps else None
    if last is not None and last.kind.value in ("sleep", "wait") and job.status == "pending":
        what = "sleep" if last.kind.value == "sleep" else f"wait for event {last.name!r}"
        out(f"waiting: {what} until {cell(last.until)}")
    return EXIT_OK


def cancel(app: App, args: argparse.Namespace) -> int:
    _workflow(app, args.id)
    return jobs_cancel(app, args)


def retry(app: App, args: argparse.Namespace) -> int:
    _workflow(app, args.id)
    return jobs_retry(app, args)


def fork(app: App, args: argparse.Namespace) -> int:
    job = app.fork_workflow(_workflow(app, args.id).id, args.position)
    out(f"workflow {job.id} forked from {args.id} at step {args.position}")
    return EXIT_OK


def add_arguments(
    parser: argparse.ArgumentParser, verb: Any, json_flag: Any, position: Callable[[str], int]
) -> None:
    """The verb's actions, on its parser (``position``: the type of a step's position,
    a whole number in ASCII digits)."""
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    shown = verb(actions, "show", "a workflow's steps as a timeline, and what it waits for")
    shown.add_argument("id", metavar="ID")
    json_flag(shown)
    shown.set_defaults(run=show)
    for name, help, run in (
        ("cancel", "cancel a workflow and the jobs it gathered", cancel),
        ("retry", "run a failed workflow again from its failed step", retry),
        ("fork", "a new run of a workflow, keeping the steps before --from", fork),
    ):
        sub = verb(actions, name, help)
        sub.add_argument("id", metavar="ID")
        if name == "fork":
            sub.add_argument("--from", dest="position", type=position, required=True, metavar="N")
        sub.set_defaults(run=run)
