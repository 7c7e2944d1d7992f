"""A small Flask site for the process tests (the ``flask`` command, gunicorn), set up
from the environment: ``SITE_URI`` (its store), ``SITE_RUN_IN_PROCESS=1``.

    gunicorn 'tests.support.flask_site:create_app()'
    flask --app tests.support.flask_site runner
"""

from __future__ import annotations

import os

import click
from flask import Flask, jsonify
from flask.typing import ResponseReturnValue

from mongosched.contrib.flask import MongoSched

sched = MongoSched()


@sched.task(name="site.where")
def where() -> int:
    """Which process ran the job."""
    return os.getpid()


def create_app() -> Flask:
    app = Flask(__name__)
    app.config.update(
        MONGOSCHED_URI=os.environ["SITE_URI"],
        MONGOSCHED_RUN_IN_PROCESS=os.environ.get("SITE_RUN_IN_PROCESS") == "1",
        MONGOSCHED_WORKERS=2,
        MONGOSCHED_POLL_INTERVAL=0.05,
        MONGOSCHED_LEASE_DURATION=5.0,
    )
    sched.init_app(app)

    @app.get("/pid")
    def pid() -> ResponseReturnValue:
        return jsonify(pid=os.getpid())

    @app.cli.command("runner")
    def runner() -> None:
        """Say whether this process runs an in-process runner."""
        running = sched.get_app(app).in_process_runner
        click.echo("running" if running is not None else "none")

    return app
