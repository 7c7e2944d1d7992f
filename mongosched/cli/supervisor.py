"""Several processes under one supervisor: ``mongosched worker --processes N``.

A Python process runs one job's Python code at a time (one interpreter), so a runner
busy with CPU-bound tasks, or one past the CPU a single interpreter has, needs more
processes. :class:`Supervisor` starts ``N`` children, each a fresh interpreter running
the same command with ``--processes 1`` (started with ``fork`` + ``exec``, never a bare
``fork``: nothing of the parent's threads, locks or database connections reaches a
child), and then:

* restarts a child that exits while the supervisor is not stopping (killed by the OOM
  killer, a segfault in an extension, ``kill -9``), at once the first time and with a
  growing delay while it keeps dying within ``min_uptime`` of its start; after
  ``max_failures`` such deaths in a row it gives up: it stops the others and exits
  with the child's exit code (1 if it had none, e.g. killed by a signal);
* on SIGTERM or SIGINT sends SIGTERM to every child (each stops claiming, lets its jobs
  finish and exits 0), waits up to ``shutdown_timeout`` seconds (plus a margin for the
  children's own exit), then kills what is left; a second signal passes SIGTERM on
  again (the children interrupt their jobs, which go back to ``pending``);
* returns 0 when every child stopped cleanly when asked, 1 when one had to be killed
  or exited with an error on the way out.

The children run in a session of their own, so a terminal's Ctrl-C reaches only the
supervisor (which passes it on once, as SIGTERM), and each watches its supervisor
(:func:`watch_supervisor`): a child whose supervisor died (``kill -9``) stops
gracefully instead of running on unsupervised.

A job a dead child held is not lost: its lease expires and any runner (a sibling's, or
the child's replacement's) takes it again, as for any crashed process.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import FrameType

from mongosched._core import validate
from mongosched._core.backoff import Backoff
from mongosched.errors import ConfigurationError

__all__ = ["ENV_INDEX", "ENV_SUPERVISOR", "Supervisor", "watch_supervisor"]

log = logging.getLogger("mongosched.supervisor")

ENV_SUPERVISOR = "MONGOSCHED_SUPERVISOR_PID"
"""Set in each child: the supervisor's pid (the child stops if its parent changes)."""
ENV_INDEX = "MONGOSCHED_PROCESS_INDEX"
"""Set in each child: its slot, 0 to N-1 (a restarted child keeps its slot's index)."""

EXIT_OK = 0
EXIT_FAILED = 1
KILL_MARGIN = 5.0
"""Seconds past ``shutdown_timeout`` a child gets to exit before it is killed: its own
graceful stop is bounded by the same timeout, and then it still has to exit."""


@dataclass
class _Slot:
    index: int
    process: subprocess.Popen[bytes] | None = None
    started: float = 0.0
    failures: int = 0
    restart_at: float | None = None
    exits: list[int] = field(default_factory=list)


