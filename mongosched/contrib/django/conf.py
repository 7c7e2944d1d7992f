"""The project's shared :class:`~mongosched.App`, made from ``settings.MONGOSCHED``."""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

from ...app import App
from ...errors import ConfigurationError
from .. import app_from_settings, positive_int
from .taskrun import register

__all__ = ["get_app", "options"]

SETTING = "MONGOSCHED"
DEFAULTS: dict[str, Any] = {
    "WORKERS": 4,
    "RUN_IN_PROCESS": False,
    "TASK_MODULES": (),
    "AUTODISCOVER": True,
}
OWN_KEYS = ("TASK_MODULES", "AUTODISCOVER")

_app: App | None = None
_lock = threading.Lock()


def options() -> dict[str, Any]:
    """``settings.MONGOSCHED`` with defaults filled in."""
    raw = getattr(settings, SETTING, None)
    if raw is None:
        raise ImproperlyConfigured(
            "settings.MONGOSCHED is not set; e.g. MONGOSCHED = "
            '{"URI": "mongodb://localhost/myproject"} (or "memory://" for tests and demos)'
        )
    if not isinstance(raw, Mapping):
        raise ImproperlyConfigured(f"settings.MONGOSCHED must be a dict, not {type(raw).__name__}")
    merged = {**DEFAULTS, **raw}
    try:
        positive_int(merged["WORKERS"], what="settings.MONGOSCHED['WORKERS']")
    except ConfigurationError as exc:
        raise ImproperlyConfigured(str(exc)) from None
    modules = merged["TASK_MODULES"]
    if isinstance(modules, str) or not all(isinstance(m, str) for m in modules):
        raise ImproperlyConfigured(
            "settings.MONGOSCHED['TASK_MODULES'] must be a list of module paths"
        )
    return merged


def get_app() -> App:
    """The project's :class:`~mongosched.App` (made from the settings on first use).

    Every ``@app.task`` of the project registers on it, so the web processes and the
    ``manage.py mongosched worker`` processes know the same tasks.
    """
    global _app
    app = _app
    if app is not None:
        return app
    with _lock:
        if _app is None:
            try:
                made = app_from_settings(options(), where="settings.MONGOSCHED", ignore=OWN_KEYS)
            except ConfigurationError as exc:
                raise ImproperlyConfigured(str(exc)) from None
            register(made)
            _app = made
        return _app
