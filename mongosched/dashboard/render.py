"""HTML for the dashboard, escaped by default.

Every value put into a page goes through :func:`esc` (``html.escape`` with quotes)
unless it is :class:`Markup`, which only this module's helpers and templates make: job
arguments, results, errors, task and queue names are always text, never HTML.
"""

from __future__ import annotations

import html
import json
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from mongosched import __version__
from mongosched.dashboard.http import Request, query_string

__all__ = [
    "Context",
    "Markup",
    "ago",
    "badge",
    "duration",
    "esc",
    "fmt",
    "hidden_fields",
    "join",
    "page",
    "pretty",
    "stamp",
    "table",
    "when",
]

MAX_VALUE_CHARS = 100_000
"""A longer argument, result or traceback is cut (and says so)."""


class Markup(str):
    """Text that is already HTML (made here from escaped parts)."""

    __slots__ = ()

    def __add__(self, other: str) -> Markup:
        return Markup(str.__add__(self, esc(other)))

    def __radd__(self, other: str) -> Markup:
        return Markup(str.__add__(esc(other), self))


def esc(value: Any) -> Markup:
    """``value`` as HTML text: Markup as it is, anything else escaped (quotes too)."""
    if isinstance(value, Markup):
        return value
    return Markup(html.escape("" if value is None else str(value), quote=True))


def fmt(template: str, *args: Any, **values: Any) -> Markup:
    """``template.format(...)`` with every argument escaped (Markup kept as it is)."""
    return Markup(
        template.format(*(esc(a) for a in args), **{k: esc(v) for k, v in values.items()})
    )


def join(parts: Iterable[Any], separator: str = "") -> Markup:
    return Markup(separator.join(esc(part) for part in parts))


@dataclass
class Context:
    """What every page needs besides its data: the request (links are made under its
    mount point), the CSRF field for forms, who is signed in and how to sign out."""

    request: Request
    csrf_field: str = ""
    csrf_token: str = ""
    user: str | None = None
    logout: bool = False
    title: str = "mongosched"

    def url(self, path: str, params: Iterable[tuple[str, str]] = ()) -> str:
        return self.request.url(path) + query_string(params)

    def csrf(self) -> Markup:
        """The hidden CSRF field of a form (nothing when the host checks CSRF its own way
        without a field)."""
        if not self.csrf_field:
            return Markup("")
        return fmt('<input type="hidden" name="{}" value="{}">', self.csrf_field, self.csrf_token)

    def post_form(
        self,
        path: str,
        label: str,
        *,
        fields: Iterable[tuple[str, str]] = (),
        css: str = "button",
    ) -> Markup:
        """A one-button form that POSTs to ``path``."""
        return fmt(
            '<form method="post" action="{}" class="inline">{}{}'
            '<button type="submit" class="{}">{}</button></form>',
            self.url(path),
            self.csrf(),
            hidden_fields(fields),
            css,
            label,
        )


NAV = (
    ("/", "Overview"),
    ("/jobs", "Jobs"),
    ("/schedules", "Schedules"),
    ("/runners", "Runners"),
    ("/audit", "Audit"),
)


def page(
    ctx: Context,
    title: str,
    body: Markup,
    *,
    section: str = "/",
    notice: Markup | None = None,
    refresh: str = "",
) -> str:
    """A whole page: header with navigation, the notice (an action's result), the body.
    ``refresh``: the optional script offers to reload it every few seconds (``"1"``:
    when the reader turned it on; ``"running"``: a running job's page, on unless the
    reader turned it off)."""
    links = join(
        fmt(
            '<a href="{}"{}>{}</a>',
            ctx.url(path),
            Markup(' class="active" aria-current="page"') if path == section else Markup(""),
            label,
        )
        for path, label in NAV
    )
    account = Markup("")
    if ctx.logout:
        account = ctx.post_form("/logout", "Sign out", css="link")
    elif ctx.user:
        account = fmt('<span class="user">{}</span>', ctx.user)
    return fmt(
        """<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{title} · {site}</title>
<link rel="icon" href="{icon}" type="image/svg+xml">
<link rel="stylesheet" href="{css}">
<script src="{js}" defer></script>
</head><body{refresh}>
<header class="top"><a class="brand" href="{home}">
<span class="logo" aria-hidden="true"></span>{site}</a>
<nav>{links}<a href="{metrics}">Metrics</a></nav><div class="account">{account}</div></header>
<main>{notice}<h1>{title}</h1>
{body}</main>
<footer>mongosched {version} · {now} UTC</footer>
</body></html>
""",
        title=title,
        site=ctx.title,
        css=ctx.url("/static/dashboard.css"),
        icon=ctx.url("/static/favicon.svg"),
        refresh=fmt(' data-refresh="{}"', refresh) if refresh else Markup(""),
        js=ctx.url("/static/dashboard.js"),
        home=ctx.url("/"),
        links=links,
        metrics=ctx.url("/metrics"),
        account=account,
        notice=notice or Markup(""),
        body=body,
        version=__version__,
        now=datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M:%S"),
    )


