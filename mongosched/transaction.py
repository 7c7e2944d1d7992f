"""Transactions that jobs are scheduled in (:class:`Transaction`).

A job scheduled in a transaction exists if and only if the transaction commits, and
no runner sees it before. A transaction comes from :meth:`App.transaction
<mongosched.App.transaction>` (or :meth:`App.with_transaction
<mongosched.App.with_transaction>`, which runs it again after a transient error), from
a caller's own pymongo ``ClientSession`` passed as ``configure(session=...)``, or from
the runner, for a task declared ``transactional=True`` (its writes and its job's
outcome commit together). See :doc:`/transactions`.

Inside ``with app.transaction():`` and inside a transactional task, jobs scheduled
without ``session=`` join that transaction (:func:`current`).
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager
from types import TracebackType
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from mongosched._core import validate
from mongosched.errors import TransactionError
from mongosched.store import Store, StoreTransaction

if TYPE_CHECKING:
    from mongosched.store import Session

__all__ = [
    "RETRY_TIME",
    "Transaction",
    "TransactionIntegration",
    "Transactions",
    "as_current",
    "current",
]

log = logging.getLogger("mongosched")

T = TypeVar("T")

RETRY_TIME = 120.0
"""Seconds :meth:`App.with_transaction <mongosched.App.with_transaction>` runs a
transaction again after transient errors (pymongo's ``with_transaction`` allows as
long)."""


class Transaction:
    """A transaction jobs are scheduled in, with the caller's own writes.

    ``session`` is the pymongo ``ClientSession`` to pass to your own writes
    (``orders.insert_one(doc, session=tx.session)``); on ``memory://`` it is None
    (which pymongo takes as "no session"), so the same code runs on both stores.
    Used as a context manager it commits when the block ends, or aborts when it raises.
    """

    def __init__(
        self,
        store: Store,
        handle: StoreTransaction,
        *,
        owned: bool,
        on_commit: Callable[[Callable[[], Any]], Any] | None = None,
    ) -> None:
        self.store = store
        """The store it writes in (a job joins it only if scheduled on this store)."""
        self.handle = handle
        """The store's transaction (:class:`~mongosched.store.StoreTransaction`)."""
        self.owned = owned
        """Whether mongosched commits it (False: a caller's session, joined)."""
        self.committed = False
        self._hook = on_commit
        self._after: list[Callable[[], Any]] = []
        self._token: contextvars.Token[Transaction | None] | None = None

    @property
    def session(self) -> Session | None:
        """The pymongo session it runs in (None on ``memory://``)."""
        session: Session | None = self.handle.session
        return session

    @property
    def active(self) -> bool:
        """Whether it is open: neither committed nor aborted."""
        return self.handle.active

    @property
    def sees_commit(self) -> bool:
        """Whether :meth:`on_commit` callbacks run: mongosched commits it, or the
        framework whose session it joined reports its commits (Django's)."""
        return self.owned or self._hook is not None

    def on_commit(self, callback: Callable[[], Any]) -> None:
        """Call ``callback()`` once the transaction has committed (never if it aborts).
        mongosched sends ``job:created`` and wakes this process's runners so. A
        caller's own session commits out of mongosched's sight: there, nothing is
        called (unless it was joined with a commit hook: see :attr:`sees_commit`)."""
        if self.owned:
            self._after.append(callback)
        elif self._hook is not None:
            self._hook(callback)

    def commit(self) -> None:
        """Commit (see :meth:`~mongosched.store.StoreTransaction.commit` for its
        errors), then run the :meth:`on_commit` callbacks."""
        if not self.owned:
            raise TransactionError("a session joined is committed by its owner, not here")
        self.handle.commit()
        self.committed = True
        after, self._after = self._after, []
        for callback in after:
            try:
                callback()
            except Exception:  # committed: what follows cannot undo it
                log.exception("after a commit: %r failed", callback)

    def abort(self) -> None:
        """Discard everything written in it."""
        self._after = []
        if self.owned:
            self.handle.abort()

    def __enter__(self) -> Transaction:
        self._token = _current.set(self)
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if self._token is not None:
            _current.reset(self._token)
            self._token = None
        try:
            if exc_type is None and self.active:
                self.commit()
            else:
                self.abort()
        finally:
            if self.owned:
                self.handle.end()

    def __repr__(self) -> str:
        state = "committed" if self.committed else "open" if self.active else "ended"
        return f"<Transaction {state} on {self.store!r}>"


class TransactionIntegration(Protocol):
    """A framework whose own transactions jobs join (Django on MongoDB): see
    :meth:`App.add_transaction_integration <mongosched.App.add_transaction_integration>`."""

    def current(self) -> Transaction | None:
        """The framework's transaction the calling code runs in (a
        :meth:`~mongosched.App.joined` session), or None."""

    def bind(self, transaction: Transaction) -> AbstractContextManager[Any]:
        """Make the framework's own writes (its ORM's) join ``transaction`` for the
        block: a transactional task's run, or a workflow's transactional step's."""


