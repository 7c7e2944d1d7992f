"""An app for the command's subprocess tests: ``--app tests.support.cli_app:app``.

It stores where ``MONGOSCHED_CLI_TEST_URI`` says (a test's shared database), else in
``memory://cli``, which the command refuses (a store of this process alone). When ``MONGOSCHED_CLI_TEST_DIR`` is set, a
starting runner schedules one ``cli.work`` job: it writes ``started`` to
``DIR/progress``, waits (at most 20 s) for ``DIR/release`` to exist, then appends
``done``.
"""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path

from mongosched import App, Event

app = App(
    os.environ.get("MONGOSCHED_CLI_TEST_URI", "memory://cli"), lease_duration=5, poll_interval=0.05
)


@app.task(name="cli.work", retry=0)
def work(directory: str) -> str:
    progress = Path(directory, "progress")
    progress.write_text("started\n")
    deadline = time.monotonic() + 20
    while not Path(directory, "release").exists() and time.monotonic() < deadline:
        time.sleep(0.01)
    with progress.open("a") as file:
        file.write("done\n")
    return "done"


@app.task(name="cli.chatty")
def chatty(n: int) -> int:
    """Logs a line at INFO with the task's own logger (not the package's)."""
    logging.getLogger("shop.tasks").info("chatty says %d", n)
    return n


def _schedule_work(event: Event) -> None:
    directory = os.environ.get("MONGOSCHED_CLI_TEST_DIR")
    if directory:
        work.schedule(directory)


app.on("runner:start", _schedule_work)


not_an_app = work
