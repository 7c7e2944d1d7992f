"""Python processes that tests start from this repository, their output in a log file.

The test side: :class:`LoggedProcess` runs ``python -m MODULE ...`` from the repository
root and stops it (SIGTERM, then SIGKILL if it will not stop). The process side:
:func:`worker_arguments` and :func:`run_worker`, the command line and the start of the
worker apps (tests/support/worker_app.py, tests/support/partition_app.py).
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from mongosched import App

ROOT = Path(__file__).resolve().parents[2]


class LoggedProcess:
    """``python -m`` ``args`` run from the repository root (after ``prefix``, such as
    ``ip netns exec NAME``), its output written to ``log``; ``env`` adds variables."""

    def __init__(
        self,
        name: str,
        args: Sequence[str],
        log: Path,
        *,
        prefix: Sequence[str] = (),
        env: dict[str, str] | None = None,
    ) -> None:
        self.name = name
        self.log_path = log
        self._log = log.open("wb")
        variables = {
            **os.environ,
            "PYTHONPATH": str(ROOT),
            "PYTHONUNBUFFERED": "1",
            **(env or {}),
        }
        self.proc = subprocess.Popen(
            [*prefix, sys.executable, "-m", *args],
            cwd=ROOT,
            env=variables,
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )

    @property
    def pid(self) -> int:
        return self.proc.pid

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def stop(self, timeout: float = 15) -> None:
        """SIGTERM, and SIGKILL if it has not exited after ``timeout`` seconds."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        self._log.close()


def worker_arguments(prog: str) -> argparse.ArgumentParser:
    """``URI [--workers N] [--lease S] [--name NAME] [--gate FILE]``: with ``--gate`` the
    process starts, then waits for FILE to exist before it runs the worker, so a test
    can start it ahead of time."""
    parser = argparse.ArgumentParser(prog=prog)
    parser.add_argument("uri")
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--lease", type=float, default=1.5)
    parser.add_argument("--name", default=None)
    parser.add_argument("--gate", default=None, help="start the runner once this file exists")
    return parser


def run_worker(args: argparse.Namespace, build: Callable[[], App]) -> None:
    """Log to stderr under the worker's name, build the app, say ``ready``, then (past
    the gate) run the worker until SIGTERM/SIGINT."""
    logging.basicConfig(
        level=logging.INFO,
        format=f"%(asctime)s {args.name or os.getpid()} %(levelname)s %(name)s: %(message)s",
    )
    app = build()
    print(f"worker {args.name} pid {os.getpid()} ready", flush=True)
    while args.gate and not os.path.exists(args.gate):
        time.sleep(0.01)
    app.run_worker(workers=args.workers, name=args.name)
