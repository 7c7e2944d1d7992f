"""The standalone dashboard's authentication: one shared token.

A request is authenticated by the token as an HTTP Bearer token
(``Authorization: Bearer T``), as the password of HTTP Basic auth (any user name), or
by the session cookie the login form sets. The cookie is signed (HMAC-SHA256 with a
key derived from the token: changing the token signs everyone out), expires, and is
``HttpOnly``, ``SameSite=Lax`` and, behind https, ``Secure``. Secrets are compared in
constant time.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass

from mongosched.dashboard.http import Request
from mongosched.errors import ConfigurationError

__all__ = ["COOKIE", "MIN_TOKEN_LENGTH", "Identity", "TokenAuth"]

COOKIE = "mongosched_session"
MIN_TOKEN_LENGTH = 16
"""Shorter tokens are accepted, with a warning."""


@dataclass(frozen=True)
class Identity:
    """How a request proved it holds the token, and its session (for CSRF)."""

    method: str
    """``bearer``, ``basic`` or ``session``."""
    session_id: str | None = None
    user: str | None = None


class TokenAuth:
    """Checks requests against ``token``; makes and reads the signed session cookie."""

    def __init__(
        self,
        token: str,
        *,
        max_age: float = 12 * 3600,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if not isinstance(token, str) or not token.strip():
            raise ConfigurationError(
                "dashboard: a token is required (--token or MONGOSCHED_DASHBOARD_TOKEN)"
            )
        self._token = hashlib.sha256(token.encode("utf-8")).digest()
        self._key = hmac.new(
            token.encode("utf-8"), b"mongosched dashboard session v1", hashlib.sha256
        ).digest()
        self.max_age = max_age
        self.clock = clock

    # The token ----------------------------------------------------------------------------
    def check_token(self, candidate: str) -> bool:
        """Whether ``candidate`` is the token (compared as digests: in constant time,
        whatever the lengths)."""
        digest = hashlib.sha256(candidate.encode("utf-8", "surrogateescape")).digest()
        return hmac.compare_digest(digest, self._token)

    def authenticate(self, request: Request) -> Identity | None:
        """Who the request is, or None (no valid token, Basic password or session)."""
        header = request.header("authorization") or ""
        scheme, _, value = header.partition(" ")
        scheme = scheme.lower()
        value = value.strip()
        if scheme == "bearer" and value:
            return Identity("bearer", user="token") if self.check_token(value) else None
        if scheme == "basic" and value:
            try:
                user, sep, password = (
                    base64.b64decode(value, validate=True).decode("utf-8").partition(":")
                )
            except (binascii.Error, UnicodeDecodeError):
                return None
            if sep and self.check_token(password):
                return Identity("basic", session_id=self.session_of(request), user=user or None)
            return None
        session = self.read_session(request.cookies.get(COOKIE, ""), login=True)
        return Identity("session", session_id=session, user=None) if session else None

    # Sessions ------------------------------------------------------------------------------
    def _sign(self, payload: str) -> str:
        mac = hmac.new(self._key, payload.encode("ascii"), hashlib.sha256).digest()
        return base64.urlsafe_b64encode(mac).decode("ascii").rstrip("=")

    def new_session(self, *, login: bool) -> tuple[str, str]:
        """A new session: its id and the cookie value (``login``: it authenticates;
        else it only carries the CSRF session of a Basic-auth browser)."""
        session_id = secrets.token_urlsafe(18)
        expires = int(self.clock() + self.max_age)
        payload = f"{'L' if login else 'C'}.{session_id}.{expires}"
        return session_id, f"{payload}.{self._sign(payload)}"

    def read_session(self, value: str, *, login: bool) -> str | None:
        """The session id of a cookie value, if its signature holds and it has not
        expired (and, with ``login``, it came from the login form)."""
        payload, _, signature = value.rpartition(".")
        if not payload or not hmac.compare_digest(signature.encode(), self._sign(payload).encode()):
            return None
        kind, session_id, expires = (payload.split(".") + ["", "", ""])[:3]
        if login and kind != "L":
            return None
        if not (expires.isascii() and expires.isdigit()) or int(expires) < self.clock():
            return None
        return session_id or None

    def session_of(self, request: Request) -> str | None:
        return self.read_session(request.cookies.get(COOKIE, ""), login=False)

    def csrf_token(self, session_id: str) -> str:
        """The CSRF token of a session (derived: nothing to store server-side)."""
        return self._sign(f"csrf.{session_id}")

    @staticmethod
    def cookie(value: str, *, path: str, secure: bool, max_age: float | None) -> str:
        """The ``Set-Cookie`` header value (``max_age`` 0 deletes it)."""
        parts = [f"{COOKIE}={value}", f"Path={path or '/'}", "HttpOnly", "SameSite=Lax"]
        if max_age is not None:
            parts.append(f"Max-Age={int(max_age)}")
        if secure:
            parts.append("Secure")
        return "; ".join(parts)
