"""Test support for the dashboard: a tiny WSGI client and an app with jobs of every
kind."""

from __future__ import annotations

import base64
import io
import logging
import re
import urllib.parse
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from mongosched import App
from mongosched.testing import drain

TOKEN = "test-dashboard-token-0123456789"
XSS = "<script>alert(1)</script>"

# Where a sign-in or an action may send the browser: a path under the dashboard, as a
# browser reads it (WHATWG URL parsing: leading and trailing C0 controls and spaces
# stripped, tabs and newlines removed anywhere, a backslash a slash in the path), given
# back as the browser would send it; anything else sends it to the dashboard's home.
NEXT_TARGETS = [
    ("/jobs?task=a", "/jobs?task=a"),
    ("/jobs?status=failed&status=dead&page=2", "/jobs?status=failed&status=dead&page=2"),
    ("/jobs/0123456789abcdef01234567", "/jobs/0123456789abcdef01234567"),
    ("/", "/"),
    ("/jobs?next=//evil.example", "/jobs?next=//evil.example"),  # a query is not a host
    ("//evil.example/", "/"),
    ("///evil.example/", "/"),
    ("https://evil.example/", "/"),
    ("https:evil.example", "/"),
    ("https:/evil.example", "/"),
    ("http:evil.example", "/"),
    ("javascript:alert(1)", "/"),
    ("JaVaScRiPt:alert(1)", "/"),
    (" javascript:alert(1)", "/"),
    ("data:text/html,<script>alert(1)</script>", "/"),
    ("/\\evil.example", "/"),
    ("\\/evil.example", "/"),
    ("\\\\evil.example", "/"),
    ("/\t/other.host/x", "/"),  # the reported one: a browser drops the tab
    ("/\r/other.host/x", "/"),
    ("/\n/other.host/x", "/"),
    ("/\r\n/other.host/x", "/"),
    ("\t//other.host/x", "/"),
    ("/\t\\other.host/x", "/"),
    ("/\\\tother.host/x", "/"),
    (" //other.host/x", "/"),  # leading spaces and C0 controls are stripped
    ("\x00//other.host/x", "/"),
    ("\x1f //other.host/x", "/"),
    ("/jobs ", "/jobs"),  # ... and trailing ones
    ("/jobs\t", "/jobs"),
    ("/jo\tbs", "/jobs"),
    ("/%2F/other.host/x", "/"),  # an encoded separator: a second slash once decoded
    ("/%2f%2fother.host", "/"),
    ("/%5C/other.host", "/"),
    ("/%5c%5cother.host", "/"),
    ("/%09/other.host/x", "/%09/other.host/x"),  # encoded: a path segment, no more
    ("/../../other-app/", "/"),  # dot segments would climb out of the mount point
    ("/jobs/../../x", "/"),
    ("/%2e%2e/other-app", "/"),
    ("/.%2E/other-app", "/"),
    ("/%2E./other-app", "/"),
    ("/./jobs", "/"),
    ("/jobs\\..\\..\\x", "/"),
    ("/jobs/..", "/"),
    ("/.hidden/x", "/.hidden/x"),  # a dot inside a name is no dot segment
    ("/jobs?x=..", "/jobs?x=.."),
    ("", "/"),
    ("jobs", "/"),
    ("./jobs", "/"),
    ("?next=x", "/"),
    ("#x", "/"),
    ("\u3000//other.host", "/"),  # not a C0 space: then it does not start with "/"
    ("/jobs/\u00e9", "/jobs/%C3%A9"),  # sent percent-encoded, as a browser sends it
    ("/\uff0f/other.host", "/%EF%BC%8F/other.host"),  # a full-width solidus: no slash
    ("/\u2215other.host", "/%E2%88%95other.host"),
    ("/jobs?task=\u00e9", "/jobs?task=%C3%A9"),
    ("/a b", "/a%20b"),
    ('/a"<>`{}', "/a%22%3C%3E%60%7B%7D"),
    ("/\x0b/other.host", "/%0B/other.host"),  # other controls are encoded, not dropped
    ("/\x7f", "/%7F"),
    ("/\ud800", "/%3F"),  # a lone surrogate cannot be sent: a replacement
    ("/jobs#frag", "/jobs"),  # a fragment stays in the browser: dropped
    ("/jobs?a=1#//evil.example", "/jobs?a=1"),
    ("/jobs?a='b'", "/jobs?a=%27b%27"),
]


