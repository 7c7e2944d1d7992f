"""Framework integrations: :mod:`mongosched.contrib.django` and :mod:`mongosched.contrib.flask`.

They only translate a framework's settings into an :class:`~mongosched.App`, find the
project's tasks, start an in-process runner where asked, and expose the ``mongosched``
command inside the framework's own command line. The scheduling itself is the core's.

This module holds what both share; it imports neither framework.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from mongosched._core import validate
from mongosched.app import App
from mongosched.errors import ConfigurationError

__all__ = [
    "APP_OPTIONS",
    "app_from_settings",
    "positive_int",
    "queue_list",
    "run_cli",
    "with_database",
]

APP_OPTIONS: dict[str, str] = {
    "COLLECTION": "collection",
    "LEASE_DURATION": "lease_duration",
    "POLL_INTERVAL": "poll_interval",
    "QUEUES": "queues",
    "KEEP_COMPLETED": "keep_completed",
    "KEEP_FAILED": "keep_failed",
    "WRITE_CONCERN": "write_concern",
    "CONNECT_TIMEOUT": "connect_timeout",
    "EAGER": "eager",
    "CLOCK": "clock",
    "WAKE": "wake",
}
"""Setting names (upper case, as both frameworks spell settings) → :class:`App` keywords."""

INTEGRATION_OPTIONS = frozenset({"URI", "DATABASE", "WORKERS", "RUN_IN_PROCESS"})

MEMORY_SCHEME = "memory"
URI_HINT = "mongodb://host/dbname, or memory:// for tests and demos"


def with_database(uri: str, name: str) -> str:
    """``uri`` with its database path replaced by ``name`` (options kept):
    ``with_database("mongodb://h1,h2/?replicaSet=rs", "shop")`` is
    ``"mongodb://h1,h2/shop?replicaSet=rs"``. A ``memory://`` store has no databases:
    ``name`` names the in-process store instead (``memory://shop``)."""
    if not isinstance(name, str) or not name or "/" in name:
        raise ConfigurationError(f"DATABASE must be a database name, not {name!r}")
    scheme, sep, rest = uri.partition("://")
    if not sep:
        raise ConfigurationError(
            f"URI must look like mongodb://host/dbname (or memory://), not {uri!r}"
        )
    if scheme.lower() == MEMORY_SCHEME:
        return f"{scheme}://{name}"
    rest, qmark, query = rest.partition("?")
    hosts = rest.split("/", 1)[0]
    return f"{scheme}://{hosts}/{name}{qmark}{query}"


def app_from_settings(
    settings: Mapping[str, Any],
    *,
    where: str,
    ignore: Sequence[str] = (),
) -> App:
    """An :class:`App` from a settings mapping with upper-case keys.

    ``URI`` names the server (and usually the database), or is ``memory://[name]`` for
    the in-process store (tests and demos); ``DATABASE`` is a database name that
    replaces the URI's (the store's name for ``memory://``), or a
    :class:`pymongo.database.Database` to use as it is (then no ``URI``). The keys of
    :data:`APP_OPTIONS` become the App's options.
    ``where`` names the settings in error messages (``"MONGOSCHED"``,
    ``"MONGOSCHED_*"``); keys in ``ignore`` are the caller's own.
    """
    known = set(APP_OPTIONS) | INTEGRATION_OPTIONS | set(ignore)
    validate.known_names(settings, known, what=f"{where}: unknown setting")
    options = {APP_OPTIONS[key]: value for key, value in settings.items() if key in APP_OPTIONS}
    if "queues" in options:
        options["queues"] = queue_list(options["queues"], what=f"{where}: QUEUES")
    uri = settings.get("URI")
    database = settings.get("DATABASE")
    if uri is not None and not isinstance(uri, str):
        raise ConfigurationError(f"{where}: URI must be a str, not {type(uri).__name__}")
    if database is not None and not isinstance(database, str):
        if uri is not None:
            raise ConfigurationError(
                f"{where}: give URI or a Database object as DATABASE, not both"
            )
        try:
            return App(database=database, **options)
        except ConfigurationError as exc:
            raise ConfigurationError(f"{where}: {exc}") from None
    if uri is None:
        raise ConfigurationError(f"{where}: set URI ({URI_HINT})")
    if uri.partition("://")[0].lower() == "mongomock":
        raise ConfigurationError(
            f"{where}: URI mongomock:// is no longer supported: use memory:// "
            "(the in-process store, for tests and demos)"
        )
    if database is not None:
        uri = with_database(uri, database)
    try:
        return App(uri, **options)
    except ConfigurationError as exc:
        raise ConfigurationError(f"{where}: {exc}") from None


def positive_int(value: Any, *, what: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ConfigurationError(f"{what} must be an int >= 1, not {value!r}")
    return value


def queue_list(value: Any, *, what: str) -> list[str] | None:
    if value is None:
        return None
    if isinstance(value, str):
        return [q.strip() for q in value.split(",") if q.strip()]
    if isinstance(value, Sequence):
        return [str(q) for q in value]
    raise ConfigurationError(f"{what} must be a list of queue names, not {value!r}")


def run_cli(args: Sequence[str], app: App, *, prog: str, workers: int, own_process: bool) -> int:
    """Run the ``mongosched`` command for ``app`` as the framework's command ``prog``,
    with its configured ``workers`` as the default of ``worker --workers`` (imported
    here: the command line is loaded only when a framework command runs it).
    ``own_process``: the framework runs it as its process's program (see
    :func:`mongosched.cli.main`)."""
    from mongosched.cli import main as cli_main

    main: Callable[..., int] = cli_main
    return main(list(args), app=app, prog=prog, workers=workers, own_process=own_process)
