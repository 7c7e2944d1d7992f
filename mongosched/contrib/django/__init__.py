"""Django integration: ``INSTALLED_APPS += ["mongosched.contrib.django"]``.

Settings (``settings.MONGOSCHED``, a dict)::

    MONGOSCHED = {
        "URI": "mongodb://localhost/myproject",  # required (or a Database object as DATABASE,
                                   # or DJANGO_DATABASE);
                                   # "memory://" for the in-process store (tests, demos)
        "DATABASE": None,          # a database name replacing the URI's
        "COLLECTION": "mongosched_jobs",
        "WORKERS": 4,              # in-process runner threads; default of `worker --workers`
        "QUEUES": None,            # queues runners serve (None: all)
        "RUN_IN_PROCESS": False,   # run a runner inside each web process (see below)
        "TASK_MODULES": [],        # modules to import besides each app's tasks.py
        "AUTODISCOVER": True,      # import each installed app's tasks.py
        "CONNECT_TIMEOUT": 5,      # seconds a call waits for an unreachable server
        "DJANGO_DATABASE": None,   # instead of URI: a Django database on MongoDB
                                   # (django-mongodb-backend), whose client and
                                   # transactions jobs share (see the transactions docs)
        # and the other App options: LEASE_DURATION, POLL_INTERVAL, KEEP_COMPLETED,
        # KEEP_FAILED, WRITE_CONCERN, EAGER, CLOCK, WAKE
    }

Tasks register on the project's shared :class:`~mongosched.App`::

    # myapp/tasks.py
    from mongosched.contrib.django import app

    @app.task(retry=5)
    def send_welcome(user_id): ...

``python manage.py mongosched worker`` runs a runner (and the other ``mongosched``
verbs work the same way). For Django's tasks framework, set
``TASKS = {"default": {"BACKEND": "mongosched.contrib.django.TasksBackend"}}``.

With ``RUN_IN_PROCESS``, each web server process runs a runner: the project's
``wsgi.py`` (or ``asgi.py``) loads the application through
``mongosched.contrib.django.wsgi.get_wsgi_application`` (``.asgi.get_asgi_application``),
which starts it in every process that loads it (see :mod:`.inprocess`).

Modules import one way: ``conf`` (the App) → ``taskrun`` (the task that runs
tasks-framework tasks) → ``framework`` (the tasks framework, loaded on use); ``backend``
imports those three; ``inprocess``, ``apps`` and the management command import
``conf``; ``wsgi`` and ``asgi`` import ``inprocess``. Nothing imports ``backend`` but
the tasks framework (and this package, for ``TasksBackend``, on access).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from mongosched.contrib.django.conf import get_app
from mongosched.contrib.django.inprocess import start_runner, stop_runner

if TYPE_CHECKING:
    from mongosched.app import App

__all__ = ["TasksBackend", "app", "get_app", "start_runner", "stop_runner"]

app: App  # resolved on first access, below


def __getattr__(name: str) -> Any:
    if name == "app":
        return get_app()
    if name == "TasksBackend":
        from mongosched.contrib.django.backend import TasksBackend

        return TasksBackend
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
