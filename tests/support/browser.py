"""A real headless Chromium for the dashboard's end-to-end tests: Debian's ``chromium``
driven by Playwright (its own browser download is never used), and WSGI applications
served on a free local port from a thread.

The tests skip, saying why, when Playwright or Chromium is missing; with
``MONGOSCHED_REQUIRE_BROWSER=1`` (set by ``.ci/run``) they fail instead.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from mongosched.dashboard import make_server_for

__all__ = ["CHROMIUM_ARGS", "chromium_path", "missing", "serve"]

CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
REQUIRE = "MONGOSCHED_REQUIRE_BROWSER"


def chromium_path() -> str | None:
    """Debian's Chromium (or ``MONGOSCHED_CHROMIUM``)."""
    given = os.environ.get("MONGOSCHED_CHROMIUM")
    if given:
        return given if os.path.exists(given) else None
    for candidate in ("/usr/bin/chromium", "/usr/bin/chromium-browser"):
        if os.path.exists(candidate):
            return candidate
    return shutil.which("chromium")


def missing() -> str | None:
    """Why the browser tests cannot run here, or None."""
    if importlib.util.find_spec("playwright") is None:
        return "Playwright is not installed (pip install -e '.[tests]')"
    if chromium_path() is None:
        return "Chromium is not installed (apt-get install chromium)"
    return None


def require_browser() -> None:
    """Skip (or, in CI, fail) when the browser tests cannot run."""
    why = missing()
    if why is None:
        return
    if os.environ.get(REQUIRE) == "1":
        pytest.fail(f"{REQUIRE}=1 but {why}", pytrace=False)
    pytest.skip(why)


@contextmanager
def serve(wsgi: Callable[..., Iterable[bytes]]) -> Iterator[str]:
    """Serve ``wsgi`` from a thread on a free port of 127.0.0.1; yields the base URL."""
    server = make_server_for(wsgi, "127.0.0.1", 0, server="wsgiref").start()
    try:
        yield server.url
    finally:
        server.shutdown()


def launch(playwright: Any) -> Any:
    return playwright.chromium.launch(executable_path=chromium_path(), args=CHROMIUM_ARGS)
