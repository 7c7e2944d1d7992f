"""The path a claimed job takes through the library: functions, classes, modules and
threads, for a lone job and for jobs drained from a backlog.

    python bench/path.py [--target memory|stub] [--backlog 800] [--list]

A profile hook on every thread (:func:`threading.setprofile`) records each call into
a ``mongosched`` function while the runner works, after it is ready, so that starting
and stopping are left out. It prints, for each kind of thread (dispatcher, worker,
heartbeat): the distinct functions entered (what a reader follows: one *hop* each),
the classes they belong to, the modules, and the calls per job. ``--list`` also prints
each function with its calls per job.

* A lone job: one job scheduled once the runner is idle, run to its end.
* A backlog: ``--backlog`` jobs scheduled, then drained in batches.

``stub`` runs against bench/stub_server.py (real pymongo over a socket), so the path is
MongoStore's; ``memory`` is memory://'s.
"""

from __future__ import annotations

import argparse
import sys
import threading
import time
import uuid
from collections import Counter
from pathlib import Path
from types import FrameType
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.harness import Successes, start_stub  # noqa: E402
from mongosched import App  # noqa: E402

PACKAGE = str(ROOT / "mongosched") + "/"
KINDS = ("dispatcher", "worker", "heartbeat")


class Calls:
    """Calls into the library's functions, by kind of thread, while :attr:`on`."""

    def __init__(self) -> None:
        self.on = False
        self.lock = threading.Lock()
        self.calls: dict[str, Counter[tuple[str, str]]] = {kind: Counter() for kind in KINDS}

    def hook(self, frame: FrameType, event: str, arg: Any) -> None:
        if event != "call" or not self.on:
            return
        code = frame.f_code
        if not code.co_filename.startswith(PACKAGE):
            return
        name = threading.current_thread().name
        kind = name.split("-")[1].split("_")[0] if name.startswith("mongosched-") else ""
        if kind in self.calls:
            module = code.co_filename[len(PACKAGE) : -3]
            qualname = getattr(code, "co_qualname", code.co_name)  # (3.11 and later)
            with self.lock:
                self.calls[kind][(module, qualname)] += 1


def measure(app: App, noop: Any, jobs: int) -> Calls:
    """Run ``jobs`` no-op jobs (scheduled at once, before the hook is on) with one
    runner, counting the calls."""
    calls = Calls()
    threading.setprofile(calls.hook)
    runner = app.runner(workers=8)
    runner.start()
    runner.wait_ready(30)
    time.sleep(0.3)  # (its first maintenance passes done)
    done = Successes(app, jobs)
    app.schedule_bulk(noop.job() for _ in range(jobs))
    calls.on = True
    runner.wake()
    done.wait(120)
    time.sleep(0.2)  # what follows the last outcome's write
    calls.on = False
    runner.stop(timeout=30)
    threading.setprofile(None)
    done.close()
    return calls


def report(label: str, calls: Calls, jobs: int, listing: bool) -> None:
    print(f"\n{label}:")
    functions: set[tuple[str, str]] = set()
    for kind in KINDS:
        counted = calls.calls[kind]
        if not counted:
            continue
        functions |= set(counted)
        classes = {f"{module}.{name.split('.')[0]}" for module, name in counted if "." in name}
        modules = {module for module, _ in counted}
        print(
            f"  {kind:<10} {len(counted):3} functions, {len(classes):2} classes, "
            f"{len(modules):2} modules, {sum(counted.values()) / jobs:6.1f} calls a job"
        )
        if listing:
            for (module, name), n in sorted(counted.items()):
                print(f"      {n / jobs:6.2f}  {module}:{name}")
    threads = [kind for kind in KINDS if calls.calls[kind]]
    classes = {f"{module}.{name.split('.')[0]}" for module, name in functions if "." in name}
    print(
        f"  all        {len(functions):3} functions, {len(classes):2} classes, "
        f"{len({m for m, _ in functions}):2} modules, on {len(threads)} kinds of thread"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", choices=("memory", "stub"), default="stub")
    parser.add_argument("--backlog", type=int, default=800)
    parser.add_argument("--list", action="store_true", help="print each function too")
    options = parser.parse_args()
    process, uri = start_stub() if options.target == "stub" else (None, None)
    try:
        for label, jobs in (
            ("a lone job", 1),
            (f"a backlog of {options.backlog:,}", options.backlog),
        ):
            if uri is not None:
                base, _, query = uri.partition("?")
                app = App(f"{base.rstrip('/')}/path_{uuid.uuid4().hex[:8]}?{query}")
            else:
                app = App(f"memory://path-{uuid.uuid4().hex}")
            noop = app.task(name="noop", retry=0)(lambda: None)
            report(label, measure(app, noop, jobs), jobs, options.list)
            app.close()
    finally:
        if process is not None:
            process.terminate()
            process.wait(10)


if __name__ == "__main__":
    main()
