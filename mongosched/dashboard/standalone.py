"""The standalone dashboard: a WSGI application guarded by one token (see :mod:`.auth`),
with its login form, and the server that runs it (``mongosched dashboard``).

Static assets are public (they hold no data); every other path needs the token. A
browser without it is sent to the login form; any other client gets ``401``.
"""

from __future__ import annotations

import importlib.util
import logging
import threading
from collections.abc import Callable, Iterable
from socketserver import ThreadingMixIn
from typing import TYPE_CHECKING, Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from mongosched.dashboard.actions import safe_next
from mongosched.dashboard.auth import MIN_TOKEN_LENGTH, Identity, TokenAuth
from mongosched.dashboard.csrf import Session, same_origin, token_matches
from mongosched.dashboard.http import (
    Request,
    Response,
    query_string,
    redirect,
    request_from_environ,
)
from mongosched.dashboard.render import fmt
from mongosched.dashboard.routes import Dashboard
from mongosched.dashboard.static import asset

if TYPE_CHECKING:
    from mongosched.app import App

__all__ = ["DashboardServer", "StandaloneDashboard", "make_server_for", "wsgi_response"]

log = logging.getLogger("mongosched")

StartResponse = Callable[..., Any]


def wsgi_response(
    response: Response, start_response: StartResponse, method: str
) -> Iterable[bytes]:
    """Send a :class:`Response` through WSGI (no body for HEAD)."""
    start_response(response.status_line, response.all_headers())
    return [b""] if method == "HEAD" else [response.data]


class StandaloneDashboard:
    """The dashboard of ``app`` as a WSGI application that asks for ``token``."""

    def __init__(self, app: App, token: str, *, title: str = "mongosched") -> None:
        self.dashboard = Dashboard(app, title=title)
        self.auth = TokenAuth(token)
        if len(token) < MIN_TOKEN_LENGTH:
            log.warning(
                "dashboard: the token is short (%d characters); use %d or more",
                len(token),
                MIN_TOKEN_LENGTH,
            )

    def __call__(self, environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        try:
            request = request_from_environ(environ)
        except ValueError as exc:  # a body too large
            return wsgi_response(
                Response(str(exc), 413, "text/plain; charset=utf-8"), start_response, "POST"
            )
        return wsgi_response(self.respond(request), start_response, request.method)

    # One request ------------------------------------------------------------------------
    def respond(self, request: Request) -> Response:
        path = request.path
        if path.startswith("/static/") and request.method in ("GET", "HEAD"):
            found = asset(path[len("/static/") :], request.header("if-none-match"))
            if found is not None:
                return found
        if path == "/login":
            return self._login(request)
        identity = self.auth.authenticate(request)
        if identity is None:
            return self._refuse(request)
        session, cookie = self._session(request, identity)
        if path == "/logout":
            return self._logout(request, session)
        response = self.dashboard.handle(request, session)
        if cookie:
            response.headers.append(("Set-Cookie", cookie))
        return response

    def _secure(self, request: Request) -> bool:
        return (
            request.scheme == "https"
            or (request.header("x-forwarded-proto") or "").lower() == "https"
        )

    def _set_cookie(self, request: Request, value: str, max_age: float | None) -> str:
        return self.auth.cookie(
            value, path=request.root or "/", secure=self._secure(request), max_age=max_age
        )

    def _session(self, request: Request, identity: Identity) -> tuple[Session, str | None]:
        """The CSRF session of an authenticated request, and a cookie to set if new."""
        if identity.method == "bearer":
            api = "API token"
            return Session(csrf_exempt=True, user=api, actor=api, known_by="bearer token"), None
        cookie = None
        session_id = identity.session_id
        if session_id is None:  # a Basic-auth browser's first request: give it one
            session_id, value = self.auth.new_session(login=False)
            cookie = self._set_cookie(request, value, None)
        return (
            Session(
                csrf_token=self.auth.csrf_token(session_id),
                user=identity.user,
                actor=identity.user or "dashboard token",
                known_by="login session" if identity.method == "session" else "basic auth",
                logout=identity.method == "session",
            ),
            cookie,
        )

    def _refuse(self, request: Request) -> Response:
        if request.method in ("GET", "HEAD") and request.wants_html:
            pairs = [(name, v) for name, values in request.query.items() for v in values]
            target = request.path + query_string(pairs)
            return redirect(request.url("/login") + query_string([("next", target)]))
        return Response(
            "authentication required: send the dashboard token as a Bearer token or as "
            "the password of Basic auth\n",
            401,
            "text/plain; charset=utf-8",
            [
                ("WWW-Authenticate", 'Bearer realm="mongosched"'),
                ("WWW-Authenticate", 'Basic realm="mongosched"'),
            ],
        )

    # Login, logout ------------------------------------------------------------------------
    def _login(self, request: Request) -> Response:
        target = safe_next(
            request.field("next") if request.method == "POST" else request.arg("next")
        )
        pre = self.auth.session_of(request)
        cookie = None
        if pre is None:
            pre, value = self.auth.new_session(login=False)
            cookie = self._set_cookie(request, value, None)
        if request.method == "POST":
            token_ok = same_origin(request) and token_matches(
                request.field("csrf_token"), self.auth.csrf_token(pre)
            )
            if not token_ok:
                return self._login_page(
                    request, target, pre, cookie, "The form expired: try again.", 403
                )
            if not self.auth.check_token(request.field("token")):
                log.warning(
                    "dashboard: failed sign-in from %s",
                    request.header("x-forwarded-for") or "a client",
                )
                return self._login_page(
                    request, target, pre, cookie, "That token is not right.", 401
                )
            _, value = self.auth.new_session(login=True)  # a new id: no session fixation
            response = redirect(request.url(target))
            response.headers.append(
                ("Set-Cookie", self._set_cookie(request, value, self.auth.max_age))
            )
            return response
        if request.method not in ("GET", "HEAD"):
            return Response(
                "method not allowed", 405, "text/plain; charset=utf-8", [("Allow", "GET, POST")]
            )
        if self.auth.authenticate(request) is not None:
            return redirect(request.url(target))
        return self._login_page(request, target, pre, cookie, None, 200)

    def _login_page(
        self,
        request: Request,
        target: str,
        session_id: str,
        cookie: str | None,
        error: str | None,
        status: int,
    ) -> Response:
        problem = fmt('<div class="warning" role="alert">{}</div>', error) if error else ""
        body = fmt(
            """<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>Sign in · {title}</title><link rel="stylesheet" href="{css}"></head>
<body class="login"><main class="login-box">
<div class="brand big"><span class="logo" aria-hidden="true"></span>{title}</div>
<p class="muted">Job dashboard. Sign in with the dashboard token.</p>{problem}
<form method="post" action="{action}">
<input type="hidden" name="csrf_token" value="{csrf}">
<input type="hidden" name="next" value="{next}">
<label for="token">Token</label>
<input id="token" name="token" type="password" autocomplete="current-password" required autofocus>
<button type="submit" class="button primary wide">Sign in</button>
</form></main></body></html>
""",
            title=self.dashboard.title,
            css=request.url("/static/dashboard.css"),
            problem=problem,
            action=request.url("/login"),
            csrf=self.auth.csrf_token(session_id),
            next=target,
        )
        response = Response(body, status)
        if cookie:
            response.headers.append(("Set-Cookie", cookie))
        return response

    def _logout(self, request: Request, session: Session) -> Response:
        if request.method != "POST":
            return Response(
                "method not allowed", 405, "text/plain; charset=utf-8", [("Allow", "POST")]
            )
        if not session.csrf_exempt and not (
            same_origin(request) and token_matches(request.field("csrf_token"), session.csrf_token)
        ):
            return Response(
                "refused: the form's security token does not match\n",
                403,
                "text/plain; charset=utf-8",
            )
        response = redirect(request.url("/login"))
        response.headers.append(("Set-Cookie", self._set_cookie(request, "", 0)))
        return response


# Serving ------------------------------------------------------------------------------------
class _ThreadingServer(ThreadingMixIn, WSGIServer):
    daemon_threads = True
    allow_reuse_address = True


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base's name
        log.debug("dashboard: %s %s", self.address_string(), format % args)


class DashboardServer:
    """A running server: its name (``waitress``, ``gunicorn`` or ``wsgiref``), where it
    listens, and how to stop it (wsgiref only runs in a thread)."""

    def __init__(
        self, name: str, host: str, port: int, run: Callable[[], None], stop: Callable[[], None]
    ) -> None:
        self.name = name
        self.host = host
        self.port = port
        self._run = run
        self._stop = stop

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}/"

    def serve_forever(self) -> None:
        self._run()

    def start(self) -> DashboardServer:
        """Serve from a daemon thread (tests, embedding); returns self."""
        threading.Thread(target=self._run, name="mongosched-dashboard", daemon=True).start()
        return self

    def shutdown(self) -> None:
        self._stop()