class Supervisor:
    """Run ``processes`` copies of ``command`` and keep them running.

    :param command: the child's command line (``argv``, the program first).
    :param processes: how many children.
    :param shutdown_timeout: seconds the children get to stop gracefully after SIGTERM
        (then ``KILL_MARGIN`` more to exit) before they are killed.
    :param min_uptime: a child that exits sooner than this after its start counts as a
        failure to start; one that ran longer is restarted at once.
    :param max_failures: failures to start in a row (of one slot) after which the
        supervisor gives up.
    :param backoff: the first delay before restarting a child that failed to start;
        doubled at each further failure, up to ``max_backoff``.
    :param kill_margin: seconds past ``shutdown_timeout`` before a child is killed.
    :param poll: seconds between checks of the children.
    :param env: the children's environment (default: this process's), to which the
        supervisor adds :data:`ENV_SUPERVISOR` and :data:`ENV_INDEX`.
    """

    def __init__(
        self,
        command: Sequence[str],
        processes: int,
        *,
        shutdown_timeout: float = 30.0,
        min_uptime: float = 10.0,
        max_failures: int = 5,
        backoff: float = 1.0,
        max_backoff: float = 30.0,
        env: Mapping[str, str] | None = None,
        poll: float = 0.1,
        kill_margin: float = KILL_MARGIN,
    ) -> None:
        if not command:
            raise ConfigurationError("Supervisor: command must not be empty")
        self.command = list(command)
        self.processes = validate.whole(processes, what="Supervisor: processes")
        self.shutdown_timeout = validate.seconds(
            shutdown_timeout, what="Supervisor: shutdown_timeout"
        )
        self.min_uptime = min_uptime
        self.max_failures = validate.whole(max_failures, what="Supervisor: max_failures")
        self.backoff = backoff
        self.max_backoff = max_backoff
        self.env = dict(os.environ if env is None else env)
        self.poll = poll
        self.kill_margin = kill_margin
        self.restarts = 0
        self._slots = [_Slot(i) for i in range(self.processes)]
        self._signals = 0
        self._stop = threading.Event()

    # Children -------------------------------------------------------------------------------
    @property
    def pids(self) -> list[int]:
        """The pids of the children running now."""
        return [
            s.process.pid for s in self._slots if s.process is not None and s.process.poll() is None
        ]

    def _spawn(self, slot: _Slot) -> None:
        env = {**self.env, ENV_SUPERVISOR: str(os.getpid()), ENV_INDEX: str(slot.index)}
        # A session of its own: a terminal's Ctrl-C goes to the supervisor alone, which
        # passes it on once (the child would otherwise see it twice: "stop now").
        slot.process = subprocess.Popen(self.command, env=env, start_new_session=True)
        slot.started = time.monotonic()
        slot.restart_at = None
        log.info(
            "supervisor: process %d/%d started (pid %d)",
            slot.index + 1,
            self.processes,
            slot.process.pid,
        )

    def _signal_children(self, signum: int) -> None:
        for slot in self._slots:
            process = slot.process
            if process is not None and process.poll() is None:
                try:
                    process.send_signal(signum)
                except ProcessLookupError:  # exited in between
                    pass

    @staticmethod
    def _describe(code: int) -> str:
        if code < 0:
            try:
                return f"killed by {signal.Signals(-code).name}"
            except ValueError:
                return f"killed by signal {-code}"
        return f"exited with code {code}"

    # Running -------------------------------------------------------------------------------
    def request_stop(self) -> None:
        """Stop the children gracefully (as SIGTERM to the supervisor does)."""
        self._stop.set()

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        self._signals += 1
        if self._signals > 1:
            log.info("supervisor: signal %s again: stopping the children now", signum)
            self._signal_children(signal.SIGTERM)
        self._stop.set()

    def run(self) -> int:
        """Start the children and supervise them until a signal (or :meth:`request_stop`)
        stops them, or until one keeps failing to start; returns the exit code."""
        previous = {}
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                previous[sig] = signal.signal(sig, self._on_signal)
        try:
            log.info(
                "supervisor (pid %d): starting %d process(es): %s",
                os.getpid(),
                self.processes,
                " ".join(self.command),
            )
            for slot in self._slots:
                if not self._stop.is_set():
                    self._spawn(slot)
            gave_up = self._supervise()
            code = self._shutdown()
            return gave_up if gave_up is not None else code
        finally:
            for sig, old in previous.items():
                signal.signal(sig, old)

    def _supervise(self) -> int | None:
        """Until asked to stop: restart children that exit. Returns an exit code if it
        gave up (a child keeps failing to start), else None."""
        while not self._stop.wait(self.poll):
            now = time.monotonic()
            for slot in self._slots:
                if slot.process is None:
                    if slot.restart_at is not None and now >= slot.restart_at:
                        self._spawn(slot)
                        self.restarts += 1
                    continue
                code = slot.process.poll()
                if code is None:
                    continue
                if self._stop.is_set():  # exiting because it was told to
                    break
                given_up = self._child_died(slot, code, now)
                if given_up is not None:
                    return given_up
        return None

    def _child_died(self, slot: _Slot, code: int, now: float) -> int | None:
        pid = slot.process.pid if slot.process is not None else 0
        uptime = now - slot.started
        slot.process = None
        slot.exits.append(code)
        if uptime < self.min_uptime:
            slot.failures += 1
        else:
            slot.failures = 0
        if slot.failures >= self.max_failures:
            log.error(
                "supervisor: process %d (pid %d) %s %.1f s after its start, %d times in a "
                "row: giving up",
                slot.index + 1,
                pid,
                self._describe(code),
                uptime,
                slot.failures,
            )
            return code if code > 0 else EXIT_FAILED
        delay = Backoff(first=self.backoff, most=self.max_backoff).after(slot.failures)
        log.warning(
            "supervisor: process %d (pid %d) %s after %.1f s; restarting it%s",
            slot.index + 1,
            pid,
            self._describe(code),
            uptime,
            f" in {delay:.1f} s" if delay else "",
        )
        slot.restart_at = now + delay
        return None

    def _shutdown(self) -> int:
        """SIGTERM to every child, wait for them (bounded), kill the rest."""
        running = [s for s in self._slots if s.process is not None and s.process.poll() is None]
        if running:
            log.info("supervisor: stopping %d process(es)", len(running))
        self._signal_children(signal.SIGTERM)
        deadline = time.monotonic() + self.shutdown_timeout + self.kill_margin
        code = EXIT_OK
        for slot in self._slots:
            process = slot.process
            if process is None:
                continue
            try:
                exit_code = process.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                log.warning(
                    "supervisor: process %d (pid %d) did not stop within %.0f s: killing it",
                    slot.index + 1,
                    process.pid,
                    self.shutdown_timeout + self.kill_margin,
                )
                process.kill()
                process.wait()
                code = EXIT_FAILED
                continue
            if exit_code not in (0, -signal.SIGTERM):  # stopped as asked
                log.warning(
                    "supervisor: process %d (pid %d) %s while stopping",
                    slot.index + 1,
                    process.pid,
                    self._describe(exit_code),
                )
                code = EXIT_FAILED
        log.info("supervisor: stopped")
        return code


def watch_supervisor(stop: threading.Event | None = None, interval: float = 1.0) -> bool:
    """In a supervised child (:data:`ENV_SUPERVISOR` set): start a daemon thread that
    sends this process SIGTERM (a graceful stop) if its supervisor goes away, so that
    a supervisor killed with SIGKILL leaves no unsupervised children behind. Returns
    whether it started one. ``stop`` ends the watch (for tests)."""
    expected = os.environ.get(ENV_SUPERVISOR)
    if not expected or not expected.isdigit():
        return False
    supervisor = int(expected)
    done = stop or threading.Event()

    def watch() -> None:
        while not done.wait(interval):
            if os.getppid() != supervisor:
                log.warning(
                    "supervisor (pid %d) is gone: stopping this process (pid %d)",
                    supervisor,
                    os.getpid(),
                )
                os.kill(os.getpid(), signal.SIGTERM)
                return

    threading.Thread(target=watch, name="mongosched-supervisor-watch", daemon=True).start()
    return True
