"""The command line of ``mongosched``: verbs, options and the types of their values."""

from __future__ import annotations

import argparse
import functools
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from typing import Any, TypeVar

from mongosched import __version__
from mongosched._core import validate
from mongosched._core.records import JobStatus
from mongosched.cli import dashboard, verbs, workflows
from mongosched.cli.parser_ops import OPERATION_VERBS, add_operation_verbs
from mongosched.errors import ConfigurationError, OutOfBounds
from mongosched.runner.watcher import WAKE_MODES

__all__ = [
    "EXIT_CODES",
    "EXIT_CODES_HELP",
    "VERBS",
    "build_parser",
    "parse_duration",
    "parse_when",
]

EXIT_CODES = """\
exit codes:
  0    done
  1    operation failed, or the job is in the wrong state for it
  2    usage error
  3    not found (no job has that id)
  4    cannot connect: bad URI (memory:// too: one process's own store),
       unreachable server, or an app path that does not import or does not
       name a mongosched App
  130  interrupted (worker instead stops gracefully on SIGINT/SIGTERM: 0)
  141  its output was closed early (| head): nothing more printed
"""
EXIT_CODES_HELP = (
    EXIT_CODES
    + """
environment:
  MONGOSCHED_APP  default for --app      MONGOSCHED_URI  default for --uri
  MONGOSCHED_DASHBOARD_TOKEN  default for dashboard --token
"""
)

VERBS = {
    "worker": "run a runner until SIGTERM or SIGINT (then stop gracefully)",
    "jobs": "list, show, cancel, retry or purge jobs",
    "workflows": "show a workflow's timeline; cancel, retry or fork it",
    "schedules": "list repeating jobs (cron and interval)",
    "stats": "counts by task and status, lateness, running leases",
    "ping": "check the database answers (exit 0, or 4): for probes",
    **OPERATION_VERBS,
    "dashboard": "serve the web dashboard (needs a token; binds 127.0.0.1 by default)",
}
"""The verbs and what each does (the command's help, and the frameworks' commands')."""

T = TypeVar("T")

FINAL = [s.value for s in JobStatus if s.is_final]


VALUE = "value"
"""What the checks of a value given on the command line call it (argparse names the
option instead: ``argument --limit: must be ...``)."""


def _checked(parse: Callable[[str], T]) -> Callable[[str], T]:
    """An argparse type from a check of :mod:`mongosched._core.validate`: its refusal
    (which names the bound) becomes a usage error, about the option."""

    @functools.wraps(parse)
    def checked(text: str) -> T:
        try:
            return parse(text)
        except ConfigurationError as exc:
            message = str(exc).removeprefix(f"{VALUE}: ").removeprefix(f"{VALUE} ")
            raise argparse.ArgumentTypeError(message) from None

    return checked


@_checked
def parse_duration(text: str) -> timedelta:
    """``30s``, ``15m``, ``12h``, ``7d``, ``2w`` (a bare number is seconds), at most a
    century."""
    return validate.parse_duration(text, what=VALUE)


@_checked
def parse_when(text: str) -> datetime | timedelta:
    """A duration ago (``30m``, ``2h``, ``7d``) or an ISO 8601 time (UTC unless it says
    otherwise), within the bounds of :mod:`mongosched._core.validate`."""
    if validate.is_duration(text):
        return validate.parse_duration(text, what=VALUE)
    try:
        return validate.parse_time(text, what=VALUE)
    except OutOfBounds:
        raise
    except ConfigurationError:
        raise argparse.ArgumentTypeError(
            f"invalid time {text!r:.40}: give a duration ago (30m, 2h, 7d) or an ISO 8601 "
            "time (2026-11-23T10:00Z)"
        ) from None


