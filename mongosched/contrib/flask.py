"""Flask integration.

::

    from flask import Flask
    from mongosched.contrib.flask import MongoSched

    sched = MongoSched()

    @sched.task(retry=5)
    def send_welcome(user_id): ...

    def create_app():
        app = Flask(__name__)
        app.config["MONGOSCHED_URI"] = "mongodb://localhost/myapp"
        sched.init_app(app)          # or MongoSched(app) without a factory
        return app

    # in a view:  send_welcome.schedule(user.id)
    # a worker:   flask --app myapp mongosched worker --workers 8

Config keys: ``MONGOSCHED_URI`` (required: ``mongodb://host/dbname``, or ``memory://``
for the in-process store of tests and demos), ``MONGOSCHED_DATABASE`` (a database
name replacing the URI's, or a pymongo Database object instead of a URI),
``MONGOSCHED_COLLECTION``, ``MONGOSCHED_WORKERS`` (4: threads of the in-process
runner, and the default of ``worker --workers``), ``MONGOSCHED_QUEUES`` (None: all),
``MONGOSCHED_RUN_IN_PROCESS`` (False) and the other App options
``MONGOSCHED_CONNECT_TIMEOUT`` (5: seconds a call waits for an unreachable server),
``MONGOSCHED_LEASE_DURATION``, ``_POLL_INTERVAL``, ``_KEEP_COMPLETED``,
``_KEEP_FAILED``, ``_WRITE_CONCERN``, ``_EAGER``, ``_CLOCK``, ``_WAKE``.

With ``MONGOSCHED_RUN_IN_PROCESS``, each web server process runs a runner in daemon
threads: :meth:`MongoSched.init_app` starts it in every process that creates the app (a
gunicorn or uWSGI worker, with or without traffic), except inside a ``flask`` command
(``flask db upgrade``, ``flask shell``, ``flask mongosched worker`` start none; under
``flask run`` it starts on the first request). A child forked from a process running
one starts its own, and the first request starts it if it is not running. A server
that creates the app once in a master and forks its workers from it (gunicorn
``--preload``) must not run one in the master: leave ``MONGOSCHED_RUN_IN_PROCESS`` off
and call :meth:`MongoSched.start_runner` in each worker (gunicorn's
``post_worker_init``); see :doc:`/deployment`.

Each Flask app given to :meth:`MongoSched.init_app` gets its own
:class:`~mongosched.App`, with every task of the extension registered on it.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Generic, ParamSpec, TypeVar, overload

import click
from flask import Flask, current_app, has_app_context
from flask.cli import with_appcontext

from mongosched.app import App
from mongosched.contrib import app_from_settings, positive_int, run_cli
from mongosched.errors import ConfigurationError
from mongosched.job import Job
from mongosched.runner.runner import Runner
from mongosched.task import (
    ConfiguredTask,
    JobSpec,
    ScheduleOptions,
    Task,
    TaskOptions,
    task_options,
)

if TYPE_CHECKING:
    from typing_extensions import Unpack

__all__ = ["MongoSched", "SchedTask"]

P = ParamSpec("P")
R = TypeVar("R")

PREFIX = "MONGOSCHED_"
OWN_KEYS = ("WORKERS", "RUN_IN_PROCESS")
EXTENSION = "mongosched"


class _State:
    """What the extension keeps per Flask app: its App and the in-process runner's
    settings (the App keeps the runner, and forgets it in a forked child)."""

    def __init__(self, app: App, workers: int, run_in_process: bool) -> None:
        self.app = app
        self.workers = workers
        self.run_in_process = run_in_process


class SchedTask(Generic[P, R]):
    """What ``@sched.task`` returns: a task of every Flask app the extension serves.

    ``schedule``, ``configure`` and ``job`` act on the App of the current Flask app
    (or of the only one, outside an app context); calling it runs the function inline.
    """

    def __init__(self, sched: MongoSched, fn: Callable[P, R], options: TaskOptions) -> None:
        self.sched = sched
        self.fn = fn
        self.options = options
        self.name: str = options.get("name") or f"{fn.__module__}.{fn.__qualname__}"
        self.__wrapped__ = fn
        self.__doc__ = fn.__doc__

    @property
    def task(self) -> Task[P, R]:
        """The registered :class:`~mongosched.Task` in the current App."""
        task: Task[P, R] = self.sched.app.tasks[self.name]
        return task

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R:
        return self.fn(*args, **kwargs)

    def schedule(self, *args: P.args, **kwargs: P.kwargs) -> Job[R]:
        """As :meth:`mongosched.Task.schedule`: every argument is payload."""
        return self.task.schedule(*args, **kwargs)

    def configure(self, **options: Unpack[ScheduleOptions]) -> ConfiguredTask[P, R]:
        """As :meth:`mongosched.Task.configure`: the scheduling options."""
        return self.task.configure(**options)

    def after(self, delay: float | timedelta) -> ConfiguredTask[P, R]:
        """As :meth:`mongosched.Task.after`: due ``delay`` after scheduling."""
        return self.task.after(delay)

    def at(self, when: datetime) -> ConfiguredTask[P, R]:
        """As :meth:`mongosched.Task.at`: due at ``when``."""
        return self.task.at(when)

    def job(self, *args: P.args, **kwargs: P.kwargs) -> JobSpec:
        return self.task.job(*args, **kwargs)

    def __repr__(self) -> str:
        return f"<SchedTask {self.name}>"


class MongoSched:
    """The Flask extension: ``MongoSched(app)`` or ``sched.init_app(app)``."""

    def __init__(self, app: Flask | None = None) -> None:
        self._declared: list[tuple[Callable[..., Any], TaskOptions]] = []
        self._states: list[_State] = []
        if app is not None:
            self.init_app(app)

    # Set-up --------------------------------------------------------------------------
    def init_app(self, app: Flask) -> None:
        """Make the App from ``app.config``, register the tasks on it, add the
        ``flask mongosched`` command and, with ``MONGOSCHED_RUN_IN_PROCESS``, start the
        in-process runner (not inside a ``flask`` command; it waits for the database in
        its own thread, so this returns at once). Declare the tasks (import the modules
        declaring them) first: a repeating schedule declared later is put in place only
        by the next runner to start."""
        settings = {
            key[len(PREFIX) :]: value for key, value in app.config.items() if key.startswith(PREFIX)
        }
        workers = settings.get("WORKERS", 4)
        positive_int(workers, what="MONGOSCHED_WORKERS")
        made = app_from_settings(settings, where="MONGOSCHED_* config", ignore=OWN_KEYS)
        for fn, options in self._declared:
            made.task(**options)(fn)
        state = _State(made, workers, bool(settings.get("RUN_IN_PROCESS", False)))
        self._states.append(state)
        app.extensions[EXTENSION] = state
        app.cli.add_command(mongosched_command)
        app.before_request(self._before_request)
        if state.run_in_process and not in_flask_command():
            self.start_runner(app)

    # Tasks -------------------------------------------------------------------------------
    @overload
    def task(self, fn: Callable[P, R], /) -> SchedTask[P, R]: ...

    @overload
    def task(
        self, **options: Unpack[TaskOptions]
    ) -> Callable[[Callable[P, R]], SchedTask[P, R]]: ...

    def task(  # type: ignore[misc]  # as App.task: mypy cannot match **options
        self, fn: Callable[..., Any] | None = None, /, **options: Unpack[TaskOptions]
    ) -> Any:
        """Declare a task (bare or with the options of :meth:`mongosched.App.task`),
        before or after :meth:`init_app`. An unknown option is refused here."""
        checked = task_options(options)

        def declare(function: Callable[..., Any]) -> SchedTask[Any, Any]:
            for state in self._states:
                state.app.task(**checked)(function)
            self._declared.append((function, checked))
            return SchedTask(self, function, checked)

        if fn is not None:
            if options:
                raise ConfigurationError("use @sched.task or @sched.task(...), not both")
            return declare(fn)
        return declare

    # Access ------------------------------------------------------------------------------
    def get_app(self, flask_app: Flask | None = None) -> App:
        """The App of ``flask_app``, else of the current Flask app, else of the only
        Flask app initialised."""
        return self._state(flask_app).app

    @property
    def app(self) -> App:
        """The App of the current Flask app (see :meth:`get_app`)."""
        return self.get_app()

    def _state(self, flask_app: Flask | None = None) -> _State:
        if flask_app is None and has_app_context():
            flask_app = current_app._get_current_object()  # type: ignore[attr-defined]
        if flask_app is not None:
            state = flask_app.extensions.get(EXTENSION)
            if not isinstance(state, _State) or state not in self._states:
                raise ConfigurationError(f"MongoSched.init_app() was not called for {flask_app!r}")
            return state
        if len(self._states) == 1:
            return self._states[0]
        if not self._states:
            raise ConfigurationError("MongoSched has no Flask app yet: call init_app(app) first")
        raise ConfigurationError(
            "MongoSched serves several Flask apps: use it inside an app context, or "
            "get_app(flask_app)"
        )

    # In-process runner -----------------------------------------------------------------
    def start_runner(self, flask_app: Flask | None = None) -> Runner:
        """Start the in-process runner of this Flask app's App now (once per process),
        with ``MONGOSCHED_WORKERS`` threads, whatever ``MONGOSCHED_RUN_IN_PROCESS`` says;
        returns it. For a server's worker hook, e.g. gunicorn's ``post_worker_init``."""
        state = self._state(flask_app)
        return state.app.start_runner(workers=state.workers)

    def stop_runner(
        self, flask_app: Flask | None = None, graceful: bool = True, timeout: float | None = 30.0
    ) -> bool:
        """Stop that runner (the next request starts a new one if configured)."""
        return self._state(flask_app).app.stop_runner(graceful=graceful, timeout=timeout)

    def _before_request(self) -> None:
        """The fallback: start the runner on a request when it is not running (one
        attribute check once it runs)."""
        state = self._state()
        if state.run_in_process and state.app.in_process_runner is None:
            self.start_runner()


def flask_program() -> bool:
    """Whether this process runs the ``flask`` command as its program (which sets
    ``FLASK_RUN_FROM_CLI`` for the whole process; a test's CLI runner does not)."""
    return os.environ.get("FLASK_RUN_FROM_CLI") == "true"


def in_flask_command() -> bool:
    """Whether this process runs a ``flask`` command or another click command: not a
    web server's process."""
    return flask_program() or click.get_current_context(silent=True) is not None


@click.command(
    "mongosched",
    context_settings={"ignore_unknown_options": True, "help_option_names": []},
    add_help_option=False,
)
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
@with_appcontext
def mongosched_command(args: tuple[str, ...]) -> None:
    """Run the mongosched command (worker, jobs, schedules, stats) for this app."""
    state = current_app.extensions.get(EXTENSION)
    if not isinstance(state, _State):
        raise click.UsageError("MongoSched is not initialised for this app")
    prog = click.get_current_context().command_path  # "flask mongosched"
    code = run_cli(
        args,
        state.app,
        prog=prog,
        workers=state.workers,
        own_process=flask_program(),
    )
    sys.stdout.flush()
    if code:
        raise SystemExit(code)
