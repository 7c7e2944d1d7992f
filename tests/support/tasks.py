"""Helpers for tests that run jobs."""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterator, Mapping
from typing import Any


class Recorder:
    """Thread-safe record of which jobs ran, in order, and how many ran at once."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.calls: list[Any] = []
        self.running = 0
        self.peak = 0

    def enter(self, item: Any) -> None:
        with self.lock:
            self.calls.append(item)
            self.running += 1
            self.peak = max(self.peak, self.running)

    def leave(self) -> None:
        with self.lock:
            self.running -= 1

    def ran(self, item: Any, result: Any = None) -> Any:
        """A run of ``item`` that returns ``result`` at once (a task's body)."""
        self.enter(item)
        self.leave()
        return result

    def counts(self) -> Counter[Any]:
        with self.lock:
            return Counter(self.calls)


class Unreadable(Mapping[str, Any]):
    """A mapping whose values cannot be read (``__getitem__`` raises ``LookupError``,
    which BSON's encoder lets through as ``KeyError``): a result no store can encode,
    and not for any of the reasons the codec names."""

    def __getitem__(self, key: str) -> Any:
        raise LookupError(key)

    def __iter__(self) -> Iterator[str]:
        return iter(["a"])

    def __len__(self) -> int:
        return 1
