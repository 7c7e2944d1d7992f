"""The dashboard's own small HTTP vocabulary: a :class:`Request` read from a WSGI
environ (or built by a framework adapter), a :class:`Response`, and the security
headers every response carries. No framework, no third-party code."""

from __future__ import annotations

import urllib.parse
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from http import HTTPStatus
from typing import Any

from mongosched._core import validate
from mongosched._core.validate import MAX_COUNT
from mongosched.errors import ConfigurationError, OutOfBounds

__all__ = [
    "MAX_FORM_BYTES",
    "BadInput",
    "Request",
    "Response",
    "SECURITY_HEADERS",
    "mounted_request",
    "query_string",
    "read_form",
    "redirect",
    "request_from_environ",
    "whole_number",
]


class BadInput(ConfigurationError):
    """A value of the query or of a form that its field does not take (a count not
    written in ASCII digits, such as ``page=²``): the page answers 400 with the
    message, which names the field."""


def whole_number(text: str, name: str, *, minimum: int = 1, maximum: int = MAX_COUNT) -> int:
    """The count ``text`` gives for the field ``name`` of the query or a form, written
    in ASCII digits: anything else raises :class:`BadInput`, a count beyond its bounds
    :class:`~mongosched.errors.OutOfBounds` (the page answers 400 either way)."""
    try:
        return validate.parse_whole(text, what=name, minimum=minimum, maximum=maximum)
    except OutOfBounds:
        raise
    except ConfigurationError as exc:
        raise BadInput(str(exc)) from None


MAX_FORM_BYTES = 64 * 1024
"""Forms are small (a few hidden fields): a bigger body is refused."""

SECURITY_HEADERS: tuple[tuple[str, str], ...] = (
    (
        "Content-Security-Policy",
        "default-src 'none'; style-src 'self'; script-src 'self'; img-src 'self' data:; "
        "form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
    ),
    ("X-Content-Type-Options", "nosniff"),
    ("X-Frame-Options", "DENY"),
    ("Referrer-Policy", "same-origin"),
    ("Cache-Control", "no-store"),
)
"""Sent with every page: nothing is framed, loaded from elsewhere or inlined as script."""


@dataclass
class Request:
    """One request, as the dashboard sees it whatever serves it.

    ``path`` is relative to where the dashboard is mounted (always starts with ``/``);
    ``root`` is the mount point's URL path (``""`` at the site root), so links are
    ``root + path``.
    """

    method: str
    path: str
    root: str = ""
    query: dict[str, list[str]] = field(default_factory=dict)
    form: dict[str, list[str]] = field(default_factory=dict)
    headers: dict[str, str] = field(default_factory=dict)
    """Header names in lower case."""
    cookies: dict[str, str] = field(default_factory=dict)
    scheme: str = "http"
    host: str = ""

    def arg(self, name: str, default: str = "") -> str:
        """The first query value of ``name`` (stripped), or ``default``."""
        values = self.query.get(name)
        return values[0].strip() if values else default

    def args(self, name: str) -> list[str]:
        """Every non-empty query value of ``name`` (``a=1&a=2``, or ``a=1,2``)."""
        out: list[str] = []
        for value in self.query.get(name, []):
            out.extend(item.strip() for item in value.split(",") if item.strip())
        return out

    def field(self, name: str, default: str = "") -> str:
        """The first form value of ``name``, or ``default``."""
        values = self.form.get(name)
        return values[0] if values else default

    def header(self, name: str) -> str | None:
        return self.headers.get(name.lower())

    @property
    def wants_html(self) -> bool:
        """Whether a browser asked (Accept names HTML); API clients get plain answers."""
        return "text/html" in (self.header("accept") or "")

    def url(self, path: str) -> str:
        """An absolute URL path under the mount point."""
        return self.root + path


@dataclass
class Response:
    """What a view returns: status, headers and body."""

    body: bytes | str = b""
    status: int = 200
    content_type: str = "text/html; charset=utf-8"
    headers: list[tuple[str, str]] = field(default_factory=list)
    secure_headers: bool = True

    @property
    def data(self) -> bytes:
        return self.body.encode("utf-8") if isinstance(self.body, str) else self.body

    @property
    def status_line(self) -> str:
        try:
            phrase = HTTPStatus(self.status).phrase
        except ValueError:
            phrase = "Unknown"
        return f"{self.status} {phrase}"

    def all_headers(self) -> list[tuple[str, str]]:
        """Every header to send, the security headers first (a view's own win)."""
        own = {name.lower() for name, _ in self.headers}
        out = [("Content-Type", self.content_type)]
        if self.secure_headers:
            out += [(k, v) for k, v in SECURITY_HEADERS if k.lower() not in own]
        out += self.headers
        out.append(("Content-Length", str(len(self.data))))
        return out


