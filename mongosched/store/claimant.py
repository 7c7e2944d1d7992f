"""Where a claim is made: this process's host name and process id, which a store
keeps in the lease it grants (and so in each ended attempt of the job)."""

from __future__ import annotations

import os
import socket

__all__ = ["here"]

_host: tuple[int, str] | None = None


def here() -> tuple[str, int]:
    """This host's name and this process's id (looked up again after a fork)."""
    global _host
    pid = os.getpid()
    if _host is None or _host[0] != pid:
        _host = (pid, socket.gethostname())
    return _host[1], pid
