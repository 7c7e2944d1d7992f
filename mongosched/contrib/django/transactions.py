"""Jobs in the transactions of a Django project whose database is MongoDB
(``django-mongodb-backend``): with ``MONGOSCHED = {"DJANGO_DATABASE": "default"}``
the shared App uses that database's client (no second URI, one connection pool), and

* a job scheduled inside ``django_mongodb_backend.transaction.atomic()`` joins the
  connection's session (``connection.session``) without being told: it commits or
  rolls back with the ORM's writes, and its events follow the commit
  (``connection.on_commit``);
* in a ``transactional=True`` task, the ORM's writes join the task's transaction:
  the connection's session is the task's while its function runs (as inside
  ``atomic()``), and what the function gave ``transaction.on_commit`` runs after the
  task's commit.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from django.core.exceptions import ImproperlyConfigured
from django.db import connections

from mongosched.transaction import Transaction

if TYPE_CHECKING:
    from mongosched.app import App

__all__ = ["AtomicBlocks", "database_of"]


def database_of(alias: str) -> Any:
    """The pymongo ``Database`` of the Django database ``alias``, which must be a
    MongoDB one."""
    if alias not in connections:
        raise ImproperlyConfigured(
            f"settings.MONGOSCHED['DJANGO_DATABASE']: no database {alias!r} in DATABASES"
        )
    connection = connections[alias]
    if connection.vendor != "mongodb":
        raise ImproperlyConfigured(
            f"settings.MONGOSCHED['DJANGO_DATABASE']: database {alias!r} is "
            f"{connection.vendor}, not MongoDB (django-mongodb-backend); on a SQL database "
            "set URI instead, and schedule in transaction.on_commit (see the transactions docs)"
        )
    return connection.database


class AtomicBlocks:
    """The transactions of ``django_mongodb_backend.transaction.atomic()`` on the
    database ``alias`` (a :class:`~mongosched.transaction.TransactionIntegration`)."""

    def __init__(self, alias: str, app: Callable[[], App]) -> None:
        self.alias = alias
        self.app = app
        """The project's App, when asked (the shared one, whatever settings it follows)."""

    def current(self) -> Transaction | None:
        connection = connections[self.alias]
        session = getattr(connection, "session", None)
        if session is None or not getattr(connection, "in_atomic_block_mongo", False):
            return None
        return self.app().joined(session, on_commit=connection.on_commit)

    @contextlib.contextmanager
    def bind(self, transaction: Transaction) -> Iterator[None]:
        connection = connections[self.alias]
        if transaction.session is None or getattr(connection, "session", None) is not None:
            yield  # memory://, or already in a block of its own: left as it is
            return
        connection.ensure_connection()
        connection.session, connection.in_atomic_block_mongo = transaction.session, True
        try:
            yield
        finally:
            hooks, connection.run_on_commit = connection.run_on_commit, []
            connection.session, connection.in_atomic_block_mongo = None, False
            for _savepoints, callback, _robust in hooks:
                transaction.on_commit(callback)