def make_server_for(
    wsgi: Callable[..., Iterable[bytes]],
    host: str,
    port: int,
    *,
    server: str = "auto",
    threads: int = 8,
) -> DashboardServer:
    """A server for ``wsgi`` on ``host:port``: ``auto`` picks waitress, else gunicorn
    (one worker, threads), else the standard library's wsgiref with a thread per
    request."""
    if server == "auto":
        server = next(
            (
                name
                for name in ("waitress", "gunicorn")
                if importlib.util.find_spec(name) is not None
            ),
            "wsgiref",
        )
    if server == "waitress":
        from waitress.server import create_server

        made: Any = create_server(wsgi, host=host, port=port, threads=threads, ident="mongosched")
        return DashboardServer("waitress", host, int(made.effective_port), made.run, made.close)
    if server == "gunicorn":
        return _gunicorn(wsgi, host, port, threads)
    if server != "wsgiref":
        raise ValueError(f"unknown server {server!r}: waitress, gunicorn, wsgiref or auto")
    simple = make_server(
        host, port, wsgi, server_class=_ThreadingServer, handler_class=_QuietHandler
    )

    def stop() -> None:
        simple.shutdown()
        simple.server_close()

    return DashboardServer("wsgiref", host, int(simple.server_port), simple.serve_forever, stop)


def _gunicorn(
    wsgi: Callable[..., Iterable[bytes]], host: str, port: int, threads: int
) -> DashboardServer:
    from gunicorn.app.base import BaseApplication

    class _App(BaseApplication):  # type: ignore[misc]  # gunicorn is untyped
        def load_config(self) -> None:
            self.cfg.set("bind", f"[{host}]:{port}" if ":" in host else f"{host}:{port}")
            self.cfg.set("workers", 1)
            self.cfg.set("threads", threads)
            self.cfg.set("worker_class", "gthread")
            self.cfg.set("accesslog", None)

        def load(self) -> Callable[..., Iterable[bytes]]:
            return wsgi

    application = _App()

    def stop() -> None:  # gunicorn stops on SIGTERM or SIGINT, in its main thread
        raise RuntimeError("gunicorn stops on SIGTERM or SIGINT")

    return DashboardServer("gunicorn", host, port, application.run, stop)
