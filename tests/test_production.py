"""Production edges: an unreachable database costs one bounded wait and a clear error."""

from __future__ import annotations

import socket
import time

import pytest

from mongosched import App
from mongosched.errors import MongoschedError, StoreUnavailable


def _closed_port() -> int:
    """A local port nobody listens on (connections are refused at once)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.mark.parametrize(
    ("uri_options", "app_timeout", "bound"),
    [("", 0.5, 0.5), ("?serverSelectionTimeoutMS=700", 30, 0.7)],
    ids=["app-option", "uri-wins"],
)
def test_an_unreachable_server_costs_one_timeout_and_a_store_unavailable(
    uri_options: str, app_timeout: float, bound: float
) -> None:
    app = App(f"mongodb://127.0.0.1:{_closed_port()}/db{uri_options}", connect_timeout=app_timeout)
    app.task(name="t")(lambda: None)
    for what, call in [
        ("schedule", lambda: app.schedule("t")),
        ("get_jobs", lambda: app.get_jobs()),
        ("cancel", lambda: app.cancel("0123456789abcdef01234567")),
    ]:
        started = time.monotonic()
        with pytest.raises(StoreUnavailable) as caught:
            call()
        elapsed = time.monotonic() - started
        assert bound * 0.9 <= elapsed < bound * 2 + 0.5, (what, elapsed)  # not x retries
        assert isinstance(caught.value, MongoschedError) and "Connection refused" in str(
            caught.value
        )
