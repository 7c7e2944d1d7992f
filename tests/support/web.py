"""Real web server processes for the in-process runner's tests: gunicorn, started and
always stopped, and the request burst that recycles its workers."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path

__all__ = ["free_port", "gunicorn", "recycle_workers", "served_by"]

ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@contextmanager
def gunicorn(
    app: Sequence[str], env: Mapping[str, str], log: Path, *options: str
) -> Iterator[tuple[subprocess.Popen[bytes], str]]:
    """Run ``gunicorn OPTIONS APP`` on a free local port (output to ``log``); yields the
    master process and the base URL. The server (its whole process group) is stopped
    on the way out, whatever happens; a server that does not exit 0 fails the test."""
    port = free_port()
    command = [sys.executable, "-m", "gunicorn", "--bind", f"127.0.0.1:{port}"]
    command += ["--graceful-timeout", "5", *options, *app]
    with log.open("w") as sink:
        server = subprocess.Popen(
            command,
            cwd=ROOT,
            env={**env, "PYTHONPATH": str(ROOT)},
            stdout=sink,
            stderr=sink,
            start_new_session=True,
        )
    try:
        yield server, f"http://127.0.0.1:{port}"
    finally:
        server.terminate()
        try:
            server.wait(timeout=15)
        except subprocess.TimeoutExpired:  # pragma: no cover - a stuck server
            os.killpg(server.pid, 9)  # SIGKILL
            server.wait(timeout=15)
    assert server.returncode == 0, log.read_text()


def served_by(url: str, deadline: float) -> int:
    """The pid of the process that answers ``url`` (a view returning ``{"pid": ...}``),
    waiting while none listens (the server starting, or every worker being replaced)."""
    while True:
        try:
            with urllib.request.urlopen(url, timeout=10) as response:
                return int(json.loads(response.read())["pid"])
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def recycle_workers(url: str, max_requests: int, timeout: float = 30) -> dict[int, int]:
    """Send requests until at least two workers were recycled and every worker that
    served one has served ``max_requests`` (gunicorn's ``--max-requests``) and so exits:
    the workers alive then have served nothing. Returns the requests served, by pid."""
    served: dict[int, int] = {}
    deadline = time.monotonic() + timeout
    while True:
        pid = served_by(url, deadline)
        served[pid] = served.get(pid, 0) + 1
        if len(served) >= 2 and all(count == max_requests for count in served.values()):
            return served
        assert time.monotonic() < deadline, f"workers still serving after {served}"
