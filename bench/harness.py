"""What the multi-process benchmarks share (bench/peers.py, bench/processes.py).

Standard library only: it runs in the project's venv and in the peers' venv alike.

The method, the same for every system: enqueue the jobs first (a backlog, from the
benchmark's own process, not timed), start the system's own worker command as a
subprocess, then poll how many jobs are left. The clock and the worker's CPU are read
when the first job has left the backlog (so the worker's start-up, imports and
connections are not counted) and again when none is left; jobs/s and CPU per job are
over the jobs done in between. The worker's CPU is user + system time from /proc of
its whole process tree (children it forked and reaped count too, as does each live
descendant): the worker's own CPU, not the broker's or the database's, which run in
processes of their own.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Collection, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
TICK = os.sysconf("SC_CLK_TCK")

__all__ = [
    "BENCH",
    "ROOT",
    "Measured",
    "free_port",
    "load",
    "measure",
    "start_server",
    "start_stand_in",
    "start_stub",
    "tree_cpu",
]


def load() -> str:
    """The machine's load average (1, 5, 15 min): other work on it skews every figure."""
    one, five, fifteen = os.getloadavg()
    return f"load average {one:.1f} {five:.1f} {fifteen:.1f} on {os.cpu_count()} cores"


def _stat(pid: int) -> list[str] | None:
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return text.rsplit(")", 1)[1].split()


def tree_cpu(root: int) -> float:
    """CPU seconds (user + system) of ``root`` and its live descendants, each with its
    reaped children's."""
    parents: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            fields = _stat(int(entry))
            if fields is not None:
                parents[int(entry)] = int(fields[1])
    tree, frontier = {root}, [root]
    while frontier:
        parent = frontier.pop()
        for pid, ppid in parents.items():
            if ppid == parent and pid not in tree:
                tree.add(pid)
                frontier.append(pid)
    total = 0
    for pid in tree:
        fields = _stat(pid)
        if fields is not None:  # utime stime cutime cstime
            total += sum(int(fields[i]) for i in (11, 12, 13, 14))
    return total / TICK


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class Measured:
    system: str
    storage: str
    jobs: int = 0
    seconds: float = 0.0
    cpu_seconds: float = 0.0
    round_trips: float | None = None
    """Requests the storage received from the worker in the timed window, if counted."""
    trips_what: str = ""
    server_cpu_us: float | None = None
    """CPU per job of the storage's server processes (Redis, PostgreSQL, the stub)."""
    note: str = ""
    skipped: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def rate(self) -> float:
        return self.jobs / self.seconds if self.seconds else 0.0

    @property
    def cpu_us(self) -> float:
        return self.cpu_seconds / self.jobs * 1e6 if self.jobs else 0.0

    def to_json(self) -> str:
        return json.dumps({**asdict(self), "rate": self.rate, "cpu_us": self.cpu_us})

    @classmethod
    def from_json(cls, text: str) -> Measured:
        data = json.loads(text)
        data.pop("rate", None)
        data.pop("cpu_us", None)
        return cls(**data)


