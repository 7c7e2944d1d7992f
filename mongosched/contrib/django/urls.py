"""The dashboard's URLs: ``path("admin/mongosched/", include("mongosched.contrib.django.urls"))``
(any prefix works; put it before ``admin.site.urls`` when it is under ``admin/``)."""

from __future__ import annotations

from django.urls import path

from mongosched.contrib.django.dashboard import dashboard

app_name = "mongosched"

urlpatterns = [
    path("", dashboard, name="dashboard"),
    path("<path:path>", dashboard, name="dashboard-page"),
]
