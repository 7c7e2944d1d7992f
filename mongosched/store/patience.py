"""How long a holder's write retries a transient database error."""

from __future__ import annotations

from collections.abc import Callable

__all__ = ["Patience"]

Patience = Callable[[], float]
"""Until when (a :func:`time.monotonic` time) a holder's write (its outcome, a claim
given back) that meets a transient database error (a network error, a primary stepping
down) goes on retrying it, fenced on its lease token as ever; asked again before each
retry, so that time may come sooner meanwhile (the runner stopping). Without it, such
an error is retried only a few times within ``connect_timeout``."""
