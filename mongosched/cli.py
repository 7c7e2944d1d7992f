"""The ``mongosched`` command.

Usage::

    mongosched worker MODULE:APP [--workers N] [--queues a,b]
                      [--lease-duration S] [--poll-interval S]
    mongosched [--app MODULE:APP | --uri URI] jobs list [--status S ...] [--task NAME]
                                                  [--queue Q] [--limit N] [--json]
    mongosched [--app MODULE:APP | --uri URI] jobs show ID [--json]
    mongosched [--app MODULE:APP | --uri URI] jobs cancel ID
    mongosched [--app MODULE:APP | --uri URI] jobs retry ID
    mongosched [--app MODULE:APP | --uri URI] jobs purge --older-than 7d [--status completed]
    mongosched [--app MODULE:APP | --uri URI] schedules [--json]
    mongosched [--app MODULE:APP | --uri URI] stats [--json]

``--app`` and ``--uri`` may also come from the environment (``MONGOSCHED_APP``,
``MONGOSCHED_URI``) and may be given after the verb. A URI (``mongodb://host/dbname``)
is enough for every verb but ``worker``, which needs the app that registers the tasks.
Durations are a number with a unit: ``30s``, ``15m``, ``12h``, ``7d``, ``2w``.

Exit codes:

* 0: done.
* 1: the operation failed, or the job is in the wrong state for it (retrying a pending
  job, cancelling a finished one).
* 2: usage error (unknown verb or option, bad value).
* 3: not found: no job has that id.
* 4: cannot connect: bad URI, unreachable server, or an app path that does not import
  or does not name a :class:`~mongosched.App`.
* 130: interrupted by Ctrl-C (``worker`` instead stops gracefully on SIGINT or SIGTERM
  and exits 0).

Errors are one line on stderr, ``mongosched: error: ...``; ``--log-level debug`` adds
the traceback where there is one.
"""

from __future__ import annotations

import argparse
import base64
import importlib
import json
import logging
import os
import re
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime, timedelta, timezone
from typing import Any

from bson import Decimal128, ObjectId
from pymongo.errors import ConfigurationError as PyMongoConfigurationError
from pymongo.errors import ConnectionFailure, PyMongoError

from . import __version__, embedded
from .app import App, Cancellation
from .errors import ConfigurationError, JobNotFound, JobStateError, MongoschedError
from .job import Job, JobStatus

__all__ = ["build_parser", "check_connection", "load_app", "main", "parse_duration"]

log = logging.getLogger("mongosched")

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_NOT_FOUND = 3
EXIT_CONNECT = 4
EXIT_INTERRUPTED = 130

EXIT_CODES_HELP = """\
exit codes:
  0    done
  1    operation failed, or the job is in the wrong state for it
  2    usage error
  3    not found (no job has that id)
  4    cannot connect: bad URI, unreachable server, or an app path that does
       not import or does not name a mongosched App
  130  interrupted (worker instead stops gracefully on SIGINT/SIGTERM: 0)

environment:
  MONGOSCHED_APP  default for --app      MONGOSCHED_URI  default for --uri
"""

STATUSES = [s.value for s in JobStatus]
FINAL = [s.value for s in JobStatus if s.is_final]
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


class CommandError(Exception):
    """Ends the command with one line on stderr and an exit code."""

    def __init__(self, message: str, code: int = EXIT_FAILED) -> None:
        super().__init__(message)
        self.code = code


# Output ---------------------------------------------------------------------------------
def _out(text: str = "") -> None:
    sys.stdout.write(text + "\n")


def _err(text: str) -> None:
    sys.stderr.write(f"mongosched: error: {text}\n")


def _iso(value: datetime) -> str:
    """ISO 8601 in UTC, milliseconds, ``Z``."""
    if value.tzinfo is None:
        value = value.replace(tzinfo=timezone.utc)
    return value.astimezone(timezone.utc).isoformat(timespec="milliseconds")[:-6] + "Z"


def _json_default(value: Any) -> Any:
    if isinstance(value, datetime):
        return _iso(value)
    if isinstance(value, (ObjectId, Decimal128)):
        return str(value)
    if isinstance(value, bytes):
        return base64.b64encode(value).decode("ascii")
    return str(value)


def _print_json(value: Any) -> None:
    _out(json.dumps(value, default=_json_default, indent=2, ensure_ascii=False))