def hidden_fields(pairs: Iterable[tuple[str, str]]) -> Markup:
    return join(fmt('<input type="hidden" name="{}" value="{}">', k, v) for k, v in pairs)


def table(
    headers: Sequence[Any], rows: Iterable[Sequence[Any]], *, empty: str, css: str = ""
) -> Markup:
    """A table (cells escaped unless Markup); ``empty`` says what no rows mean."""
    body = [fmt("<tr>{}</tr>", join(fmt("<td>{}</td>", cell) for cell in row)) for row in rows]
    if not body:
        return fmt('<p class="empty">{}</p>', empty)
    head = join(fmt('<th scope="col">{}</th>', h) for h in headers)
    return fmt(
        '<div class="table-wrap"><table class="{}"><thead><tr>{}</tr></thead>'
        "<tbody>{}</tbody></table></div>",
        css,
        head,
        join(body),
    )


def badge(status: Any) -> Markup:
    text = str(status)
    return fmt('<span class="badge s-{}">{}</span>', text.replace(" ", "-"), text)


def stamp(value: datetime | None) -> Markup:
    """A UTC time, with its ISO form as the tooltip; a dash for none."""
    if value is None:
        return Markup('<span class="muted">—</span>')
    utc = value.astimezone(timezone.utc)
    return fmt('<time datetime="{}">{}</time>', utc.isoformat(), utc.strftime("%Y-%m-%d %H:%M:%S"))


def duration(seconds: float | None) -> str:
    """``45 s``, ``12 min``, ``3 h 5 min``, ``2 d 4 h``; a dash for none."""
    if seconds is None or math.isnan(seconds):
        return "—"
    s = abs(seconds)
    sign = "-" if seconds < 0 else ""
    if s < 1:
        return f"{sign}{s * 1000:.0f} ms"
    if s < 60:
        return f"{sign}{s:.0f} s"
    if s < 3600:
        minutes, rest = divmod(round(s), 60)
        return f"{sign}{minutes} min" + (f" {rest} s" if rest and s < 600 else "")
    if s < 86400:
        hours, rest = divmod(round(s) // 60, 60)
        return f"{sign}{hours} h" + (f" {rest} min" if rest else "")
    days, rest = divmod(round(s) // 3600, 24)
    return f"{sign}{days} d" + (f" {rest} h" if rest else "")


def ago(value: datetime | None, now: datetime) -> Markup:
    """A time as "3 min ago" / "in 5 s", the exact time as the tooltip."""
    if value is None:
        return Markup('<span class="muted">—</span>')
    delta = (now - value).total_seconds()
    if abs(delta) < 1:
        text = "just now"
    else:
        text = f"{duration(delta)} ago" if delta >= 0 else f"in {duration(-delta)}"
    return fmt(
        '<time datetime="{}" title="{}">{}</time>',
        value.astimezone(timezone.utc).isoformat(),
        value.astimezone(timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC"),
        text,
    )


def when(value: datetime | None, now: datetime) -> Markup:
    """The exact time, and how long ago (or how soon), muted."""
    if value is None:
        return stamp(None)
    return stamp(value) + fmt(' <span class="muted">({})</span>', ago(value, now))


def pretty(value: Any) -> Markup:
    """A payload or result as indented JSON-like text in a ``<pre>`` (never HTML)."""
    try:
        text = json.dumps(value, indent=2, default=repr, ensure_ascii=False, sort_keys=False)
    except (TypeError, ValueError):
        text = repr(value)
    return code_block(text)


def code_block(text: str, css: str = "code") -> Markup:
    cut = ""
    if len(text) > MAX_VALUE_CHARS:
        cut = f"\n… ({len(text) - MAX_VALUE_CHARS} more characters not shown)"
        text = text[:MAX_VALUE_CHARS]
    return fmt('<pre class="{}">{}{}</pre>', css, text, cut)
