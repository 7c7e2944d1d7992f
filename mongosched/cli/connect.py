"""Which :class:`~mongosched.App` the command works on, and whether its store answers.

The app comes from ``--app MODULE:APP`` (or ``MONGOSCHED_APP``), from ``--uri URI``
(or ``MONGOSCHED_URI``), or from the framework integration that runs the command.
Nothing here talks to a database driver: the connection is checked through the store.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import re
import sys
from typing import Any

from mongosched._core.records import JobQuery, JobStatus
from mongosched.app import App
from mongosched.cli.exits import EXIT_CONNECT, EXIT_USAGE, CommandError
from mongosched.cli.output import gist
from mongosched.errors import ConfigurationError, StoreError, StoreUnavailable
from mongosched.store import Store, in_process

__all__ = [
    "check_connection",
    "load_app",
    "redact",
    "refuse_in_process",
    "resolve_app",
    "with_options",
]

log = logging.getLogger("mongosched")

MONGODB_SCHEMES = ("mongodb", "mongodb+srv")


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
            f"app path {path!r} names a {type(target).__name__}, not a mongosched App"
            + _instead(target, module_name, attribute or "app"),
            EXIT_CONNECT,
        )
    return target


def _instead(target: object, module: str, attribute: str) -> str:
    """What to run instead, for an app path naming a framework's extension (Flask's
    ``MongoSched``) rather than its App."""
    kind = type(target)
    if kind.__module__ != "mongosched.contrib.flask" or kind.__name__ != "MongoSched":
        return ""
    return (
        f": for a Flask app, run `flask --app {module} mongosched worker`, "
        f"or, where the module makes its Flask app on import, {module}:{attribute}.app"
    )


def redact(uri: str) -> str:
    """``uri`` without its password (or whatever precedes the ``@``)."""
    return re.sub(r"//[^@/]*@", "//***@", uri)


def resolve_app(args: argparse.Namespace, given: App | None) -> tuple[App, bool]:
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
        # The message may quote the URI as given: never print its password.
        message = str(exc).removeprefix("App: ").replace(uri, redact(uri))
        raise CommandError(f"{message} ({redact(uri)})", EXIT_CONNECT) from None


def refuse_in_process(app: App, verb: str, prog: str) -> None:
    """Refuse an app on ``memory://`` in a command that is its process's program: the
    store would be this process's own, empty (what another process scheduled is not in
    it), and what the command changes would vanish when it exits."""
    if in_process(app.uri):
        raise CommandError(
            f"memory:// is the in-process store of one process (demos, tests): "
            f"'{prog} {verb}' runs in a process of its own, with an empty store of its own: "
            "it would never see the jobs scheduled elsewhere, and what it changes would "
            "vanish when it exits; give the app a MongoDB URI (mongodb://localhost/myapp) "
            "in every process, or run jobs in the process that schedules them "
            "(app.start_runner())",
            EXIT_CONNECT,
        )


def check_connection(app: App, timeout: float) -> None:
    """Fail fast (exit 4) when the app's store cannot be reached: within ``timeout``
    seconds for a store named by a MongoDB URI; by the client's own timeouts for an app
    made on a database object. An in-process store always answers."""
    probe = _probe(app, timeout)
    try:
        # A cheap read through an index (running jobs are few), which also checks that
        # the credentials may read the jobs.
        probe.jobs.count(JobQuery(statuses=(JobStatus.RUNNING,)))
    except StoreUnavailable as exc:  # it says where, for how long, and what to check
        log.debug("connection check failed", exc_info=True)
        raise CommandError(gist(exc), EXIT_CONNECT) from None
    except StoreError as exc:
        log.debug("connection check failed", exc_info=True)
        where = redact(app.uri) if app.uri else "the database"
        raise CommandError(f"cannot use {where}: {gist(exc)}", EXIT_CONNECT) from None
    finally:
        if probe is not app.store:
            probe.close()


def _probe(app: App, timeout: float) -> Store:
    """The store to check: for a MongoDB URI, a second store on the same URI and
    collection that gives up after ``timeout`` (the app's own client waits for pymongo's
    default server selection timeout, and its store retries); else the app's store."""
    uri = app.uri
    if uri is None or uri.partition("://")[0].lower() not in MONGODB_SCHEMES:
        return app.store
    from mongosched.store.mongo import MongoStore

    store = app.store
    if not isinstance(store, MongoStore):  # pragma: no cover - open_store made it from uri
        return store
    ms = max(1, round(timeout * 1000))
    return MongoStore(
        uri=with_options(uri, serverSelectionTimeoutMS=ms, connectTimeoutMS=ms),
        collection=store.connection.collection_name,
        write_concern=None,
        retries=0,
    )


def with_options(uri: str, **options: Any) -> str:
    """A MongoDB ``uri`` with URI ``options`` set (replacing those of the same names,
    which MongoDB compares case-insensitively); its other options are kept as written."""
    base, _, query = uri.partition("?")
    separator = ";" if ";" in query and "&" not in query else "&"
    names = {name.lower() for name in options}
    kept = [
        item
        for item in re.split(r"[&;]", query)
        if item and item.partition("=")[0].lower() not in names
    ]
    return base + "?" + separator.join(kept + [f"{k}={v}" for k, v in options.items()])