@dataclass
class Reply:
    status: int
    headers: list[tuple[str, str]]
    body: str

    def header(self, name: str) -> str | None:
        for key, value in self.headers:
            if key.lower() == name.lower():
                return value
        return None

    def all(self, name: str) -> list[str]:
        return [v for k, v in self.headers if k.lower() == name.lower()]

    def csrf(self) -> str:
        found = re.search(r'name="csrf_token" value="([^"]*)"', self.body)
        assert found, "no CSRF field on the page"
        return found[1]

    def links(self, pattern: str) -> list[str]:
        return re.findall(r'href="(' + pattern + r')"', self.body)


@dataclass
class Client:
    """Calls a WSGI application in-process, keeping cookies like a browser."""

    wsgi: Callable[..., Iterable[bytes]]
    cookies: dict[str, str] = field(default_factory=dict)
    headers: dict[str, str] = field(default_factory=dict)
    host: str = "dash.test"

    def request(
        self,
        method: str,
        path: str,
        *,
        form: Iterable[tuple[str, str]] | Mapping[str, str] | None = None,
        headers: Mapping[str, str] | None = None,
        scheme: str = "http",
    ) -> Reply:
        path, _, query = path.partition("?")
        body = b""
        environ: dict[str, Any] = {
            "REQUEST_METHOD": method,
            "SCRIPT_NAME": "",
            "PATH_INFO": urllib.parse.unquote(path).encode("utf-8").decode("latin-1"),
            "QUERY_STRING": query,
            "SERVER_NAME": "dash.test",
            "SERVER_PORT": "80",
            "SERVER_PROTOCOL": "HTTP/1.1",
            "HTTP_HOST": self.host,
            "wsgi.url_scheme": scheme,
            "wsgi.errors": io.StringIO(),
        }
        if form is not None:
            items = form.items() if isinstance(form, Mapping) else form
            body = urllib.parse.urlencode(list(items)).encode()
            environ["CONTENT_TYPE"] = "application/x-www-form-urlencoded"
        environ["CONTENT_LENGTH"] = str(len(body))
        environ["wsgi.input"] = io.BytesIO(body)
        if self.cookies:
            environ["HTTP_COOKIE"] = "; ".join(f"{k}={v}" for k, v in self.cookies.items())
        for name, value in {**self.headers, **(headers or {})}.items():
            environ["HTTP_" + name.upper().replace("-", "_")] = value
        seen: dict[str, Any] = {}

        def start_response(status: str, response_headers: list[tuple[str, str]]) -> None:
            seen["status"] = int(status.split()[0])
            seen["headers"] = response_headers

        data = b"".join(self.wsgi(environ, start_response))
        reply = Reply(seen["status"], seen["headers"], data.decode("utf-8"))
        for cookie in reply.all("Set-Cookie"):
            name, _, rest = cookie.partition("=")
            value = rest.split(";")[0]
            if "Max-Age=0" in cookie:
                self.cookies.pop(name, None)
            else:
                self.cookies[name] = value
        return reply

    def get(self, path: str, **options: Any) -> Reply:
        return self.request("GET", path, **options)

    def post(self, path: str, form: Any = (), **options: Any) -> Reply:
        return self.request("POST", path, form=form, **options)


def bearer() -> dict[str, str]:
    return {"Authorization": f"Bearer {TOKEN}"}


def basic(user: str = "anyone", password: str = TOKEN) -> dict[str, str]:
    value = base64.b64encode(f"{user}:{password}".encode()).decode()
    return {"Authorization": f"Basic {value}"}


def populate(app: App) -> dict[str, Any]:
    """Jobs of every kind, with hostile text in names, arguments and errors: failed
    (``boom``), completed (``add``), pending in another queue (``later``), a schedule."""

    @app.task(name="boom", retry=0)
    def boom(text: str) -> None:
        raise ValueError(f"bad input {text}")

    @app.task(name=XSS, retry=0, queue="hostile")
    def hostile(value: Any) -> None:
        logging.getLogger("hostile").warning("about to fail: %s", XSS)  # kept with the job
        raise RuntimeError(XSS)

    @app.task(name="add")
    def add(a: int, b: int) -> int:
        return a + b

    @app.task(name="later", queue="slow")
    def later() -> None: ...

    @app.task(name="tick", every=3600)
    def tick() -> None: ...

    failed = [boom.schedule(f"<b>{i}</b>") for i in range(3)]
    hostile.schedule({"html": XSS})
    done = add.schedule(2, 3)
    pending = later.configure(delay=3600).schedule()
    app.ensure_schedules()
    drain(app)
    return {"failed": failed, "done": done, "pending": pending}


def hold(app: App, task: str, owner: str) -> Any:
    """Claim the due job of ``task`` as the runner ``owner`` would (it is then running,
    with a lease), without running it."""
    claimed = app.store.claims.claim(
        owner=owner, tasks=[task], queues=None, now=app.now(), lease_duration=60
    )
    assert claimed is not None, f"no due job of {task}"
    return claimed