def _cell(value: Any) -> str:
    """A value as a table cell: times in UTC to the second, nothing as ``-``."""
    if value is None or value == "":
        return "-"
    if isinstance(value, datetime):
        return _iso(value)[:19].replace("T", " ")
    text = str(value).replace("\n", " ")
    return text if len(text) <= 60 else text[:57] + "..."


def _table(headers: Sequence[str], rows: Iterable[Sequence[Any]]) -> None:
    cells = [list(headers)] + [[_cell(v) for v in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    for row in cells:
        _out("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())


def _job_json(job: Job) -> dict[str, Any]:
    doc = job.to_dict()
    return {"id": doc.pop("_id"), **doc}


# Arguments ------------------------------------------------------------------------------
def parse_duration(text: str) -> timedelta:
    """``30s``, ``15m``, ``12h``, ``7d``, ``2w`` (a bare number is seconds)."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smhdw]?)\s*", text.lower())
    if not match:
        raise argparse.ArgumentTypeError(
            f"invalid duration {text!r}: use a number and a unit, e.g. 30s, 15m, 12h, 7d"
        )
    return timedelta(seconds=float(match[1]) * _UNITS[match[2] or "s"])


def _number(kind: Callable[[str], float], *, minimum: float, strict: bool) -> Callable[[str], Any]:
    """An argparse type: a ``kind`` (int or float) above ``minimum`` (or at it, unless
    ``strict``)."""
    what = "a whole number" if kind is int else "a number"
    bound = f"{'>' if strict else '>='} {minimum:g}"

    def parse(text: str) -> Any:
        try:
            value = kind(text)
        except ValueError:
            value = None
        # Written so that NaN fails too: it compares false with everything.
        if value is None or not (value > minimum or (not strict and value == minimum)):
            raise argparse.ArgumentTypeError(f"must be {what} {bound}, not {text!r}")
        return value

    return parse


_positive_int = _number(int, minimum=1, strict=False)
_non_negative_int = _number(int, minimum=0, strict=False)
_positive_float = _number(float, minimum=0, strict=True)


def _status_list(choices: Sequence[str]) -> Callable[[str], list[str]]:
    def parse(text: str) -> list[str]:
        items = [s.strip().lower() for s in text.split(",") if s.strip()]
        for item in items:
            if item not in choices:
                raise argparse.ArgumentTypeError(
                    f"invalid status {item!r} (choose from {', '.join(choices)})"
                )
        return items

    return parse


class _Statuses(argparse.Action):
    """``--status a b``, ``--status a,b`` and ``--status a --status b`` all add up."""

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: Any,
        option_string: str | None = None,
    ) -> None:
        current = list(getattr(namespace, self.dest, None) or [])
        for items in values:
            current.extend(item for item in items if item not in current)
        setattr(namespace, self.dest, current)


def _names(text: str) -> list[str]:
    return [name.strip() for name in text.split(",") if name.strip()]


def _connection_options(defaults: bool) -> argparse.ArgumentParser:
    """Options accepted before and after the verb. After it, they are SUPPRESSed unless
    given, so they do not overwrite what was given before it."""
    parser = argparse.ArgumentParser(
        add_help=False, argument_default=None if defaults else argparse.SUPPRESS
    )
    group = parser.add_argument_group("connection")
    group.add_argument(
        "--app", metavar="MODULE:APP", help="the App to use, e.g. myproject.tasks:app"
    )
    group.add_argument(
        "--uri", metavar="URI", help="instead of --app: a MongoDB URI naming the database"
    )
    group.add_argument(
        "--collection",
        metavar="NAME",
        help="job collection, with --uri (default mongosched_jobs)",
    )
    group.add_argument(
        "--timeout",
        type=_positive_float,
        metavar="S",
        help="seconds to wait for the server before giving up (default 3)",
    )
    group.add_argument(
        "--log-level",
        metavar="LEVEL",
        type=str.upper,
        choices=["DEBUG", "INFO", "WARNING", "ERROR"],
        help="debug, info, warning or error (default: info for worker, else warning)",
    )
    return parser


def build_parser() -> argparse.ArgumentParser:
    """The command's argument parser."""
    common = _connection_options(defaults=False)
    formatter = argparse.RawDescriptionHelpFormatter
    parser = argparse.ArgumentParser(
        prog="mongosched",
        description="Run mongosched workers and inspect or change jobs.",
        epilog=EXIT_CODES_HELP,
        formatter_class=formatter,
        parents=[_connection_options(defaults=True)],
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    verbs = parser.add_subparsers(dest="verb", metavar="VERB")

    def verb(group: Any, name: str, help: str) -> argparse.ArgumentParser:
        sub: argparse.ArgumentParser = group.add_parser(
            name,
            help=help,
            description=help,
            parents=[common],
            epilog=EXIT_CODES_HELP,
            formatter_class=formatter,
        )
        return sub

    def status_option(
        sub: argparse.ArgumentParser, choices: Sequence[str], what: str, extra: str = ""
    ) -> None:
        sub.add_argument(
            "--status",
            type=_status_list(choices),
            action=_Statuses,
            nargs="+",
            metavar="S",
            help=f"{what} ({', '.join(choices)}{extra})",
        )

    def json_flag(sub: argparse.ArgumentParser) -> None:
        sub.add_argument("--json", action="store_true", help="print JSON for scripts")

    worker = verb(verbs, "worker", "run a worker until SIGTERM or SIGINT (then stop gracefully)")
    worker.add_argument("app_path", nargs="?", metavar="MODULE:APP", help="the App to run")
    worker.add_argument(
        "--workers", type=_positive_int, default=4, metavar="N", help="threads (default 4)"
    )
    worker.add_argument(
        "--queues", type=_names, metavar="a,b", help="queues to serve (default: the app's)"
    )
    worker.add_argument(
        "--lease-duration", type=_positive_float, metavar="S", help="override the app's"
    )
    worker.add_argument(
        "--poll-interval", type=_positive_float, metavar="S", help="override the app's"
    )
    worker.set_defaults(run=_worker)

    jobs = verb(verbs, "jobs", "list, show, cancel, retry or purge jobs")
    actions = jobs.add_subparsers(dest="action", metavar="ACTION", required=True)
    listing = verb(actions, "list", "list jobs, most recently updated first")
    status_option(listing, STATUSES, "only these statuses")
    listing.add_argument("--task", metavar="NAME", help="only jobs of this task")
    listing.add_argument("--queue", metavar="Q", help="only jobs in this queue")
    listing.add_argument(
        "--limit", type=_non_negative_int, default=50, metavar="N", help="(default 50; 0: all)"
    )
    json_flag(listing)
    listing.set_defaults(run=_jobs_list)
    show = verb(actions, "show", "show one job")
    show.add_argument("id", metavar="ID")
    json_flag(show)
    show.set_defaults(run=_jobs_show)
    cancel = verb(actions, "cancel", "cancel a job (a running one at its next heartbeat)")
    cancel.add_argument("id", metavar="ID")
    cancel.set_defaults(run=_jobs_cancel)
    retry = verb(actions, "retry", "run a failed or cancelled job again")
    retry.add_argument("id", metavar="ID")
    retry.set_defaults(run=_jobs_retry)
    purge = verb(actions, "purge", "delete finished jobs older than a duration")
    status_option(purge, FINAL, "statuses to delete", "; default completed")
    purge.add_argument(
        "--older-than",
        type=parse_duration,
        required=True,
        metavar="DURATION",
        help="finished longer ago than this: 30s, 15m, 12h, 7d",
    )
    purge.add_argument("--task", metavar="NAME", help="only jobs of this task")
    purge.set_defaults(run=_jobs_purge)

    schedules = verb(verbs, "schedules", "list repeating jobs (cron and interval)")
    json_flag(schedules)
    schedules.set_defaults(run=_schedules)
    stats = verb(verbs, "stats", "counts by task and status, lateness, running leases")
    json_flag(stats)
    stats.set_defaults(run=_stats)
    return parser


# Connecting -----------------------------------------------------------------------------
def load_app(path: str) -> App:
    """Import ``module:attribute`` (or ``module``, attribute ``app``) and return the App."""
    module_name, _, attribute = path.partition(":")
    if not module_name:
        raise CommandError(f"invalid app path {path!r}: use MODULE:APP", EXIT_CONNECT)
    if os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.insert(0, os.getcwd())  # as `python -m` does, for the console script
    try:
        target: Any = importlib.import_module(module_name)
    except Exception as exc:
        log.debug("importing %s failed", module_name, exc_info=True)
        raise CommandError(
            f"cannot import app module {module_name!r}: {type(exc).__name__}: {exc}",
            EXIT_CONNECT,
        ) from None
    for name in (attribute or "app").split("."):
        try:
            target = getattr(target, name)
        except AttributeError:
            raise CommandError(
                f"app path {path!r}: module {module_name!r} has no attribute "
                f"{attribute or 'app'!r}",
                EXIT_CONNECT,
            ) from None
    if not isinstance(target, App):
        raise CommandError(
            f"app path {path!r} names a {type(target).__name__}, not a mongosched App",
            EXIT_CONNECT,
        )
    return target


def _redact(uri: str) -> str:
    return re.sub(r"//[^@/]*@", "//***@", uri)


def _resolve_app(args: argparse.Namespace, given: App | None) -> tuple[App, bool]:
    """The App to use, and whether it was made here (and is closed here)."""
    positional = getattr(args, "app_path", None)
    if given is not None:
        if args.app or args.uri or positional:
            raise CommandError(
                "--app, --uri and MODULE:APP cannot be used here: the app is given", EXIT_USAGE
            )
        return given, False
    if args.app and positional:
        raise CommandError("give the app once: MODULE:APP or --app, not both", EXIT_USAGE)
    app_path, uri = args.app or positional, args.uri
    if app_path and uri:
        raise CommandError("give either an app or --uri, not both", EXIT_USAGE)
    if not app_path and not uri:
        app_path = os.environ.get("MONGOSCHED_APP") or None
        uri = None if app_path else os.environ.get("MONGOSCHED_URI") or None
    if app_path:
        return load_app(app_path), False
    if args.verb == "worker":
        raise CommandError(
            "worker needs the app that registers the tasks: mongosched worker MODULE:APP",
            EXIT_USAGE,
        )
    if not uri:
        raise CommandError(
            "no database: give --app MODULE:APP or --uri URI "
            "(or set MONGOSCHED_APP or MONGOSCHED_URI)",
            EXIT_USAGE,
        )
    try:
        options = {"collection": args.collection} if args.collection else {}
        return App(uri, **options), True
    except ConfigurationError as exc:
        message = str(exc).removeprefix("App: ")
        raise CommandError(f"{message} ({_redact(uri)})", EXIT_CONNECT) from None


def check_connection(app: App, timeout: float) -> None:
    """Fail fast (exit 4) when the app's server cannot be reached within ``timeout``."""
    if app.uri is not None and embedded.parse_embedded_uri(app.uri) is not None:
        return
    if app.uri is None and embedded.is_embedded(app.database):
        return
    try:
        if app.uri is not None:
            import pymongo

            ms = int(timeout * 1000)
            client: Any = pymongo.MongoClient(
                app.uri, serverSelectionTimeoutMS=ms, connectTimeoutMS=ms, connect=False
            )
            try:
                client.admin.command("ping")
            finally:
                client.close()
        else:
            app.database.command("ping")
    except PyMongoError as exc:
        where = _redact(app.uri) if app.uri else "the server"
        raise CommandError(
            f"cannot connect to {where} within {timeout:g} s: {_first_line(exc)}", EXIT_CONNECT
        ) from None


def _first_line(exc: BaseException) -> str:
    """The gist of a pymongo error, without its topology description."""
    text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return re.split(r" \(configured timeouts|, Timeout: |, Topology Description: ", text)[0]


# Verbs ----------------------------------------------------------------------------------
def _worker(app: App, args: argparse.Namespace) -> int:
    options: dict[str, Any] = {"workers": args.workers}
    if args.queues:
        options["queues"] = args.queues
    if args.lease_duration is not None:
        options["lease_duration"] = args.lease_duration
    if args.poll_interval is not None:
        options["poll_interval"] = args.poll_interval
    app.runner(**options).run_forever()
    return EXIT_OK


def _require(app: App, job_id: str) -> Job:
    job = app.get_job(job_id)
    if job is None:
        raise CommandError(f"no job with id {job_id}", EXIT_NOT_FOUND)
    return job


def _listing(
    args: argparse.Namespace,
    items: Sequence[Any],
    *,
    as_json: Callable[[Any], Any],
    empty: str,
    headers: Sequence[str],
    row: Callable[[Any], Sequence[Any]],
) -> int:
    """Print ``items`` as JSON (``--json``), as a table, or say there are none."""
    if args.json:
        _print_json([as_json(item) for item in items])
    elif not items:
        _out(empty)
    else:
        _table(headers, (row(item) for item in items))
    return EXIT_OK


def _jobs_list(app: App, args: argparse.Namespace) -> int:
    jobs = app.get_jobs(task=args.task, status=args.status, queue=args.queue, limit=args.limit)
    return _listing(
        args,
        jobs,
        as_json=_job_json,
        empty="no jobs",
        headers=["ID", "TASK", "STATUS", "QUEUE", "PRI", "TRIES", "RUN AT (UTC)", "UPDATED (UTC)"],
        row=lambda job: [
            job.id,
            job.task,
            job.status,
            job.queue,
            job.priority,
            f"{job.attempts}/{job.max_attempts}",
            job.run_at,
            job.updated_at,
        ],
    )


def _jobs_show(app: App, args: argparse.Namespace) -> int:
    job = _require(app, args.id)
    if args.json:
        _print_json(_job_json(job))
        return EXIT_OK
    lease = job.lease
    error = job.error
    completed = job.status is JobStatus.COMPLETED
    fields: list[tuple[str, Any]] = [
        ("id", job.id),
        ("task", job.task),
        ("status", f"{job.status}{' (cancel requested)' if job.cancel_requested else ''}"),
        ("queue", job.queue),
        ("priority", job.priority),
        ("attempts", f"{job.attempts}/{job.max_attempts}"),
        ("args", json.dumps(job.args, default=_json_default)),
        ("kwargs", json.dumps(job.kwargs, default=_json_default)),
        ("repeat", job.repeat and json.dumps(job.repeat, default=_json_default)),
        ("dedupe key", job.dedupe_key),
        ("run at", job.run_at),
        ("created", job.created_at),
        ("started", job.started_at),
        ("finished", job.finished_at),
        ("updated", job.updated_at),
        ("lease", f"{lease.get('owner')} until {_cell(lease.get('until'))}" if lease else None),
        ("progress", job.progress and json.dumps(job.progress, default=_json_default)),
        ("result", json.dumps(job.result, default=_json_default) if completed else None),
        ("error", error and str(error)),
    ]
    width = max(len(name) for name, _ in fields) + 1
    for name, value in fields:
        text = _cell(value) if isinstance(value, datetime) or value in (None, "") else str(value)
        _out(f"{name + ':':<{width}} {text}")
    if error and error.traceback:
        _out("traceback:")
        for line in error.traceback.rstrip().splitlines():
            _out(f"  {line}")
    return EXIT_OK


def _jobs_cancel(app: App, args: argparse.Namespace) -> int:
    job = _require(app, args.id)
    outcome = app.cancel(job.id)
    if outcome is Cancellation.ALREADY_FINISHED:
        status = _require(app, args.id).status
        raise CommandError(f"job {job.id} ({job.task}) is already {status}; not cancelled")
    if outcome is Cancellation.REQUESTED:
        _out(f"job {job.id} ({job.task}) is running: cancellation requested")
    else:
        _out(f"job {job.id} ({job.task}) cancelled")
    return EXIT_OK


def _jobs_retry(app: App, args: argparse.Namespace) -> int:
    job = app.retry_job(_require(app, args.id).id)
    _out(f"job {job.id} ({job.task}) is pending again")
    return EXIT_OK


def _jobs_purge(app: App, args: argparse.Namespace) -> int:
    statuses = args.status or ["completed"]
    deleted = app.purge(status=statuses, older_than=args.older_than, task=args.task)
    _out(f"deleted {deleted} {'/'.join(statuses)} job(s)")
    return EXIT_OK


SCHEDULE_COLUMNS = {
    "ID": "id",
    "TASK": "task",
    "RULE": "rule",
    "TIMEZONE": "timezone",
    "STATUS": "status",
    "NEXT RUN (UTC)": "next_run",
    "LAST RUN (UTC)": "last_run",
    "LAST": "last_status",
}


def _schedules(app: App, args: argparse.Namespace) -> int:
    return _listing(
        args,
        app.schedules(),
        as_json=lambda row: row,
        empty="no schedules",
        headers=list(SCHEDULE_COLUMNS),
        row=lambda row: [row[key] for key in SCHEDULE_COLUMNS.values()],
    )


def _stats(app: App, args: argparse.Namespace) -> int:
    stats = app.stats()
    if args.bare_uri:  # a bare URI knows no tasks: every due task would look unknown
        stats.pop("unknown_tasks", None)
    if args.json:
        _print_json(stats)
        return EXIT_OK
    _print_stats(stats)
    return EXIT_OK


def _print_stats(stats: Mapping[str, Any]) -> None:
    by_task: dict[str, Mapping[str, int]] = {**dict(sorted(stats["by_task"].items()))}
    by_task["(all)"] = stats["totals"]
    _table(
        ["TASK", *(s.upper() for s in STATUSES)],
        ([task, *(counts.get(s, 0) for s in STATUSES)] for task, counts in by_task.items()),
    )
    oldest = stats["oldest_due"]
    _out()
    if oldest:
        _out(
            f"oldest due job: {oldest['id']} ({oldest['task']}), due {_cell(oldest['run_at'])} "
            f"UTC, {oldest['late_seconds']:.1f} s late"
        )
    else:
        _out("oldest due job: none")
    running = stats["running"]
    expired = sum(1 for r in running if r["expired"])
    _out(f"running: {len(running)}" + (f" ({expired} with an expired lease)" if expired else ""))
    if running:
        _table(
            ["ID", "TASK", "OWNER", "LEASE UNTIL (UTC)", "EXPIRED"],
            ([r["id"], r["task"], r["owner"], r["lease_until"], r["expired"]] for r in running),
        )
    offset = stats.get("clock_offset")
    if offset is not None:
        relation = "ahead of" if offset >= 0 else "behind"
        _out(f"clock: the server's is {abs(offset):.1f} s {relation} this host's")
    unknown = stats.get("unknown_tasks")
    if unknown:
        listed = ", ".join(f"{task} ({n})" for task, n in sorted(unknown.items()))
        _out(f"due jobs of tasks this app does not register: {listed}")


# Entry point ----------------------------------------------------------------------------
def _configure_logging(level: str) -> Callable[[], None]:
    """Send the ``mongosched`` logs to stderr at ``level``, unless logging is already set
    up (a framework, pytest); returns a function that undoes it."""
    previous = log.level
    handler: logging.Handler | None = None
    if not log.handlers and not logging.getLogger().handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        log.addHandler(handler)
    log.setLevel(level)

    def undo() -> None:
        log.setLevel(previous)
        if handler is not None:
            log.removeHandler(handler)

    return undo


def main(argv: Sequence[str] | None = None, *, app: App | None = None) -> int:
    """Run the command with ``argv`` (default ``sys.argv[1:]``); returns the exit code.

    Framework integrations pass their ``app``; then ``--app`` and ``--uri`` are not used.
    """
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # argparse: --help, --version (0) or a usage error (2)
        return exc.code if isinstance(exc.code, int) else EXIT_USAGE
    if getattr(args, "run", None) is None:
        parser.print_help(sys.stderr)
        return EXIT_USAGE
    level = args.log_level or ("INFO" if args.verb == "worker" else "WARNING")
    undo_logging = _configure_logging(level)
    chosen: App | None = None
    made_here = False
    try:
        chosen, made_here = _resolve_app(args, app)
        args.bare_uri = made_here
        check_connection(chosen, args.timeout or 3.0)
        code: int = args.run(chosen, args)
        return code
    except CommandError as exc:
        _err(str(exc))
        return exc.code
    except JobNotFound as exc:
        _err(str(exc))
        return EXIT_NOT_FOUND
    except (JobStateError, MongoschedError) as exc:
        _err(str(exc))
        return EXIT_FAILED
    except (ConnectionFailure, PyMongoConfigurationError) as exc:
        log.debug("database error", exc_info=True)
        _err(f"cannot connect: {_first_line(exc)}")
        return EXIT_CONNECT
    except PyMongoError as exc:
        log.debug("database error", exc_info=True)
        _err(f"database error: {_first_line(exc)}")
        return EXIT_FAILED
    except KeyboardInterrupt:
        _err("interrupted")
        return EXIT_INTERRUPTED
    finally:
        if made_here and chosen is not None:
            chosen.close()
        undo_logging()
