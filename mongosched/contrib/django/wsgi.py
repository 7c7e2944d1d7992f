"""Django's ``get_wsgi_application``, which also starts the in-process runner.

In the project's ``wsgi.py``::

    from mongosched.contrib.django.wsgi import get_wsgi_application

    application = get_wsgi_application()

Every process that loads the application (each gunicorn or uWSGI worker, mod_wsgi's
daemon processes, ``runserver``) then runs a runner from the start when
``MONGOSCHED["RUN_IN_PROCESS"]`` is on, with or without traffic; management commands
never load it. Not for a server that loads the application once in a master and forks
its workers from it (gunicorn ``--preload``): see :mod:`.inprocess`.
"""

from __future__ import annotations

from typing import Any

from django.core.wsgi import get_wsgi_application as django_wsgi_application

from mongosched.contrib.django.inprocess import start_if_configured

__all__ = ["get_wsgi_application"]


def get_wsgi_application() -> Any:
    """Django's WSGI application; and this process's in-process runner, started (it
    waits for the database in its own thread: this returns at once)."""
    application = django_wsgi_application()
    start_if_configured()
    return application
