"""Helpers for tests that run jobs."""

from __future__ import annotations

import threading
from collections import Counter
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

    def counts(self) -> Counter[Any]:
        with self.lock:
            return Counter(self.calls)
