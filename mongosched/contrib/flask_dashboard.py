"""The dashboard inside Flask: a blueprint, guarded by an ``auth`` hook you supply.

::

    from flask_login import current_user
    from mongosched.contrib.flask_dashboard import dashboard_blueprint

    def staff_only():
        return current_user.is_authenticated and current_user.is_admin

    app.register_blueprint(dashboard_blueprint(sched, auth=staff_only), url_prefix="/jobs")

``auth`` is called (inside the request) for every request the blueprint receives; it
returns True to let the request through, False to refuse it (403), or a response of
its own (a redirect to your login page). Without ``auth`` every request is refused,
unless ``allow_unauthenticated=True`` says that something in front of the application
(a proxy, a VPN) already guards it.

``user`` (optional, called inside the request once it is let through) names who makes
it, for the page and the audit trail: ``user=lambda: current_user.get_id()``. Without
it, the audit trail records the action as done by ``flask auth hook`` (known by the
hook that let the request in), or ``unauthenticated``.

Forms carry a CSRF token kept in Flask's session (set ``SECRET_KEY``); a POST without
it, or from another site (``Origin``/``Referer``), changes nothing.
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from flask import Blueprint, Response, current_app, request, session

from mongosched.app import App
from mongosched.contrib.flask import MongoSched
from mongosched.dashboard import Dashboard, Request, Session
from mongosched.dashboard.http import mounted_request

__all__ = ["SESSION_KEY", "dashboard_blueprint"]

log = logging.getLogger("mongosched")

SESSION_KEY = "mongosched_csrf"
"""Where the CSRF token is kept in Flask's session."""


def dashboard_blueprint(
    source: MongoSched | App,
    *,
    auth: Callable[[], Any] | None = None,
    user: Callable[[], str | None] | None = None,
    allow_unauthenticated: bool = False,
    name: str = "mongosched_dashboard",
    title: str = "mongosched",
) -> Blueprint:
    """A blueprint serving the dashboard of ``source`` (the extension: the App of the
    current Flask app; or an App). Register it with the ``url_prefix`` you want."""
    if auth is None and not allow_unauthenticated:
        log.warning(
            "dashboard blueprint %r has no auth hook: it refuses every request "
            "(pass auth=..., or allow_unauthenticated=True if something else guards it)",
            name,
        )
    blueprint = Blueprint(name, __name__)

    def resolve() -> App:
        return source.get_app() if isinstance(source, MongoSched) else source

    def view(path: str = "") -> Any:
        if auth is None:
            if not allow_unauthenticated:
                return Response("dashboard: no auth hook configured\n", 403, mimetype="text/plain")
        else:
            verdict = auth()
            if verdict is not True:
                if verdict is False or verdict is None:
                    return Response("forbidden\n", 403, mimetype="text/plain")
                return verdict  # the hook's own answer (a redirect to a login page)
        answer = Dashboard(resolve(), title=title).handle(_request(path), _session(auth, user))
        response = Response(answer.data, answer.status, content_type=answer.content_type)
        for key, value in answer.all_headers():
            if key.lower() not in ("content-type", "content-length"):
                response.headers.add(key, value)
        return response

    methods = ["GET", "HEAD", "POST"]
    blueprint.add_url_rule("/", "index", view, methods=methods)
    blueprint.add_url_rule("/<path:path>", "page", view, methods=methods)
    return blueprint


def _session(auth: Callable[[], Any] | None, user: Callable[[], str | None] | None) -> Session:
    """The request's session: its CSRF token, and who acts (the ``user`` hook's name,
    else how the request was let in)."""
    named = user() if user is not None else None
    name = None if named is None or named == "" else str(named)
    if name is not None:
        who = Session(user=name, actor=name, known_by="flask user")
    elif auth is not None:
        who = Session(actor="flask auth hook", known_by="flask auth hook")
    else:
        who = Session(actor="unauthenticated", known_by="unauthenticated")
    if not current_app.secret_key:
        log.warning("dashboard: SECRET_KEY is not set: its forms cannot be protected, POSTs fail")
        return who
    token = session.get(SESSION_KEY)
    if not isinstance(token, str) or not token:
        token = secrets.token_urlsafe(32)
        session[SESSION_KEY] = token
    return replace(who, csrf_token=token)


def _request(path: str) -> Request:
    return mounted_request(
        method=request.method,
        full_path=request.script_root + request.path,
        path=path,
        query=request.args.lists(),
        form=request.form.lists(),
        headers=request.headers.items(),
        scheme=request.scheme,
        host=request.host,
    )
