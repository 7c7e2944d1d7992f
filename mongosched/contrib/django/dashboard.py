"""The dashboard inside Django, for staff only.

::

    # urls.py: before the admin's own URLs
    path("admin/mongosched/", include("mongosched.contrib.django.urls")),
    path("admin/", admin.site.urls),

The view requires an active staff user (``staff_member_required``: others are sent to
the admin's login), and Django's own session and CSRF middleware protect it: its forms
carry Django's CSRF token. With ``django.contrib.admin`` installed, the admin's index
links to it (see :func:`link_from_admin`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.contrib.admin.views.decorators import staff_member_required
from django.http import HttpRequest, HttpResponse
from django.middleware.csrf import get_token
from django.views.decorators.csrf import csrf_protect

from mongosched.contrib.django.conf import get_app
from mongosched.dashboard import Dashboard, Request, Session
from mongosched.dashboard.http import mounted_request

__all__ = ["INDEX_TEMPLATE", "dashboard", "link_from_admin", "page"]

INDEX_TEMPLATE = "mongosched/admin/index.html"
"""The admin index with a link to the dashboard (it extends ``admin/index.html``)."""


def _request(request: HttpRequest, path: str) -> Request:
    return mounted_request(
        method=request.method or "GET",
        full_path=request.path,
        path=path,
        query=request.GET.lists(),
        form=request.POST.lists(),
        headers=request.headers.items(),
        scheme=request.scheme or "http",
        host=request.get_host(),
    )


def page(request: HttpRequest, path: str = "") -> HttpResponse:
    """Every page and action of the dashboard (``path`` below the mount point); not
    guarded: :data:`dashboard` is this view for staff, with Django's CSRF check."""
    user = request.user.get_username() if request.user.is_authenticated else None
    session = Session(
        csrf_token=get_token(request),
        csrf_field="csrfmiddlewaretoken",
        host_checks_csrf=True,
        user=user,
        actor=user or "anonymous",
        known_by="django user" if user else "unauthenticated",  # page mounted unguarded
    )
    answer = Dashboard(get_app()).handle(_request(request, path), session)
    response = HttpResponse(answer.data, status=answer.status, content_type=answer.content_type)
    for name, value in answer.all_headers():
        if name.lower() not in ("content-type", "content-length"):
            response[name] = value
    return response


dashboard: Callable[..., HttpResponse] = staff_member_required(csrf_protect(page))
"""The view: :func:`page` for active staff users only (others go to the admin's login),
its POSTs checked by Django's CSRF protection."""


def link_from_admin(site: Any = None) -> None:
    """Make the admin's index page link to the dashboard (``site``: the default admin
    site). Done at start-up when ``django.contrib.admin`` is installed and the site has
    no index template of its own; a custom site can set
    ``index_template = INDEX_TEMPLATE`` itself."""
    if site is None:
        from django.contrib import admin

        site = admin.site
    if getattr(site, "index_template", None) is None:
        site.index_template = INDEX_TEMPLATE
