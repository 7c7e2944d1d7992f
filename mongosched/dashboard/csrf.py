"""Cross-site request forgery: every write is a POST carrying the session's token, from
a page of the same site.

What a host supplies per request is a :class:`Session`: the token its forms carry (or
that the host checks CSRF its own way, as Django does), and whether the request is
exempt (an API client authenticated by an ``Authorization: Bearer`` header, which a
browser never sends on its own). :func:`refusal` says why a POST is refused, if it is.
"""

from __future__ import annotations

import hmac
import secrets
import urllib.parse
from dataclasses import dataclass

from mongosched.dashboard.http import Request

__all__ = ["CSRF_FIELD", "Session", "new_token", "refusal", "same_origin"]

CSRF_FIELD = "csrf_token"


@dataclass
class Session:
    """Who makes this request, as far as the dashboard needs to know."""

    csrf_token: str = ""
    """The token this session's forms carry and its POSTs must send back."""
    csrf_field: str = CSRF_FIELD
    host_checks_csrf: bool = False
    """The host (Django's middleware) checked the token before the dashboard saw it."""
    csrf_exempt: bool = False
    """Authenticated by a header no browser sends by itself (Bearer): no token needed."""
    user: str | None = None
    """The signed-in user's name, shown on the page."""
    actor: str = "unknown"
    """Who acts, for the audit trail: the user's name, else what the host knows of
    the request (``dashboard token``)."""
    known_by: str = "unknown"
    """How the host knew the actor, for the audit trail: ``bearer token``, ``basic
    auth``, ``login session`` (standalone), ``django user``, ``flask user``, ``flask
    auth hook`` (a hook let the request in, naming no one), ``unauthenticated``."""
    logout: bool = False
    """Whether the page offers "sign out" (the standalone login session)."""


def new_token() -> str:
    return secrets.token_urlsafe(32)


def token_matches(sent: str, expected: str) -> bool:
    """Whether a form's ``sent`` token is the ``expected`` one (constant-time; an empty
    token never matches)."""
    return bool(sent) and bool(expected) and hmac.compare_digest(sent.encode(), expected.encode())


def same_origin(request: Request) -> bool:
    """False when the request says it comes from another site: an ``Origin`` (or, without
    one, a ``Referer``) whose host is not this request's ``Host``. True when neither is
    sent (older clients, API clients)."""
    origin = request.header("origin")
    if origin is not None:
        if origin == "null":
            return False
        source = origin
    else:
        referer = request.header("referer")
        if not referer:
            return True
        source = referer
    parsed = urllib.parse.urlsplit(source)
    return bool(parsed.netloc) and parsed.netloc.lower() == request.host.lower()


def refusal(request: Request, session: Session) -> str | None:
    """Why this POST is refused (a sentence), or None when it may proceed."""
    if not same_origin(request):
        return "the request comes from another site (Origin or Referer)"
    if session.host_checks_csrf or session.csrf_exempt:
        return None
    sent = request.field(session.csrf_field)
    if not session.csrf_token or not sent:
        return "the form's security token is missing: reload the page and try again"
    if not token_matches(sent, session.csrf_token):
        return "the form's security token does not match: reload the page and try again"
    return None
