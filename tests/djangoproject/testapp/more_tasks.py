"""Not a tasks.py: imported because settings.MONGOSCHED["TASK_MODULES"] names it."""

from mongosched.contrib.django import app


@app.task(name="testapp.ping")
def ping() -> str:
    return "pong"
