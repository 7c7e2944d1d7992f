"""A runner's worker threads (:class:`WorkerPool`): a
:class:`~concurrent.futures.ThreadPoolExecutor` whose threads each serve one queue of
calls for as long as the runner runs.

A call handed to the pool is a pair in a :class:`queue.SimpleQueue`, not a
:class:`~concurrent.futures.Future` with its own condition and lock: nobody waits on a
call's result (a job's outcome is written by the call itself), and a job passes
through here once, so what a future costs would be paid by every job.

The executor still owns the threads, so the interpreter's exit waits for them as it
waits for any executor's: a runner still running at exit is stopped first
(:mod:`~mongosched.runner.at_exit`), which shuts the pool; each thread then ends once
the calls queued before the shutdown are done.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

__all__ = ["WorkerPool"]

log = logging.getLogger("mongosched.runner")

_END = None
"""What a thread takes from the queue to end."""


class WorkerPool:
    """``count`` worker threads, named ``name_0``, ``name_1``...; see the module."""

    def __init__(self, count: int, name: str) -> None:
        self._calls: queue.SimpleQueue[tuple[Callable[..., Any], tuple[Any, ...]] | None]
        self._calls = queue.SimpleQueue()
        self._count = count
        self._shut = False
        self._lock = threading.Lock()  # a call is queued before the shutdown's ends, or refused
        self._executor = ThreadPoolExecutor(count, thread_name_prefix=name)
        for _ in range(count):
            self._executor.submit(self._serve)

    def submit(self, call: Callable[..., Any], *args: Any) -> None:
        """Have a worker thread run ``call(*args)``; what it raises is logged.
        :class:`RuntimeError` once the pool is shut, as an executor's ``submit``."""
        with self._lock:
            if self._shut:
                raise RuntimeError("the worker pool is shut")
            self._calls.put((call, args))

    def shutdown(self) -> None:
        """Take no more calls; each thread ends once those queued are done. Returns at
        once."""
        with self._lock:
            if self._shut:
                return
            self._shut = True
            for _ in range(self._count):
                self._calls.put(_END)
        self._executor.shutdown(wait=False)

    def _serve(self) -> None:
        take = self._calls.get
        while True:
            item = take()
            if item is _END:
                return
            call, args = item
            try:
                call(*args)
            except BaseException:  # a thread never ends but by the shutdown
                log.exception("a call in the worker pool raised")
            del item, call, args  # (what it held goes now, not at the next call)
