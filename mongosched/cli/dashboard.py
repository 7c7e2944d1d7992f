"""``mongosched dashboard``: serve the web dashboard of the app, guarded by a token.

::

    mongosched dashboard --uri mongodb://localhost/myapp --token "$TOKEN"
    MONGOSCHED_DASHBOARD_TOKEN=... mongosched dashboard --app myproject.tasks:app --port 9000

It binds ``127.0.0.1`` unless told otherwise, and refuses to start without a token.
The server is waitress or gunicorn where one is installed, else the standard library's
wsgiref with a thread per request; the log says which.
"""

from __future__ import annotations

import argparse
import logging
import os
from collections.abc import Callable

from mongosched.app import App
from mongosched.cli.exits import EXIT_USAGE, CommandError

__all__ = ["TOKEN_VARIABLE", "add_arguments", "run"]

log = logging.getLogger("mongosched")

TOKEN_VARIABLE = "MONGOSCHED_DASHBOARD_TOKEN"
SERVERS = ("auto", "waitress", "gunicorn", "wsgiref")


def add_arguments(parser: argparse.ArgumentParser, port: Callable[[str], int]) -> None:
    """The verb's options, on its parser (``port``: the type of a port number, a
    whole number from 0 to 65535 in ASCII digits)."""
    parser.add_argument(
        "--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1: this host)"
    )
    parser.add_argument("--port", type=port, default=8080, help="port (default 8080; 0: any)")
    parser.add_argument(
        "--token",
        metavar="T",
        help=f"the secret to sign in with (or the {TOKEN_VARIABLE} variable); required",
    )
    parser.add_argument(
        "--server",
        choices=SERVERS,
        default="auto",
        help="WSGI server (default auto: waitress, else gunicorn, else wsgiref)",
    )
    parser.add_argument("--title", default="mongosched", help="the name the pages show")
    parser.set_defaults(run=run)


def run(app: App, args: argparse.Namespace) -> int:
    """Serve until interrupted (Ctrl-C, SIGTERM); 0 once stopped."""
    from mongosched.dashboard import StandaloneDashboard, make_server_for

    token = args.token or os.environ.get(TOKEN_VARIABLE) or ""
    if not token.strip():
        raise CommandError(
            f"dashboard needs a token: --token T or the {TOKEN_VARIABLE} variable "
            "(it refuses to serve job data to anyone who asks)",
            EXIT_USAGE,
        )
    wsgi = StandaloneDashboard(app, token, title=args.title)
    try:
        server = make_server_for(wsgi, args.host, args.port, server=args.server)
    except ImportError as exc:
        raise CommandError(f"--server {args.server}: {exc}", EXIT_USAGE) from None
    except OSError as exc:
        raise CommandError(f"cannot listen on {args.host}:{args.port}: {exc}", 1) from None
    if args.host not in ("127.0.0.1", "localhost", "::1"):
        log.warning(
            "dashboard: listening on %s, beyond this host: serve it behind https", args.host
        )
    log.info("dashboard: serving %s with %s", server.url, server.name)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    except SystemExit as exc:  # gunicorn's arbiter exits when it stops
        return exc.code if isinstance(exc.code, int) else 0
    log.info("dashboard: stopped")
    return 0
