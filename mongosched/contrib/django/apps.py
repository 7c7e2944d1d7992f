"""The Django app config: builds the shared App, discovers tasks, wires the runner."""

from __future__ import annotations

from importlib import import_module

from django.apps import AppConfig, apps
from django.core.signals import request_started
from django.utils.module_loading import autodiscover_modules


class MongoschedConfig(AppConfig):  # type: ignore[misc]  # Django is untyped here
    name = "mongosched.contrib.django"
    label = "mongosched"
    verbose_name = "mongosched"
    default = True

    def ready(self) -> None:
        from mongosched.contrib.django.conf import get_app, options
        from mongosched.contrib.django.inprocess import on_request_started

        get_app()  # fail at start-up, not at the first schedule(), on bad settings
        settings = options()
        if settings["AUTODISCOVER"]:
            autodiscover_modules("tasks")
        for module in settings["TASK_MODULES"]:
            import_module(module)
        request_started.connect(on_request_started, dispatch_uid="mongosched.run_in_process")
        if apps.is_installed("django.contrib.admin"):
            from mongosched.contrib.django.dashboard import link_from_admin

            link_from_admin()
