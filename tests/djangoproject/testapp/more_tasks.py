"""Not a tasks.py: imported because settings.MONGOSCHED["TASK_MODULES"] names it."""

import os

from mongosched.contrib.django import app


@app.task(name="testapp.ping")
def ping() -> str:
    return "pong"


@app.task(name="testapp.where")
def where() -> int:
    """Which process ran the job (the gunicorn tests)."""
    return os.getpid()
