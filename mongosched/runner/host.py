"""What a runner needs from its app (:class:`RunnerHost`): the seam between
:mod:`mongosched.app` and the runner's modules, which never import the app."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager
from datetime import datetime
from typing import Any, Protocol

from mongosched._core.outcome import Retention
from mongosched.store import Store
from mongosched.task import Task
from mongosched.transaction import Transaction

__all__ = ["RunnerHost"]


class RunnerHost(Protocol):
    """What a runner needs from its app (an :class:`~mongosched.App`)."""

    @property
    def tasks(self) -> Mapping[str, Task[Any, Any]]: ...

    @property
    def store(self) -> Store: ...

    @property
    def lease_duration(self) -> float: ...

    @property
    def poll_interval(self) -> float: ...

    @property
    def retention(self) -> Retention: ...

    def now(self) -> datetime: ...

    def emit(self, name: str, **fields: Any) -> None: ...

    def listening(self, name: str) -> bool: ...

    def ensure_schedules(self, *, queues: Sequence[str] | None = None) -> list[str]: ...

    def attach(self, runner: Any) -> None: ...

    def detach(self, runner: Any) -> None: ...

    def bind_transaction(self, transaction: Transaction) -> AbstractContextManager[Any]: ...
