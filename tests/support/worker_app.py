"""An app for worker subprocesses in tests/processes/test_processes.py.

Run as ``python -m tests.support.worker_app URI [--workers N] [--lease S] [--name NAME]
[--gate FILE]`` (URI names the database; with ``--gate`` the process starts, then waits
for FILE to exist before it runs the worker, so a test can start it ahead of time). It registers the task ``record`` (and, for the flow-control tests,
``limited``, ``keyed`` and ``step``: the same record under a rate limit of 5/s, a rate
limit of 2/s per ``customer``, and none; each fails when given ``fail=True``) and runs
``app.run_worker(...)`` until SIGTERM/SIGINT (or SIGKILL, which is the point).

``record(seconds)`` writes one document per run to the side collection ``runs`` (made
before any work, finished after it), independent of the job's own status, so a test can
count executions and check that two holders never ran one job at the same time:

``{_id, job, attempt, token, pid, start, end, lease_lost}`` with ``start``/``end`` as
``time.time()`` (one machine, one clock). The run returns its lease token, so the job's
stored result names the run whose outcome landed.
"""

from __future__ import annotations

import os
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable
from typing import Any

import pymongo
from pymongo.errors import DuplicateKeyError, PyMongoError

from mongosched import App, RetryPolicy, current_job
from tests.support.processes import run_worker, worker_arguments

RUNS = "runs"

_side: Any = None
_backlog: deque[Callable[[], Any]] = deque()
_backlog_lock = threading.Lock()
_flusher: threading.Thread | None = None


def side_collection(uri: str) -> Any:
    global _side
    if _side is None:
        client: Any = pymongo.MongoClient(uri, tz_aware=True)
        _side = client.get_default_database()[RUNS]
    return _side


def _write(write: Callable[[], Any]) -> bool:
    try:
        write()
    except DuplicateKeyError:
        pass  # an insert repeated after a lost reply: it landed
    except PyMongoError:
        return False
    return True


def _persist(write: Callable[[], Any]) -> None:
    """Record a fact without making the run wait on the database: written now if the
    server answers, else queued and written (in order) by a background thread as soon
    as it does. The run itself goes on as a handler doing no database work would."""
    global _flusher
    with _backlog_lock:
        if not _backlog and _write(write):
            return
        _backlog.append(write)
        if _flusher is None:
            _flusher = threading.Thread(target=_flush, name="record-flusher", daemon=True)
            _flusher.start()


def _flush() -> None:
    while True:
        with _backlog_lock:
            write = _backlog[0] if _backlog else None
        if write is None:
            time.sleep(0.05)
        elif _write(write):
            with _backlog_lock:
                _backlog.popleft()
        else:
            time.sleep(0.1)


def build(uri: str, lease: float, poll: float) -> App:
    app = App(uri, lease_duration=lease, poll_interval=poll, keep_completed=None)

    @app.task(name="record", retry=RetryPolicy(retries=9, backoff="fixed", delay=0.05))
    def record(seconds: float = 0.0) -> str:
        start = time.time()
        ctx = current_job()
        assert ctx is not None
        lease = getattr(ctx, "_lease", None)
        token = getattr(lease, "token", None) or uuid.uuid4().hex
        runs = side_collection(uri)
        run_id = f"{ctx.id}:{ctx.attempt}:{token}"
        doc = {
            "_id": run_id,
            "job": ctx.id,
            "attempt": ctx.attempt,
            "token": token,
            "pid": os.getpid(),
            "start": start,
            "end": None,
        }
        _persist(lambda: runs.insert_one(dict(doc)))
        if seconds:
            time.sleep(seconds)  # the work itself
        end = time.time()
        lost = ctx.cancel_reason == "lease_lost"
        _persist(
            lambda: runs.update_one({"_id": run_id}, {"$set": {"end": end, "lease_lost": lost}})
        )
        return token

    # Flow control (tests/processes/test_flow_processes.py): the same record, under limits.
    def flow_step(seconds: float = 0.0, customer: str | None = None, fail: bool = False) -> str:
        token = record(seconds)
        if fail:
            raise ValueError("failed on purpose")
        return token

    app.task(name="limited", rate_limit="5/s", retry=0)(flow_step)
    app.task(name="keyed", rate_limit="2/s", rate_key="customer", retry=0)(flow_step)
    app.task(name="step", retry=0)(flow_step)
    return app


def main(argv: list[str] | None = None) -> None:
    parser = worker_arguments("tests.support.worker_app")
    parser.add_argument("--poll", type=float, default=0.05)
    args = parser.parse_args(argv)
    run_worker(args, lambda: build(args.uri, args.lease, args.poll))


if __name__ == "__main__":
    main()
