"""The dashboard's routes: which view answers which path, the CSRF check of every POST,
the error pages. :class:`Dashboard` knows nothing of how the request was authenticated:
its host (the standalone server, Django, Flask) does that and passes a
:class:`~.csrf.Session`."""

from __future__ import annotations

import logging
import re
import urllib.parse
from collections.abc import Callable
from typing import TYPE_CHECKING

from mongosched._core.records import JobStatus
from mongosched.dashboard.actions import JOB_ACTIONS, bulk_action, job_action, pause_action
from mongosched.dashboard.csrf import Session, refusal
from mongosched.dashboard.data import Operations
from mongosched.dashboard.fleet import audit_page, runners_page, schedules_page
from mongosched.dashboard.http import BadInput, Request, Response
from mongosched.dashboard.job_detail import job_page
from mongosched.dashboard.job_list import jobs_page
from mongosched.dashboard.overview import overview_page
from mongosched.dashboard.render import Context, Markup, fmt, page
from mongosched.dashboard.schedule_forms import backfill_action, schedule_edit, trigger_action
from mongosched.dashboard.static import asset
from mongosched.dashboard.views import notice
from mongosched.errors import OutOfBounds, StoreError
from mongosched.observe.metrics import CONTENT_TYPE

if TYPE_CHECKING:
    from mongosched.app import App

__all__ = ["Dashboard"]

log = logging.getLogger("mongosched")

READS: dict[str, Callable[[Operations, Context], tuple[str, Markup]]] = {
    "/": overview_page,
    "/jobs": jobs_page,
    "/schedules": schedules_page,
    "/runners": runners_page,
    "/audit": audit_page,
}
JOB_PATH = re.compile(r"^/jobs/([^/]+)(?:/([a-z-]+))?/?$")


class Dashboard:
    """The dashboard of one :class:`~mongosched.App`, independent of the web framework.

    :meth:`handle` answers one :class:`~.http.Request` for a host that has already
    authenticated it; the :class:`~.csrf.Session` says how its forms are protected.
    """

    def __init__(self, app: App, *, title: str = "mongosched") -> None:
        self.app = app
        self.ops = Operations(app)
        self.title = title

    def handle(self, request: Request, session: Session) -> Response:
        ctx = Context(
            request=request,
            csrf_field=session.csrf_field,
            csrf_token=session.csrf_token,
            user=session.user,
            logout=session.logout,
            title=self.title,
        )
        if request.method not in ("GET", "HEAD", "POST"):
            return Response(
                "method not allowed", 405, "text/plain; charset=utf-8", [("Allow", "GET, POST")]
            )
        if request.method == "POST":
            why = refusal(request, session)
            if why is not None:
                log.warning("dashboard: POST %s refused: %s", request.path, why)
                return self._page(ctx, "Refused", fmt("<p>Refused: {}.</p>", why), 403)
        try:
            # Who acts, for the audit trail, and how the host knew it.
            with self.app.audit.acting(session.actor, "dashboard", known_by=session.known_by):
                return self._route(ctx)
        except (OutOfBounds, BadInput) as exc:  # a value of the query or a form not taken
            body = fmt('<div class="warning" role="alert">{}</div>', str(exc))
            return self._page(ctx, "Bad request", body, 400)
        except StoreError as exc:
            log.warning("dashboard: %s %s: database error: %s", request.method, request.path, exc)
            body = fmt(
                '<div class="warning">The database did not answer: {}</div>',
                str(exc).splitlines()[0] if str(exc) else type(exc).__name__,
            )
            return self._page(ctx, "Database unavailable", body, 503)
        except Exception:
            log.exception("dashboard: %s %s failed", request.method, request.path)
            return self._page(
                ctx, "Error", Markup("<p>Something went wrong; the log says what.</p>"), 500
            )

    # Routing ----------------------------------------------------------------------------
    def _route(self, ctx: Context) -> Response:
        request = ctx.request
        path = request.path
        post = request.method == "POST"
        if path.startswith("/static/") and not post:
            found = asset(path[len("/static/") :], request.header("if-none-match"))
            return found or self._not_found(ctx)
        if path == "/metrics" and not post:
            return self._metrics()
        view = READS.get(path.rstrip("/") or "/")
        if view is not None:
            if post:
                return self._not_allowed()
            title, body = view(self.ops, ctx)
            section = path.rstrip("/") or "/"
            return self._page(
                ctx,
                title,
                body,
                200,
                section=section,
                notice=notice(ctx),
                refresh="1" if section in ("/", "/runners") else "",
            )
        match = JOB_PATH.match(path)
        if match:
            job = self.ops.job(urllib.parse.unquote(match[1]))
            if job is None:
                return self._not_found(ctx, "No job has this id (it may have been deleted).")
            action = match[2]
            if action is None:
                if post:
                    return self._not_allowed()
                title, body = job_page(self.ops, ctx, job)
                return self._page(
                    ctx,
                    title,
                    body,
                    200,
                    section="/jobs",
                    notice=notice(ctx),
                    refresh="running" if job.status is JobStatus.RUNNING else "",
                )
            if action not in JOB_ACTIONS:
                return self._not_found(ctx)
            return self._answer(ctx, job_action(self.ops, ctx, job, action), "/jobs")
        if path.startswith("/bulk/"):
            return self._answer(ctx, bulk_action(self.ops, ctx, path[len("/bulk/") :]), "/jobs")
        if path == "/schedules/edit":
            return self._answer(ctx, schedule_edit(self.ops, ctx), "/schedules")
        if path == "/schedules/trigger":
            return self._answer(ctx, trigger_action(self.ops, ctx), "/schedules")
        if path == "/schedules/backfill":
            return self._answer(ctx, backfill_action(self.ops, ctx), "/schedules")
        if path in ("/pause", "/resume"):
            return self._answer(ctx, pause_action(self.ops, ctx, resume=path == "/resume"), "/")
        return self._not_found(ctx)

    def _answer(
        self, ctx: Context, result: tuple[str, Markup, int] | Response, section: str
    ) -> Response:
        if isinstance(result, Response):
            return result
        title, body, status = result
        return self._page(ctx, title, body, status, section=section)

    # Answers ------------------------------------------------------------------------------
    def _page(
        self,
        ctx: Context,
        title: str,
        body: Markup,
        status: int,
        *,
        section: str = "",
        notice: Markup | None = None,
        refresh: str = "",
    ) -> Response:
        html = page(ctx, title, body, section=section, notice=notice, refresh=refresh)
        return Response(html, status)

    def _not_found(self, ctx: Context, text: str = "There is no such page.") -> Response:
        return self._page(ctx, "Not found", fmt("<p>{}</p>", text), 404)

    def _not_allowed(self) -> Response:
        return Response("method not allowed", 405, "text/plain; charset=utf-8", [("Allow", "GET")])

    def _metrics(self) -> Response:
        return Response(self.ops.metrics(), 200, CONTENT_TYPE)
