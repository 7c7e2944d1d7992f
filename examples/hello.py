"""The README's first job run by a separate process: a module that declares one task and
the App, as a project's ``tasks.py`` does.

With a server running (``make server``, or MONGOSCHED_URI naming your MongoDB)::

    .venv/bin/mongosched worker examples.hello:app     # one terminal: the runner
    .venv/bin/python -m examples.hello Ann             # another: schedule, wait, print

The task has a name of its own (``name=``), so the runner, which imports this module,
knows it as the script that schedules it does.
"""

from __future__ import annotations

import os
import sys

from mongosched import App

app = App(os.environ.get("MONGOSCHED_URI", "mongodb://127.0.0.1:27018/hello"))


@app.task(name="hello.greet")
def greet(name: str) -> str:
    return f"hello, {name} (from process {os.getpid()})"


if __name__ == "__main__":
    job = greet.schedule(sys.argv[1] if len(sys.argv) > 1 else "world")
    print(f"scheduled job {job.id}; a runner runs it...")
    done = job.wait(timeout=30)
    ran = done.history[-1] if done.history else None
    where = f" by runner {ran.runner} on {ran.host}, pid {ran.pid}" if ran else ""
    print(f"{done.status}{where}: {done.result}")
    app.close()
