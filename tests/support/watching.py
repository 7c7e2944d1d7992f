"""Reading a store's DueWatch in a thread, as a runner's watcher does (for tests)."""

from __future__ import annotations

import queue
import threading
import time

from mongosched.store import DueHint, DueWatch

__all__ = ["QUIET", "Hints"]

QUIET = 0.6  # seconds without a hint that show a change was not reported


class Hints:
    """Reads a watch in a thread, as a runner's watcher does."""

    def __init__(self, watch: DueWatch) -> None:
        self.watch = watch
        self.queue: queue.Queue[DueHint | BaseException] = queue.Queue()
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self) -> None:
        try:
            for hint in self.watch:
                self.queue.put(hint)
        except BaseException as exc:  # handed to the test
            self.queue.put(exc)

    def next(self, timeout: float = 5.0) -> DueHint:
        item = self.queue.get(timeout=timeout)
        if isinstance(item, BaseException):
            raise item
        return item

    def none_within(self, seconds: float = QUIET) -> bool:
        try:
            item = self.queue.get(timeout=seconds)
        except queue.Empty:
            return True
        raise AssertionError(f"unexpected hint {item!r}")

    def close(self) -> float:
        """Close the watch; seconds until its reader ended."""
        start = time.monotonic()
        self.watch.close()
        self.thread.join(5)
        assert not self.thread.is_alive()
        return time.monotonic() - start
