"""What each verb of the ``mongosched`` command does, once the app is known.

Each takes the app and the parsed arguments and returns the exit code; failures raise
(:class:`~mongosched.cli.exits.CommandError`, or the package's own errors, which the
entry point turns into exit codes).
"""

from __future__ import annotations

import argparse
import gc
import os
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from mongosched._core.records import JobQuery, JobStatus
from mongosched.app import App, Cancellation
from mongosched.cli.exits import EXIT_NOT_FOUND, EXIT_OK, EXIT_USAGE, CommandError
from mongosched.cli.output import cell, job_json, listing, out, print_json, ran, table, to_json
from mongosched.cli.supervisor import ENV_INDEX, Supervisor, watch_supervisor
from mongosched.job import Job
from mongosched.observe import metrics

__all__ = [
    "STATUSES",
    "child_command",
    "jobs_cancel",
    "jobs_list",
    "jobs_purge",
    "jobs_retry",
    "jobs_show",
    "ping",
    "schedules",
    "stats",
    "worker",
]

STATUSES = [s.value for s in JobStatus]

SCHEDULE_COLUMNS = {
    "ID": "id",
    "TASK": "task",
    "RULE": "rule",
    "TIMEZONE": "timezone",
    "STATUS": "status",
    "PAUSED": "paused",
    "MISSED": "missed",
    "NEXT RUN (UTC)": "next_run",
    "LAST RUN (UTC)": "last_run",
    "LAST": "last_status",
}


def ping(app: App, args: argparse.Namespace) -> int:
    """The connection check already passed (every verb makes it): time one more read,
    for probes (``mongosched ping`` exits 0, or 4 when the database cannot be reached)."""
    started = time.monotonic()
    running = app.store.jobs.count(JobQuery(statuses=(JobStatus.RUNNING,)))
    elapsed = (time.monotonic() - started) * 1000
    if getattr(args, "json", False):
        print_json({"ok": True, "ms": round(elapsed, 1), "running": running})
    else:
        out(f"ok: the database answered in {elapsed:.1f} ms ({running} job(s) running)")
    return EXIT_OK


def worker(app: App, args: argparse.Namespace) -> int:
    """Run a runner in this process until a signal, or (``--processes`` > 1) supervise
    that many processes that each run one (:mod:`mongosched.supervisor`)."""
    if args.processes > 1:
        supervisor = Supervisor(
            child_command(args.argv, framework=args.framework),
            args.processes,
            shutdown_timeout=args.shutdown_timeout,
        )
        return supervisor.run()
    watch_supervisor()  # in a supervised child: stop if the supervisor is gone
    if args.metrics_port is not None:
        index = int(os.environ.get(ENV_INDEX, "0"))
        port = args.metrics_port + index if args.metrics_port else 0
        metrics.serve(app, port, args.metrics_host)
    options: dict[str, Any] = {"workers": args.workers, "shutdown_timeout": args.shutdown_timeout}
    if args.queues:
        options["queues"] = args.queues
    if args.lease_duration is not None:
        options["lease_duration"] = args.lease_duration
    if args.poll_interval is not None:
        options["poll_interval"] = args.poll_interval
    if args.wake is not None:
        options["wake"] = args.wake
    runner = app.runner(**options)
    freeze_heap()
    runner.run_forever()
    return EXIT_OK


def freeze_heap() -> None:
    """Leave what a worker process has loaded before its runner starts (the app, its
    framework, every module imported) out of the garbage collector's passes from now
    on (:func:`gc.freeze`): it lives as long as the process, and each full collection
    would otherwise walk all of it again, a cost that grows with the app and that a
    runner with a backlog pays again and again. The process is the command's
    own when the command runs in its main thread, so the choice is the command's to
    make then; a runner started in an app's own process (``app.runner().start()``), or
    a command run in another thread, leaves the collector alone."""
    if threading.current_thread() is threading.main_thread():
        gc.collect()
        gc.freeze()


