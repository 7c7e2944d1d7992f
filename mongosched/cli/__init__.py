"""The ``mongosched`` command.

Usage::

    mongosched worker MODULE:APP [--workers N] [--queues a,b] [--processes N]
                      [--lease-duration S] [--poll-interval S] [--shutdown-timeout S]
    mongosched [--app MODULE:APP | --uri URI] jobs list [--status S ...] [--task NAME]
                                                  [--queue Q] [--limit N] [--json]
    mongosched [--app MODULE:APP | --uri URI] jobs show ID [--json]
    mongosched [--app MODULE:APP | --uri URI] jobs cancel ID
    mongosched [--app MODULE:APP | --uri URI] jobs retry ID
    mongosched [--app MODULE:APP | --uri URI] jobs purge --older-than 7d [--status completed]
    mongosched [--app MODULE:APP | --uri URI] schedules [--json]
    mongosched [--app MODULE:APP | --uri URI] stats [--json]
    mongosched [--app MODULE:APP | --uri URI] ping [--json]
    mongosched [--app MODULE:APP | --uri URI] dashboard --token T [--host H] [--port N]

``--app`` and ``--uri`` may also come from the environment (``MONGOSCHED_APP``,
``MONGOSCHED_URI``) and may be given after the verb. A URI (``mongodb://host/dbname``)
is enough for every verb but ``worker``, which needs the app that registers the tasks.
Durations are a number with a unit: ``30s``, ``15m``, ``12h``, ``7d``, ``2w``.

Exit codes:

* 0: done.
* 1: the operation failed, or the job is in the wrong state for it (retrying a pending
  job, cancelling a finished one).
* 2: usage error (unknown verb or option, bad value).
* 3: not found: no job has that id (or what was given is not a job id).
* 4: cannot connect: bad URI (``memory://`` too: one process's own store),
  unreachable server, or an app path that does not import or does not name a
  :class:`~mongosched.App`.
* 130: interrupted by Ctrl-C (``worker`` instead stops gracefully on SIGINT or SIGTERM
  and exits 0).
* 141: its output was closed before it was all written (``mongosched jobs show ID |
  head -2``), as for a program ended by SIGPIPE: nothing more is printed.

Errors are one line on stderr, ``mongosched: error: ...``; ``--log-level debug`` adds
the traceback where there is one. A value beyond its bound (a count, a text, a time, a
duration: :class:`~mongosched.errors.OutOfBounds`) is a usage error, whether the parser
or the operation finds it. Text output escapes control characters (an escape sequence
in a job's error or logs, or in an actor's name, is shown, not played by the terminal).

The command is a package: :mod:`.parser` (options), :mod:`.connect` (which app, and
whether its store answers), :mod:`.verbs` (what each verb does), :mod:`.output`
(tables and JSON) and :mod:`.exits` (exit codes); this module runs them.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Callable, Sequence

from mongosched.app import App
from mongosched.cli.connect import check_connection, load_app, refuse_in_process, resolve_app
from mongosched.cli.exits import (
    EXIT_CONNECT,
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_NOT_FOUND,
    EXIT_PIPE,
    EXIT_USAGE,
    CommandError,
)
from mongosched.cli.output import error, gist
from mongosched.cli.parser import build_parser, parse_duration
from mongosched.errors import (
    JobNotFound,
    MongoschedError,
    OutOfBounds,
    StoreError,
    StoreUnavailable,
)
from mongosched.operations.audit import local_actor

__all__ = ["build_parser", "check_connection", "load_app", "main", "parse_duration"]

log = logging.getLogger("mongosched")


def _configure_logging(level: str, tasks: bool | None = None) -> Callable[[], None]:
    """Send the ``mongosched`` logs to stderr at ``level``, unless logging is already set
    up (a framework, pytest); returns a function that undoes it. For ``worker``
    (``tasks`` not None) every logger logs at ``level``, so that what its tasks log is
    kept with their jobs, and, with ``tasks``, printed too."""
    root = logging.getLogger()
    target = root if tasks else log
    previous = (log.level, root.level)
    handler: logging.Handler | None = None
    if not log.handlers and not root.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        target.addHandler(handler)
        if tasks is not None:
            root.setLevel(level)
    log.setLevel(level)

    def undo() -> None:
        log.setLevel(previous[0])
        root.setLevel(previous[1])
        if handler is not None:
            target.removeHandler(handler)

    return undo


def main(
    argv: Sequence[str] | None = None,
    *,
    app: App | None = None,
    prog: str = "mongosched",
    workers: int = 4,
    own_process: bool | None = None,
) -> int:
    """Run the command with ``argv`` (default ``sys.argv[1:]``); returns the exit code.

    Framework integrations pass their ``app`` (then ``--app``, ``--uri``,
    ``--collection`` and ``worker MODULE:APP`` are refused, and not in the help), the
    name of their command (``prog``, for the help and errors) and their configured
    ``workers`` (the default of ``worker --workers``).

    ``own_process``: the command is the program of its process (default: when it
    reads ``sys.argv``), so a ``memory://`` store would be one of its own, empty, and
    gone when it exits: every verb refuses one. A call from inside the process that
    holds the store (a test) passes False, or gives ``argv``.
    """
    parser = build_parser(prog=prog, choose_app=app is None, workers=workers)
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # argparse: --help, --version (0) or a usage error (2)
        return exc.code if isinstance(exc.code, int) else EXIT_USAGE
    if getattr(args, "run", None) is None:
        parser.print_help(sys.stderr)
        return EXIT_USAGE
    args.argv = list(sys.argv[1:] if argv is None else argv)
    args.framework = app is not None
    level = args.log_level or ("INFO" if args.verb in ("worker", "dashboard") else "WARNING")
    undo_logging = _configure_logging(level, getattr(args, "task_logs", None))
    chosen: App | None = None
    made_here = False
    try:
        chosen, made_here = resolve_app(args, app)
        args.bare_uri = made_here
        if own_process if own_process is not None else argv is None:
            refuse_in_process(chosen, args.verb, prog)
        if args.verb != "worker" or args.timeout is not None:
            # ``worker`` often starts before its database: it waits (the runner's
            # backoff, logged), unless --timeout says how long.
            check_connection(chosen, args.timeout or 3.0)
        with chosen.audit.acting(local_actor(), "cli"):  # who runs an operator's verb
            code: int = args.run(chosen, args)
        sys.stdout.flush()  # a closed pipe is found here, not at the interpreter's exit
        return code
    except BrokenPipeError:
        # The reader went away (``| head``): print nothing more, and leave nothing for
        # the interpreter to flush at exit into the closed pipe.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_PIPE
    except CommandError as exc:
        error(str(exc))
        return exc.code
    except JobNotFound as exc:  # also InvalidJobId: what was given is not a job id
        error(str(exc))
        return EXIT_NOT_FOUND
    except StoreUnavailable as exc:  # it says what was tried and what to check
        log.debug("database error", exc_info=True)
        error(gist(exc))
        return EXIT_CONNECT
    except StoreError as exc:  # "MongoDB refused a request (...): ..."
        log.debug("database error", exc_info=True)
        error(gist(exc))
        return EXIT_FAILED
    except OutOfBounds as exc:  # a value given beyond its bound: a usage error
        error(str(exc))
        return EXIT_USAGE
    except MongoschedError as exc:  # JobStateError, ConfigurationError, ...
        error(str(exc))
        return EXIT_FAILED
    except KeyboardInterrupt:
        error("interrupted")
        return EXIT_INTERRUPTED
    finally:
        if made_here and chosen is not None:
            chosen.close()
        undo_logging()