def _number(kind: Callable[[str], float], *, minimum: float, strict: bool) -> Callable[[str], Any]:
    """An argparse type: a ``kind`` (int: a bounded count; float: seconds, at most a
    century) above ``minimum`` (or at it, unless ``strict``)."""
    if kind is int:
        return _checked(lambda text: validate.parse_whole(text, what=VALUE, minimum=int(minimum)))
    bound = f"{'>' if strict else '>='} {minimum:g}"

    @_checked
    def parse(text: str) -> Any:
        try:
            value = kind(text) if text.isascii() else None  # not float("١")
        except ValueError:
            value = None
        # Written so that NaN fails too: it compares false with everything.
        if value is None or not (value > minimum or (not strict and value == minimum)):
            raise argparse.ArgumentTypeError(f"must be a number {bound}, not {text!r}")
        return validate.seconds(value, what=VALUE)

    return parse


_positive_int = _number(int, minimum=1, strict=False)
_non_negative_int = _number(int, minimum=0, strict=False)
_positive_float = _number(float, minimum=0, strict=True)
_priority = _checked(lambda text: validate.parse_whole(text, what=VALUE, maximum=10))
_port = _checked(lambda text: validate.parse_whole(text, what=VALUE, minimum=0, maximum=65535))


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


def _connection_options(defaults: bool, choose_app: bool) -> argparse.ArgumentParser:
    """Options accepted before and after the verb. After it, they are SUPPRESSed unless
    given, so they do not overwrite what was given before it. Without ``choose_app``
    (the app is given), the options that choose one are left out of the help (and
    refused with a clear error, by :func:`~mongosched.cli.connect.resolve_app`)."""
    parser = argparse.ArgumentParser(
        add_help=False, argument_default=None if defaults else argparse.SUPPRESS
    )
    group = parser.add_argument_group("connection")

    def shown(text: str) -> str:
        return text if choose_app else argparse.SUPPRESS

    group.add_argument(
        "--app", metavar="MODULE:APP", help=shown("the App to use, e.g. myproject.tasks:app")
    )
    group.add_argument(
        "--uri", metavar="URI", help=shown("instead of --app: a MongoDB URI naming the database")
    )
    group.add_argument(
        "--collection",
        metavar="NAME",
        help=shown("job collection, with --uri (default mongosched_jobs)"),
    )
    group.add_argument(
        "--timeout",
        type=_positive_float,
        metavar="S",
        help="seconds to wait for the server before giving up (default 3; worker: "
        "waits until it answers, logging, unless this is given)",
    )
    group.add_argument(
        "--log-level",
        metavar="LEVEL",
        type=str.upper,
        choices=["DEBUG", "INFO", "WARNING", "ERROR"],
        help="debug, info, warning or error (default: info for worker and dashboard, else warning)",
    )
    return parser


