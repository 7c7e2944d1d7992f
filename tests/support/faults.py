"""A fault injector around the store's collections.

Each call to a wrapped collection may fail with a network error *before* it reaches the
server (nothing applied) or *after* the server applied it (the reply is lost), as a
dropped connection or a timeout does to a real client. :meth:`FaultyCollection.fail`
scripts errors for the next calls of one operation, as a server's ``failCommand`` fail
point does (:func:`server_error` makes the error a server's reply raises in pymongo).
"""

from __future__ import annotations

import random
from collections import Counter, deque
from collections.abc import Callable, Mapping
from typing import Any

from pymongo.errors import (
    AutoReconnect,
    NetworkTimeout,
    NotPrimaryError,
    OperationFailure,
    PyMongoError,
)

# Codes pymongo raises as NotPrimaryError (a "not primary" or "node is recovering" reply).
_NOT_PRIMARY = frozenset({91, 189, 10058, 10107, 11600, 11602, 13435, 13436})

# Calls that do not reach the server, or only read.
_LOCAL = frozenset({"name", "full_name", "with_options", "index_information"})
# Writes whose reply may come late (after the lease it grants ran out).
_WRITES = frozenset({"find_one_and_update", "bulk_write", "update"})
# Every write: another client may act between one landing and its reply arriving.
_ALL_WRITES = _WRITES | {
    "insert_one",
    "insert_many",
    "update_one",
    "update_many",
    "replace_one",
    "delete_one",
    "delete_many",
}


class FaultyCollection:
    """``late``, if given, is called after an applied ``find_one_and_update``, ``bulk_write``
    or ``update`` command with some probability (``late_rate``): the reply arrived late (a
    test moves its clock on). ``meanwhile``, if given, is called after any applied write
    with some probability (``meanwhile_rate``): another client acted before the reply
    arrived. Commands the store sends itself (``collection.database .command``) are
    injected too, under the command's name."""

    def __init__(
        self,
        target: Any,
        rng: random.Random,
        rate: float,
        late: Callable[[], None] | None = None,
        late_rate: float = 0.0,
        meanwhile: Callable[[], None] | None = None,
        meanwhile_rate: float = 0.0,
    ) -> None:
        self._target = target
        self.rng = rng
        self.rate = rate
        self.late = late
        self.late_rate = late_rate
        self.meanwhile = meanwhile
        self.meanwhile_rate = meanwhile_rate
        self.enabled = True
        self.injected: Counter[str] = Counter()
        self._scripted: dict[str, deque[BaseException]] = {}

    def fail(self, name: str, *errors: BaseException) -> None:
        """The next calls of ``name`` (a method, or a command's name) raise ``errors``,
        one each, before they reach the server (as a ``failCommand`` fail point with
        ``times``); whether or not random faults are enabled."""
        self._scripted.setdefault(name, deque()).extend(errors)

    @property
    def database(self) -> _FaultyDatabase:
        return _FaultyDatabase(self._target.database, self)

    def __getattr__(self, name: str) -> Any:
        value = getattr(self._target, name)
        if not callable(value) or name in _LOCAL:
            return value

        def call(*args: Any, **kwargs: Any) -> Any:
            return self.run(name, lambda: value(*args, **kwargs))

        return call

    def run(self, name: str, call: Callable[[], Any]) -> Any:
        """``call()`` (the operation ``name``), or a network error before or after it."""
        scripted = self._scripted.get(name)
        if scripted:
            self.injected[f"{name}:scripted"] += 1
            raise scripted.popleft()
        if self.enabled and self.rng.random() < self.rate:
            if self.rng.random() < 0.5:
                self.injected[f"{name}:before"] += 1
                raise AutoReconnect(f"injected: connection dropped before {name}")
            result = call()
            if hasattr(result, "__iter__") and not isinstance(result, (Mapping, list)):
                list(result)  # a cursor: its query ran
            self.injected[f"{name}:after"] += 1
            raise NetworkTimeout(f"injected: reply to {name} lost")
        result = call()
        self._after(name, "late", _WRITES, self.late, self.late_rate)
        self._after(name, "meanwhile", _ALL_WRITES, self.meanwhile, self.meanwhile_rate)
        return result

    def _after(
        self,
        name: str,
        what: str,
        names: frozenset[str],
        hook: Callable[[], None] | None,
        rate: float,
    ) -> None:
        """After the operation ``name`` applied: ``hook()`` with probability ``rate``,
        if the operation is one of ``names`` (counted as ``name:what``)."""
        if self.enabled and hook is not None and name in names and self.rng.random() < rate:
            self.injected[f"{name}:{what}"] += 1
            hook()


class _FaultyDatabase:
    """The database of a :class:`FaultyCollection`: its ``command`` fails as the
    collection's methods do."""

    def __init__(self, target: Any, faults: FaultyCollection) -> None:
        self._target = target
        self._faults = faults

    def command(self, command: Any, *args: Any, **kwargs: Any) -> Any:
        name = command if isinstance(command, str) else next(iter(command))
        return self._faults.run(name, lambda: self._target.command(command, *args, **kwargs))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._target, name)


def server_error(code: int, *labels: str) -> PyMongoError:
    """The error pymongo raises for a server's reply ``{ok: 0, code: code}`` with
    ``errorLabels``: a NotPrimaryError for the "not primary" and "shutting down" codes
    (189 PrimarySteppedDown, 10107 NotWritablePrimary, 91, 11600, ...), else an
    OperationFailure."""
    reply: dict[str, Any] = {"ok": 0, "errmsg": f"injected: error {code}", "code": code}
    if labels:
        reply["errorLabels"] = list(labels)
    if code in _NOT_PRIMARY:
        return NotPrimaryError(reply["errmsg"], reply)
    return OperationFailure(reply["errmsg"], code, reply)


def inject(
    store: Any,
    rng: random.Random,
    rate: float,
    late: Callable[[], None] | None = None,
    late_rate: float = 0.0,
    meanwhile: Callable[[], None] | None = None,
    meanwhile_rate: float = 0.0,
) -> list[FaultyCollection]:
    """Wrap a MongoStore's collections; returns the wrappers (set ``enabled`` to switch).
    ``late`` and ``meanwhile`` act on the job collection's writes."""
    store.connection.retry_delay = 0.0
    store.connection.jobs = FaultyCollection(
        store.connection.jobs, rng, rate, late, late_rate, meanwhile, meanwhile_rate
    )
    store.connection.permits = FaultyCollection(store.connection.permits, rng, rate)
    store.connection.limits = FaultyCollection(store.connection.limits, rng, rate)
    return [store.connection.jobs, store.connection.permits, store.connection.limits]
