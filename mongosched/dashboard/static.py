"""The dashboard's assets (CSS, a small optional script), shipped in the package and
served from it: no CDN, nothing fetched from elsewhere."""

from __future__ import annotations

import hashlib
from functools import cache
from importlib import resources

from mongosched.dashboard.http import Response

__all__ = ["ASSETS", "asset"]

ASSETS = {
    "dashboard.css": "text/css; charset=utf-8",
    "dashboard.js": "text/javascript; charset=utf-8",
    "favicon.svg": "image/svg+xml",
}
"""The files served under ``static/``, and their types: nothing else is."""


@cache
def _read(name: str) -> tuple[bytes, str]:
    data = resources.files(__package__).joinpath("static").joinpath(name).read_bytes()
    return data, hashlib.sha256(data).hexdigest()[:16]


def asset(name: str, if_none_match: str | None = None) -> Response | None:
    """The response for ``static/<name>``, or None for a file that is not an asset."""
    kind = ASSETS.get(name)
    if kind is None:
        return None
    data, digest = _read(name)
    etag = f'"{digest}"'
    headers = [("ETag", etag), ("Cache-Control", "public, max-age=3600")]
    if if_none_match == etag:
        return Response(b"", status=304, content_type=kind, headers=headers)
    return Response(data, content_type=kind, headers=headers)