def build_parser(
    *, prog: str = "mongosched", choose_app: bool = True, workers: int = 4
) -> argparse.ArgumentParser:
    """The command's argument parser. Each verb's parser sets ``run``: the function of
    :mod:`~mongosched.cli.verbs` that carries it out.

    A framework's command (``manage.py mongosched``, ``flask mongosched``) passes its
    ``prog``, ``choose_app=False`` (its app is the project's: the help shows no
    ``--app``, ``--uri``, ``--collection`` nor ``worker MODULE:APP``) and its configured
    ``workers``, the default of ``worker --workers``: the help shows what applies.
    """
    common = _connection_options(defaults=False, choose_app=choose_app)
    formatter = argparse.RawDescriptionHelpFormatter
    epilog = EXIT_CODES_HELP if choose_app else EXIT_CODES
    parser = argparse.ArgumentParser(
        prog=prog,
        description="Run mongosched runners and inspect or change jobs.",
        epilog=epilog,
        formatter_class=formatter,
        parents=[_connection_options(defaults=True, choose_app=choose_app)],
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    commands = parser.add_subparsers(dest="verb", metavar="VERB")

    def verb(group: Any, name: str, help: str) -> argparse.ArgumentParser:
        sub: argparse.ArgumentParser = group.add_parser(
            name,
            help=help,
            description=help,
            parents=[common],
            epilog=epilog,
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

    worker = verb(commands, "worker", VERBS["worker"])
    worker.add_argument(
        "app_path",
        nargs="?",
        metavar="MODULE:APP",
        help="the App to run" if choose_app else argparse.SUPPRESS,
    )
    worker.add_argument(
        "--workers",
        type=_positive_int,
        default=workers,
        metavar="N",
        help=f"the runner's worker threads (default {workers})",
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
    worker.add_argument(
        "--wake",
        choices=WAKE_MODES,
        help="how an idle runner hears of new jobs: a change stream (auto: when the server "
        "is a replica set) or polling (default: the app's)",
    )
    worker.add_argument(
        "--processes",
        type=_positive_int,
        default=1,
        metavar="N",
        help="processes, each with a runner of --workers threads, under one supervisor "
        "that restarts any that dies (default 1: this process runs the runner itself)",
    )
    worker.add_argument(
        "--shutdown-timeout",
        type=_positive_float,
        default=30.0,
        metavar="S",
        help="seconds jobs in flight get to finish after SIGTERM/SIGINT (default 30)",
    )
    worker.add_argument(
        "--metrics-port",
        type=_port,
        metavar="N",
        help="serve Prometheus metrics at http://HOST:N/metrics (with --processes, "
        "process i of N serves port N+i)",
    )
    worker.add_argument(
        "--metrics-host",
        default="0.0.0.0",
        metavar="HOST",
        help="address the metrics endpoint binds (default 0.0.0.0: every interface)",
    )
    worker.add_argument(
        "--task-logs",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="print what tasks log, at --log-level, with the runner's own lines (they "
        "are kept with each job either way; default: on; --no-task-logs: only the "
        "runner's own lines)",
    )
    worker.set_defaults(run=verbs.worker)

    jobs = verb(commands, "jobs", VERBS["jobs"])
    actions = jobs.add_subparsers(dest="action", metavar="ACTION", required=True)
    listing = verb(actions, "list", "list jobs, most recently updated first")
    status_option(listing, verbs.STATUSES, "only these statuses")
    listing.add_argument("--task", metavar="NAME", help="only jobs of this task")
    listing.add_argument(
        "--label", metavar="NAME", help="only jobs with this label (a Django task's path)"
    )
    listing.add_argument("--queue", metavar="Q", help="only jobs in this queue")
    listing.add_argument(
        "--limit", type=_non_negative_int, default=50, metavar="N", help="(default 50; 0: all)"
    )
    json_flag(listing)
    listing.set_defaults(run=verbs.jobs_list)
    show = verb(actions, "show", "show one job")
    show.add_argument("id", metavar="ID")
    json_flag(show)
    show.set_defaults(run=verbs.jobs_show)
    cancel = verb(actions, "cancel", "cancel a job (a running one at its next heartbeat)")
    cancel.add_argument("id", metavar="ID")
    cancel.set_defaults(run=verbs.jobs_cancel)
    retry = verb(actions, "retry", "run a failed, cancelled or expired job again")
    retry.add_argument("id", metavar="ID")
    retry.set_defaults(run=verbs.jobs_retry)
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
    purge.set_defaults(run=verbs.jobs_purge)

    workflows.add_arguments(
        verb(commands, "workflows", VERBS["workflows"]), verb, json_flag, _non_negative_int
    )
    schedules = verb(commands, "schedules", VERBS["schedules"])
    json_flag(schedules)
    schedules.set_defaults(run=verbs.schedules)
    stats = verb(commands, "stats", VERBS["stats"])
    json_flag(stats)
    stats.set_defaults(run=verbs.stats)
    ping = verb(commands, "ping", VERBS["ping"])
    json_flag(ping)
    ping.set_defaults(run=verbs.ping)
    add_operation_verbs(
        commands,
        verb,
        status_option,
        json_flag,
        {
            "positive_int": _positive_int,
            "priority": _priority,
            "duration": parse_duration,
            "when": parse_when,
        },
    )
    dashboard.add_arguments(verb(commands, "dashboard", VERBS["dashboard"]), _port)
    return parser