def child_command(argv: Sequence[str], *, framework: bool) -> list[str]:
    """The command line of a supervised child: the one that started this process (so
    ``python manage.py mongosched worker ...`` and the console script start their own
    kind), or, when ``main`` was called with arguments of its own, ``python -m
    mongosched`` with them; ``--processes 1`` added (the last one given counts)."""
    argv = list(argv)
    started = list(getattr(sys, "orig_argv", None) or [])
    if started and argv and started[-len(argv) :] == argv:
        base = [sys.executable, *started[1:]]
    elif not framework:
        base = [sys.executable, "-m", "mongosched", *argv]
    else:
        raise CommandError(
            "--processes: the supervised processes are started with the command line that "
            "started this one, and this one was not started from a command line",
            EXIT_USAGE,
        )
    return [*base, "--processes", "1"]


def require_job(app: App, job_id: str) -> Job:
    """The job, or exit 3. An id that cannot be one raises
    :class:`~mongosched.errors.InvalidJobId` (a ``JobNotFound``: exit 3 too)."""
    job = app.get_job(job_id)
    if job is None:
        raise CommandError(f"no job with id {job_id}", EXIT_NOT_FOUND)
    return job


def jobs_list(app: App, args: argparse.Namespace) -> int:
    jobs = app.get_jobs(
        task=args.task, label=args.label, status=args.status, queue=args.queue, limit=args.limit
    )
    listing(
        jobs,
        as_json=args.json,
        json_row=job_json,
        empty="no jobs",
        headers=["ID", "TASK", "STATUS", "QUEUE", "PRI", "TRIES", "RUN AT (UTC)", "UPDATED (UTC)"],
        row=lambda job: [
            job.id,
            job.label or job.task,  # a Django task's job: its path
            job.status,
            job.queue,
            job.priority if job.label_priority is None else f"{job.label_priority} (Django)",
            f"{job.attempts}/{job.max_attempts}",
            job.run_at,
            job.updated_at,
        ],
    )
    return EXIT_OK


def jobs_show(app: App, args: argparse.Namespace) -> int:
    job = require_job(app, args.id)
    if args.json:
        print_json(job_json(job))
        return EXIT_OK
    lease, error, progress = job.lease, job.error, job.progress
    completed = job.status is JobStatus.COMPLETED
    fields: list[tuple[str, Any]] = [
        ("id", job.id),
        ("task", job.task),
        ("label", job.label),
        ("status", f"{job.status}{' (cancel requested)' if job.cancel_requested else ''}"),
        ("queue", job.queue),
        ("priority", _priority(job)),
        ("attempts", f"{job.attempts}/{job.max_attempts}"),
        ("args", to_json(job.call[0])),
        ("kwargs", to_json(job.call[1])),
        ("repeat", job.repeat and to_json(job.repeat)),
        ("dedupe key", job.dedupe_key),
        ("run at", job.run_at),
        ("created", job.created_at),
        ("started", job.started_at),
        ("finished", job.finished_at),
        ("updated", job.updated_at),
        ("lease", lease and f"{lease.owner} until {cell(lease.until)}"),
        ("progress", progress and to_json(progress)),
        ("result", to_json(job.result) if completed else None),
        ("error", error and str(error)),
        *((f"attempt {a.attempt}", f"{cell(a.at)}  {a.error}") for a in job.errors),
        *((f"ran {a.attempt}", ran(a)) for a in job.history),
    ]
    width = max(len(name) for name, _ in fields) + 1
    for name, value in fields:
        text = cell(value) if isinstance(value, datetime) or value in (None, "") else str(value)
        out(f"{name + ':':<{width}} {text}")
    if error and error.traceback:
        out("traceback:")
        for line in error.traceback.rstrip().splitlines():
            out(f"  {line}")
    if job.logs:
        out(f"logs ({len(job.logs)}):")
        for entry in job.logs:
            first, *more = entry.message.splitlines() or [""]
            out(f"  {cell(entry.at)}  {entry.level:<7}  {entry.logger}  [{entry.attempt}] {first}")
            for line in more:
                out(f"      {line}")
    return EXIT_OK


def _priority(job: Job) -> str:
    """Its priority; a Django task's own first (higher runs first)."""
    if job.label_priority is None:
        return f"{job.priority:g}"
    return f"{job.label_priority} (Django priority; mongosched priority {job.priority:g})"