def redirect(location: str, status: int = 303) -> Response:
    """See other: after a POST, or to the login form."""
    return Response(b"", status=status, headers=[("Location", location)])


def _split_query(text: str) -> dict[str, list[str]]:
    return urllib.parse.parse_qs(text, keep_blank_values=True, max_num_fields=200)


def read_form(environ: Mapping[str, Any]) -> dict[str, list[str]]:
    """An urlencoded POST body (up to :data:`MAX_FORM_BYTES`); anything else reads as
    no fields. Raises ValueError for a body too big."""
    kind = str(environ.get("CONTENT_TYPE") or "").split(";")[0].strip().lower()
    try:
        length = int(environ.get("CONTENT_LENGTH") or 0)
    except ValueError:
        length = 0
    if length > MAX_FORM_BYTES:
        raise ValueError("request body too large")
    if length <= 0 or kind != "application/x-www-form-urlencoded":
        return {}
    body = environ["wsgi.input"].read(length)
    return _split_query(body.decode("utf-8", "replace"))


def _cookies(header: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for part in header.split(";"):
        name, sep, value = part.strip().partition("=")
        if sep and name and name not in out:
            out[name] = value.strip().strip('"')
    return out


def _headers(environ: Mapping[str, Any]) -> dict[str, str]:
    out = {}
    for key, value in environ.items():
        if key.startswith("HTTP_"):
            out[key[5:].replace("_", "-").lower()] = str(value)
    for key in ("CONTENT_TYPE", "CONTENT_LENGTH"):
        if environ.get(key):
            out[key.replace("_", "-").lower()] = str(environ[key])
    return out


def request_from_environ(
    environ: Mapping[str, Any], *, root: str | None = None, path: str | None = None
) -> Request:
    """A :class:`Request` from a WSGI environ: ``root`` defaults to ``SCRIPT_NAME``,
    ``path`` to ``PATH_INFO``. The form is read for POSTs (urlencoded only)."""
    method = str(environ.get("REQUEST_METHOD", "GET")).upper()
    headers = _headers(environ)
    raw_path = path if path is not None else str(environ.get("PATH_INFO") or "/")
    # PEP 3333: PATH_INFO is latin-1 decoded bytes; give the view the UTF-8 text.
    try:
        raw_path = raw_path.encode("latin-1").decode("utf-8")
    except (UnicodeEncodeError, UnicodeDecodeError):
        pass
    return Request(
        method=method,
        path=raw_path if raw_path.startswith("/") else "/" + raw_path,
        root=(root if root is not None else str(environ.get("SCRIPT_NAME") or "")).rstrip("/"),
        query=_split_query(str(environ.get("QUERY_STRING") or "")),
        form=read_form(environ) if method == "POST" else {},
        headers=headers,
        cookies=_cookies(headers.get("cookie", "")),
        scheme=str(environ.get("wsgi.url_scheme") or "http"),
        host=headers.get("host") or str(environ.get("SERVER_NAME") or ""),
    )


def mounted_request(
    *,
    method: str,
    full_path: str,
    path: str,
    query: Iterable[tuple[str, Iterable[str]]],
    form: Iterable[tuple[str, Iterable[str]]],
    headers: Iterable[tuple[str, str]],
    scheme: str,
    host: str,
) -> Request:
    """A :class:`Request` from what a host framework's own request says (the Flask and
    Django adapters): ``full_path`` is the request's whole URL path, ``path`` the part
    below the dashboard's mount point as the framework matched it (``""`` at the mount
    point), so ``root`` is what comes before it. ``query`` and ``form`` are each name
    with all its values; the form is kept for POSTs only."""
    tail = "/" + path
    if path and full_path.endswith(tail):
        root = full_path[: len(full_path) - len(tail)]
    else:
        root = full_path.rstrip("/")
    return Request(
        method=method,
        path=tail,
        root=root,
        query={name: list(values) for name, values in query},
        form={name: list(values) for name, values in form} if method == "POST" else {},
        headers={name.lower(): value for name, value in headers},
        scheme=scheme,
        host=host,
    )


def query_string(params: Iterable[tuple[str, str]]) -> str:
    """``?a=1&b=2`` from pairs (empty values left out), or ``""``."""
    kept = [(k, v) for k, v in params if v != ""]
    return "?" + urllib.parse.urlencode(kept) if kept else ""