def measure(
    result: Measured,
    *,
    total: int,
    remaining: Callable[[], int],
    command: Sequence[str],
    env: dict[str, str] | None = None,
    requests: Callable[[], int] | None = None,
    requests_per_poll: int = 1,
    timeout: float = 600.0,
    interval: float = 0.01,
    log: Path | None = None,
    servers: dict[str, int] | None = None,
) -> Measured:
    """Start the worker ``command``, time it from the first job taken to the last job
    done (``remaining()`` reaching 0), then stop it (SIGTERM, then SIGKILL).
    ``requests()``, if given, reads the storage's request counter; the requests of the
    polling itself (``requests_per_poll`` each) are taken off. ``servers`` (name: pid)
    are processes whose CPU per job is noted too (the storage's, for context)."""
    servers = servers or {}
    out = open(log, "wb") if log else subprocess.DEVNULL  # noqa: SIM115
    worker = subprocess.Popen(
        list(command), cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT
    )
    try:
        deadline = time.monotonic() + timeout

        def poll(stalled: str) -> int:
            """Wait one interval and read what is left; the worker must live and
            finish by the deadline (else ``stalled`` and the timeout say why)."""
            if worker.poll() is not None:
                raise RuntimeError(f"{result.system}: the worker exited ({worker.returncode})")
            if time.monotonic() > deadline:
                raise RuntimeError(f"{result.system}: {stalled} {timeout:.0f} s")
            time.sleep(interval)
            return remaining()

        left = remaining()
        while left >= total:
            left = poll("no job taken in")
        started, cpu = time.perf_counter(), tree_cpu(worker.pid)
        server_cpu = {name: tree_cpu(pid) for name, pid in servers.items()}
        requests_before = requests() if requests else 0
        first_left, polls = left, 0
        while left > 0:
            left = poll(f"{left} jobs left after")
            polls += 1
        result.seconds = time.perf_counter() - started
        result.cpu_seconds = tree_cpu(worker.pid) - cpu
        result.jobs = first_left
        result.server_cpu_us = (
            sum(tree_cpu(pid) - server_cpu[name] for name, pid in servers.items())
            / first_left
            * 1e6
            if servers
            else None
        )
        if requests:
            counted = requests() - requests_before - (polls + 1) * requests_per_poll
            result.round_trips = counted / first_left
    finally:
        stop(worker)
        if log:
            out.close()  # type: ignore[union-attr]
    return result


def stop(process: subprocess.Popen[bytes], timeout: float = 20.0) -> None:
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(5)


def start_server(command: Sequence[str], name: str) -> tuple[subprocess.Popen[str], str]:
    """A test server in a process of its own, which prints its URI when ready;
    returns it and its URI."""
    process = subprocess.Popen(list(command), cwd=ROOT, stdout=subprocess.PIPE, text=True)
    uri = process.stdout.readline().strip() if process.stdout else ""
    if not uri.startswith("mongodb://"):
        process.kill()
        raise RuntimeError(f"the {name} did not start (it said {uri!r})")
    return process, uri


def start_stub() -> tuple[subprocess.Popen[str], str]:
    """bench/stub_server.py in a process of its own; returns it and its URI."""
    return start_server([sys.executable, str(BENCH / "stub_server.py")], "stub server")


def start_stand_in() -> tuple[subprocess.Popen[str], str]:
    """tests/support/server.py (the tests' wire-protocol stand-in) in a
    process of its own; returns it and its URI."""
    return start_server([sys.executable, "-m", "tests.support.server"], "stand-in server")


def thread_cpu(kinds: Collection[str] | None = None) -> Counter[str]:
    """CPU seconds of this process's threads so far, by kind (the runner's threads are
    named mongosched-dispatcher, mongosched-worker_N, mongosched-heartbeat-N...); with
    ``kinds``, the threads of other kinds count as "other"."""
    names = {t.native_id: t.name for t in threading.enumerate()}
    tick = os.sysconf("SC_CLK_TCK")
    out: Counter[str] = Counter()
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        name = names.get(int(tid), "")
        kind = name.split("-")[1].split("_")[0] if name.startswith("mongosched-") else "other"
        if kinds is not None and kind not in kinds:
            kind = "other"
        out[kind] += (int(fields[11]) + int(fields[12])) / tick
    return out


class Successes:
    """Counts the jobs ``app`` sees succeed from now on, until :meth:`close`."""

    def __init__(self, app: Any, jobs: int) -> None:
        self.app, self.jobs = app, jobs
        self.done, self.lock, self.count = threading.Event(), threading.Lock(), 0
        app.on("job:success", self.succeeded)

    def succeeded(self, _: Any) -> None:
        with self.lock:
            self.count += 1
            if self.count == self.jobs:
                self.done.set()

    def wait(self, timeout: float) -> None:
        """Until all succeeded; the script ends, saying how many did, after ``timeout``."""
        if not self.done.wait(timeout):
            raise SystemExit(f"only {self.count} of {self.jobs} jobs finished in {timeout:g} s")

    def close(self) -> None:
        self.app.off("job:success", self.succeeded)
