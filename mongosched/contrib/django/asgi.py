"""Django's ``get_asgi_application``, which also starts the in-process runner.

In the project's ``asgi.py``::

    from mongosched.contrib.django.asgi import get_asgi_application

    application = get_asgi_application()

As :mod:`mongosched.contrib.django.wsgi`, for ASGI servers (uvicorn, daphne,
hypercorn): each process that loads the application runs a runner from the start when
``MONGOSCHED["RUN_IN_PROCESS"]`` is on. Jobs run in the runner's threads, not on the
event loop.
"""

from __future__ import annotations

from typing import Any

from django.core.asgi import get_asgi_application as django_asgi_application

from mongosched.contrib.django.inprocess import start_if_configured

__all__ = ["get_asgi_application"]


def get_asgi_application() -> Any:
    """Django's ASGI application; and this process's in-process runner, started (it
    waits for the database in its own thread: this returns at once)."""
    application = django_asgi_application()
    start_if_configured()
    return application
