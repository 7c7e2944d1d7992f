from django.urls import path

from . import views

urlpatterns = [
    path("ping/", views.ping),
    path("pid/", views.pid),
    path("add/", views.schedule_add),
    path("jobs/<str:job_id>/", views.job_detail),
    path("multiply/", views.enqueue_multiply),
    path("results/<str:result_id>/", views.result_detail),
]