def jobs_cancel(app: App, args: argparse.Namespace) -> int:
    """Cancel a job; a workflow's, with the jobs it gathered."""
    job = require_job(app, args.id)
    outcome = (app.cancel_workflow if app.is_workflow(job.task) else app.cancel)(job.id)
    if outcome is Cancellation.ALREADY_FINISHED:
        status = require_job(app, args.id).status
        raise CommandError(f"job {job.id} ({job.task}) is already {status}; not cancelled")
    if outcome is Cancellation.REQUESTED:
        out(f"job {job.id} ({job.task}) is running: cancellation requested")
    else:
        out(f"job {job.id} ({job.task}) cancelled")
    return EXIT_OK


def jobs_retry(app: App, args: argparse.Namespace) -> int:
    """Retry a job; a workflow's, from its failed step."""
    job = require_job(app, args.id)
    job = (app.retry_workflow if app.is_workflow(job.task) else app.retry_job)(job.id)
    out(f"job {job.id} ({job.task}) is pending again")
    return EXIT_OK


def jobs_purge(app: App, args: argparse.Namespace) -> int:
    statuses = args.status or ["completed"]
    deleted = app.purge(status=statuses, older_than=args.older_than, task=args.task)
    out(f"deleted {deleted} {'/'.join(statuses)} job(s)")
    return EXIT_OK


def schedules(app: App, args: argparse.Namespace) -> int:
    listing(
        app.schedules(),
        as_json=args.json,
        json_row=lambda row: row,
        empty="no schedules",
        headers=list(SCHEDULE_COLUMNS),
        row=lambda row: [row[key] for key in SCHEDULE_COLUMNS.values()],
    )
    return EXIT_OK


def stats(app: App, args: argparse.Namespace) -> int:
    data = app.stats()
    if args.bare_uri:  # a bare URI knows no tasks: every due task would look unknown
        data.pop("unknown_tasks", None)
    if args.json:
        print_json(data)
    else:
        _print_stats(data)
    return EXIT_OK


def _print_stats(stats: Mapping[str, Any]) -> None:
    by_task: dict[str, Mapping[str, int]] = {**dict(sorted(stats["by_task"].items()))}
    by_task["(all)"] = stats["totals"]
    table(
        ["TASK", *(s.upper() for s in STATUSES)],
        ([task, *(counts.get(s, 0) for s in STATUSES)] for task, counts in by_task.items()),
    )
    oldest = stats["oldest_due"]
    out()
    if oldest:
        out(
            f"oldest due job: {oldest['id']} ({oldest['task']}), due {cell(oldest['run_at'])} "
            f"UTC, {oldest['late_seconds']:.1f} s late"
        )
    else:
        out("oldest due job: none")
    for queue, waiting in stats.get("backlog", {}).items():
        late = waiting["late_seconds"]
        due = f"{waiting['due']} due" + ("" if late is None else f", the oldest {late:.1f} s late")
        lapsed = f" ({waiting['expired']} with an expired lease)" if waiting["expired"] else ""
        running = f"{waiting['running']} running{lapsed}"
        out(f"backlog: {queue}: {waiting['total']} ({due}; {running})")
    running = stats["running"]
    expired = sum(1 for r in running if r["expired"])
    out(f"running: {len(running)}" + (f" ({expired} with an expired lease)" if expired else ""))
    if running:
        table(
            ["ID", "TASK", "OWNER", "LEASE UNTIL (UTC)", "EXPIRED"],
            ([r["id"], r["task"], r["owner"], r["lease_until"], r["expired"]] for r in running),
        )
    offset = stats.get("clock_offset")
    if offset is not None:
        relation = "ahead of" if offset >= 0 else "behind"
        out(f"clock: the server's is {abs(offset):.1f} s {relation} this host's")
    unknown = stats.get("unknown_tasks")
    if unknown:
        listed = ", ".join(f"{task} ({n})" for task, n in sorted(unknown.items()))
        out(f"due jobs of tasks this app does not register: {listed}")
