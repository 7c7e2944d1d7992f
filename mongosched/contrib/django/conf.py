"""The project's shared :class:`~mongosched.App`, made from ``settings.MONGOSCHED``.

It follows the setting: when ``MONGOSCHED`` changes (``override_settings`` in tests),
the same App takes the new store and options (:func:`~mongosched.app.reconfigure`),
so tasks registered on it at import follow, and tests never write into the database
of the development settings.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.core.signals import setting_changed

from mongosched.app import App, reconfigure
from mongosched.contrib import app_from_settings, positive_int
from mongosched.contrib.django.taskrun import register
from mongosched.errors import ConfigurationError

__all__ = ["get_app", "options"]

SETTING = "MONGOSCHED"
DEFAULTS: dict[str, Any] = {
    "WORKERS": 4,
    "RUN_IN_PROCESS": False,
    "TASK_MODULES": (),
    "AUTODISCOVER": True,
}
OWN_KEYS = ("TASK_MODULES", "AUTODISCOVER", "DJANGO_DATABASE")
PROCESS_KEYS = ("WORKERS", "RUN_IN_PROCESS", *OWN_KEYS)
"""Settings that say how processes use the App, not what the App is."""

_app: App | None = None
_made_from: dict[str, Any] | None = None
"""The settings ``_app`` is configured from (but :data:`PROCESS_KEYS`)."""
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
    global _app, _made_from
    app = _app
    if app is not None:
        return app
    with _lock:
        if _app is None:
            merged = options()
            made = _make(merged)
            register(made)
            _app, _made_from = made, _app_settings(merged)
        return _app


def _app_settings(merged: Mapping[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in merged.items() if key not in PROCESS_KEYS}


def _make(merged: Mapping[str, Any]) -> App:
    """The App of ``merged``; with ``DJANGO_DATABASE`` (a Django database alias), on
    that MongoDB database's own client, its jobs joining the project's transactions
    (see :mod:`.transactions`)."""
    alias = merged.get("DJANGO_DATABASE")
    if alias is not None:
        from mongosched.contrib.django.transactions import AtomicBlocks, database_of

        if "URI" in merged or "DATABASE" in merged:
            raise ImproperlyConfigured(
                "settings.MONGOSCHED: give DJANGO_DATABASE or URI/DATABASE, not both"
            )
        merged = {**merged, "DATABASE": database_of(alias)}
    try:
        made = app_from_settings(merged, where="settings.MONGOSCHED", ignore=OWN_KEYS)
    except ConfigurationError as exc:
        raise ImproperlyConfigured(str(exc)) from None
    if alias is not None:
        made.add_transaction_integration(AtomicBlocks(alias, get_app))
    return made


def follow_settings(*, setting: str, **kwargs: Any) -> None:
    """``setting_changed`` receiver: when ``MONGOSCHED`` changes, the shared App takes
    the store and options of the new settings (its tasks and listeners stay). Bad new
    settings raise :class:`ImproperlyConfigured` here, so ``override_settings`` fails at
    once and the App is left as it was."""
    global _made_from
    if setting != SETTING:
        return
    with _lock:
        if _app is None:
            return  # made from the settings of the moment when first used
        merged = options()
        wanted = _app_settings(merged)
        if wanted == _made_from:
            return  # WORKERS or RUN_IN_PROCESS changed: nothing the App holds
        reconfigure(_app, _make(merged))
        _made_from = wanted


setting_changed.connect(follow_settings, dispatch_uid="mongosched.follow_settings")