class Transactions:
    """An app's transactions: those it begins, the callers' sessions it joins, the one
    a scheduling call's jobs join, and the frameworks' integrations.
    :class:`~mongosched.App` holds one; its methods ``transaction``, ``joined`` and
    ``add_transaction_integration`` are these, with these docstrings.

    :param store: the app's store (a transaction of another store is not joined).
    :param writable: the store, prepared for writes.
    :param integrations: the frameworks' integrations, in the order added.
    """

    def __init__(
        self,
        store: Store,
        writable: Callable[[], Store],
        integrations: list[TransactionIntegration] | None = None,
    ) -> None:
        self.store = store
        self.writable = writable
        self.integrations = [] if integrations is None else integrations

    def transaction(self) -> Transaction:
        """A new transaction, for jobs to exist only if your writes commit::

            with app.transaction() as tx:
                orders.insert_one(order, session=tx.session)
                send_receipt.schedule(order["_id"])  # joins tx

        The block commits when it ends, or aborts when it raises; jobs scheduled in it
        (without ``session=``) join it. On MongoDB it runs in a session of the app's
        client (``tx.session``; give the app your client's database with
        ``App(database=...)`` so that your writes share it); on ``memory://`` the jobs
        are held until the commit and ``tx.session`` is None. A write conflict raises
        :class:`~mongosched.errors.TransactionConflict`; :meth:`with_transaction`
        runs the block again instead. See :doc:`/transactions`."""
        store = self.writable()
        return Transaction(store, store.transactions.begin(), owned=True)

    def joined(
        self, session: Any, *, on_commit: Callable[[Callable[[], Any]], Any] | None = None
    ) -> Transaction:
        """The transaction a caller's pymongo ``session`` is in, for jobs to join
        (what ``configure(session=...)`` does with it). ``on_commit``: how the session's
        owner runs a callback after its commit (Django's ``connection.on_commit``), so
        that the events and wake-ups of the jobs follow it. Raises
        :class:`~mongosched.errors.TransactionError` (see
        :meth:`~mongosched.store.parts.Transactions.join`)."""
        store = self.writable()
        return Transaction(
            store, store.transactions.join(session), owned=False, on_commit=on_commit
        )

    def add_transaction_integration(self, integration: TransactionIntegration) -> None:
        """Let jobs scheduled without ``session=`` join a framework's own transaction
        (``integration.current()``), and make the framework's writes in a transactional
        task or step join its transaction (``integration.bind``). The Django integration adds one
        for a project whose database is MongoDB."""
        self.integrations.append(integration)

    def run(self, callback: Callable[[Transaction], T], timeout: float) -> T:
        """``callback(tx)`` in a new transaction, committed; all again after a transient
        error, for up to ``timeout`` seconds."""
        deadline = time.monotonic() + validate.seconds(timeout, what="with_transaction: timeout")
        while True:
            tx = self.transaction()
            try:
                with tx:
                    result = callback(tx)
                return result
            except Exception as exc:
                if not tx.handle.retryable(exc) or time.monotonic() >= deadline:
                    raise
                log.info("transaction aborted (%s); running it again", exc)

    def of(self, given: Sequence[Any], what: str) -> Transaction | None:
        """The transaction the jobs of one scheduling call join: the one the sessions
        ``given`` name (one for all: a :class:`Transaction` or a pymongo session),
        else the one this code runs in, if it is on this store. ``what`` names the
        call in errors."""
        ambient = current()
        if ambient is not None and ambient.store is not self.store:
            ambient = None
        for integration in self.integrations if ambient is None else ():
            ambient = integration.current()
            if ambient is not None:
                break
        if not given:
            return ambient
        chosen = given[0]
        if any(other is not chosen for other in given):
            raise TransactionError(f"{what}: the jobs of one call must share one session")
        if ambient is not None and chosen is ambient.session and chosen is not None:
            chosen = ambient  # the session of the transaction this code runs in
        if isinstance(chosen, Transaction):
            if chosen.store is not self.store:
                raise TransactionError(f"{what}: the transaction is another app's")
            if not chosen.active:
                raise TransactionError(f"{what}: the transaction has ended")
            return chosen
        try:
            return self.joined(chosen)
        except TransactionError as exc:
            raise TransactionError(f"{what}: {exc}") from None

    def bind(self, transaction: Transaction) -> contextlib.ExitStack:
        """Within the block, the integrations' writes join ``transaction`` (around a
        transactional task's function, and a workflow's transactional step)."""
        stack = contextlib.ExitStack()
        for integration in self.integrations:
            stack.enter_context(integration.bind(transaction))
        return stack


_current: contextvars.ContextVar[Transaction | None] = contextvars.ContextVar(
    "mongosched_transaction", default=None
)


def current() -> Transaction | None:
    """The transaction this thread's code runs in: the block of ``with
    app.transaction()``, or a transactional task's. None outside one."""
    return _current.get()


@contextlib.contextmanager
def as_current(transaction: Transaction) -> Iterator[Transaction]:
    """Make ``transaction`` what :func:`current` returns, for the block (it neither
    commits nor aborts it)."""
    token = _current.set(transaction)
    try:
        yield transaction
    finally:
        _current.reset(token)
