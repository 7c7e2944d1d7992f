"""A runner's options, checked once when it is made: what each of its parts reads."""

from __future__ import annotations

import os
import socket
from collections.abc import Sequence

from mongosched._core import validate
from mongosched.errors import ConfigurationError
from mongosched.runner.host import RunnerHost

__all__ = ["GATHER", "RunnerSettings"]

GATHER = 0.002
"""Seconds a batch waits for more of its kind (see :attr:`RunnerSettings.gather`)."""


class RunnerSettings:
    """The checked options of a :class:`~mongosched.runner.runner.Runner` (its
    parameters say what each means, and give the defaults; None: the app's, or a third
    of the lease). Never changed once made."""

    def __init__(
        self,
        app: RunnerHost,
        *,
        workers: int,
        queues: Sequence[str] | None,
        name: str | None,
        lease_duration: float | None,
        poll_interval: float | None,
        heartbeat_interval: float | None,
        reap_interval: float | None,
    ) -> None:
        self.workers = validate.whole(workers, what="Runner: workers")
        if isinstance(queues, str):
            raise ConfigurationError("Runner: queues must be a list of names, not a str")
        self.queues = None if queues is None else [validate.queue(q, task="*") for q in queues]
        self.name = name or f"{socket.gethostname()}:{os.getpid()}:{id(self):x}"
        validate.text(self.name, what="Runner: name")
        self.lease_duration = _duration(lease_duration, app.lease_duration, "lease_duration")
        self.poll_interval = _duration(poll_interval, app.poll_interval, "poll_interval")
        third = self.lease_duration / 3
        self.heartbeat_interval = _duration(heartbeat_interval, third, "heartbeat_interval")
        if self.heartbeat_interval > third:
            raise ConfigurationError(
                f"Runner: heartbeat_interval ({self.heartbeat_interval:g} s) must be at most a "
                f"third of lease_duration ({self.lease_duration:g} s), or leases expire "
                "between heartbeats"
            )
        self.reap_interval = _duration(reap_interval, third, "reap_interval")
        self.gather = GATHER
        """Seconds a batch waits for more of its kind while there is work: a batched
        claim for more workers to free, a finishing job for others running beside it to
        finish too, so one write records them all. Never when idle: a lone job is
        claimed and recorded at once."""


def _duration(value: float | None, default: float, name: str) -> float:
    chosen = default if value is None else value
    return validate.seconds(chosen, what=f"Runner: {name}", strict=True)
