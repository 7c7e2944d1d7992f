"""The web dashboard: overview, jobs, a job, schedules, runners and metrics of an
:class:`~mongosched.App`, and its operations (retry, cancel, delete, bulk by filter,
pause and resume), each behind a confirmation and a CSRF check.

One framework-free codebase, three ways to serve it:

* standalone: ``mongosched dashboard --uri URI --token T`` (:mod:`.standalone`), or
  :class:`StandaloneDashboard` as a WSGI application of your own;
* inside Django: ``path("mongosched/", include("mongosched.contrib.django.urls"))``
  (staff only, linked from the admin);
* inside Flask: ``app.register_blueprint(dashboard_blueprint(sched, auth=...))``
  (:mod:`mongosched.contrib.flask_dashboard`).

Modules: :mod:`.http` (requests and responses), :mod:`.data` (what is read and changed,
through the App's public API), :mod:`.render` (escaped HTML), :mod:`.chart` (the SVG
chart), :mod:`.views` (pages), :mod:`.actions` (confirmations and writes),
:mod:`.csrf`, :mod:`.static` (assets), :mod:`.routes` (:class:`Dashboard`),
:mod:`.auth` and :mod:`.standalone` (the token-guarded WSGI application and its server).
"""

from __future__ import annotations

from mongosched.dashboard.csrf import Session
from mongosched.dashboard.http import Request, Response
from mongosched.dashboard.routes import Dashboard
from mongosched.dashboard.standalone import DashboardServer, StandaloneDashboard, make_server_for

__all__ = [
    "Dashboard",
    "DashboardServer",
    "Request",
    "Response",
    "Session",
    "StandaloneDashboard",
    "make_server_for",
]
