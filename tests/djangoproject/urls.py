from django.contrib import admin
from django.urls import include, path

from . import views

urlpatterns = [
    path("admin/mongosched/", include("mongosched.contrib.django.urls")),
    path("admin/", admin.site.urls),
    path("ping/", views.ping),
    path("pid/", views.pid),
    path("add/", views.schedule_add),
    path("jobs/<str:job_id>/", views.job_detail),
    path("multiply/", views.enqueue_multiply),
    path("results/<str:result_id>/", views.result_detail),
]
