"""The audit trail: every operator action (retry, cancel, delete, purge, edit, pause,
resume, schedule edit, trigger, backfill; through the API, the CLI or the dashboard)
kept with who did it, through what, on how many jobs and when, for as long as the
app's ``keep_audit`` says (the store deletes older entries: a TTL index on MongoDB).

:class:`AuditTrail` (``app.audit``) is the one entry point: the operations call
:meth:`AuditTrail.record` once their write is done, and so may any new operation. Who
acted comes from the operation's ``actor=`` argument, else from the front end that
runs it (:meth:`AuditTrail.acting`: the CLI names the user and host, the dashboard
its signed-in user), else from this process (``user@host``, through ``api``); each
entry also keeps how the actor was known (``known_by``: the argument, the process's
user, a token, a Basic-auth user name, the host framework's user).
"""

from __future__ import annotations

import contextvars
import getpass
import logging
import os
import socket
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta
from typing import Any

from mongosched._core import validate
from mongosched._core.records import AuditEntry
from mongosched.errors import StoreError
from mongosched.store import Store

__all__ = ["ARGUMENT", "PROCESS_USER", "AuditTrail", "local_actor"]

log = logging.getLogger("mongosched")

ARGUMENT = "argument"
"""How an actor given as the operation's ``actor=`` is known."""
PROCESS_USER = "process user"
"""How this process's ``user@host`` is known (the API's and the command's default)."""

_acting: contextvars.ContextVar[tuple[str, str, str] | None] = contextvars.ContextVar(
    "mongosched_acting", default=None
)


def local_actor() -> str:
    """This process's user and host, as ``user@host``."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):  # no name for this uid (a container)
        user = f"uid {os.getuid()}" if hasattr(os, "getuid") else "unknown"
    return f"{user}@{socket.gethostname()}"


class AuditTrail:
    """The audit trail of an app (``app.audit``; see the module).

    :param store: where the entries are kept.
    :param now: the app's clock.
    :param keep: how long entries are kept (None: for good).
    """

    def __init__(
        self, store: Store, *, now: Callable[[], datetime], keep: timedelta | None
    ) -> None:
        self.store = store
        self.now = now
        self.keep = keep

    def record(
        self,
        action: str,
        target: str,
        *,
        count: int | None = None,
        detail: str | None = None,
        actor: str | None = None,
        job: Any = None,
    ) -> AuditEntry:
        """Keep that ``action`` was done to ``target``, on ``count`` jobs (None where it
        does not apply), by ``actor`` (default: as :meth:`acting` says, else this
        process's ``user@host``); ``job``: the id of the one job it was done to, which
        links the entry and the job both ways (:meth:`entries`, the dashboard). Returns
        the entry kept. An entry the store cannot write is logged at ERROR, not raised:
        the action it records is done."""
        acting = _acting.get()
        who = checked_actor(actor, action)
        if who is not None:
            known_by = ARGUMENT
        elif acting is not None:
            who, known_by = acting[0], acting[2]
        else:
            who, known_by = local_actor(), PROCESS_USER
        via = acting[1] if acting is not None else "api"
        now = self.now()
        entry = AuditEntry(now, who, via, action, target, count, detail, job, known_by)
        try:
            self.store.admin.record_audit(entry, None if self.keep is None else now + self.keep)
        except StoreError as exc:
            log.error("audit: could not record %s of %s by %s: %s", action, target, who, exc)
        return entry

    def entries(self, *, limit: int = 100, job: Any = None) -> list[AuditEntry]:
        """The entries kept, newest first (``limit=0``: all of them); with ``job``, only
        those of that one job (by its id)."""
        validate.whole(limit, what="audit entries: limit", minimum=0)
        return self.store.admin.audit_entries(self.now(), limit, job)

    @contextmanager
    def acting(self, actor: str, via: str, *, known_by: str = PROCESS_USER) -> Iterator[None]:
        """Within the block, in this thread, actions are recorded as done by ``actor``
        through ``via`` (``cli``, ``dashboard``, ...), known by ``known_by`` (how the
        front end knows who acts: ``process user``, ``basic auth``, ``django user``...),
        unless they name an actor."""
        for value, name in ((actor, "actor"), (via, "via"), (known_by, "known_by")):
            validate.text(value, what=f"audit: {name}")
        token = _acting.set((actor, via, known_by))
        try:
            yield
        finally:
            _acting.reset(token)


def checked_actor(actor: object, what: str) -> str | None:
    """``actor`` as an operation got it (None: not given). Raises
    :class:`~mongosched.errors.ConfigurationError` for anything but a non-empty str
    that can be stored (checked before the operation acts, as its entry is written
    after)."""
    return None if actor is None else validate.text(actor, what=f"{what}: actor")
