"""The in-process runner (``MONGOSCHED["RUN_IN_PROCESS"] = True``): one runner in
daemon threads of each web server process, so that the site needs no other process.

It starts in the process that serves, never in management commands:

* when the server loads the project's WSGI or ASGI application through
  :func:`mongosched.contrib.django.wsgi.get_wsgi_application` (or ``.asgi``) in the
  project's ``wsgi.py``/``asgi.py``: every server process that loads the application
  runs one from the start, with or without traffic (a gunicorn worker that replaces a
  recycled one, too). ``manage.py migrate``, ``shell`` or ``mongosched worker`` never
  load it;
* after a fork, in the child, when the parent was running one (the App does it);
* as a fallback, on the first request a process serves (Django's ``request_started``
  signal; cheap once it runs).

A server that loads the application in a master process and forks its workers from it
(gunicorn ``--preload``, uWSGI without ``lazy-apps``) must not run one in the master:
keep Django's own ``get_wsgi_application`` there and call :func:`start_runner` in each
worker (gunicorn's ``post_worker_init`` hook); see :doc:`/deployment`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from mongosched.contrib.django.conf import get_app, options

if TYPE_CHECKING:
    from mongosched.runner.runner import Runner

__all__ = ["on_request_started", "start_if_configured", "start_runner", "stop_runner"]


def start_runner() -> Runner:
    """Start this process's runner now (if it is not running), with the configured
    ``WORKERS`` and ``QUEUES``, whatever ``RUN_IN_PROCESS`` says; returns it. Returns at
    once: the runner waits for the database in its own thread. For a server's worker
    hook, e.g. gunicorn's ``post_worker_init`` (not ``post_fork``: it runs before the
    worker loads Django)."""
    return get_app().start_runner(workers=options()["WORKERS"])


def start_if_configured() -> Runner | None:
    """Start this process's runner if ``RUN_IN_PROCESS`` is on; returns it (or None)."""
    return start_runner() if options()["RUN_IN_PROCESS"] else None


def stop_runner(graceful: bool = True, timeout: float | None = 30.0) -> bool:
    """Stop this process's in-process runner (a later request starts a new one when
    ``RUN_IN_PROCESS`` is on). Returns True when no job is left in flight."""
    return get_app().stop_runner(graceful=graceful, timeout=timeout)


def on_request_started(sender: Any = None, **kwargs: Any) -> None:
    """``request_started`` receiver: the fallback that starts the runner on the first
    request a process serves, if configured and not running (one attribute check on
    every later request)."""
    if get_app().in_process_runner is None:
        start_if_configured()
