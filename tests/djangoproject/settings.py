"""Settings of the Django project the integration tests run (tests/test_django.py).

The tests choose the store's URI (``MONGOSCHED_DJANGO_URI``: ``memory://name``, or a
database on the server of ``MONGOSCHED_TEST_URI``) and whether the runner runs in the
web process (``MONGOSCHED_DJANGO_RUN_IN_PROCESS=1``).
"""

import importlib.util
import os

SECRET_KEY = "mongosched-tests"
DEBUG = False
ALLOWED_HOSTS = ["*"]
USE_TZ = True
TIME_ZONE = "UTC"
ROOT_URLCONF = "tests.djangoproject.urls"
# Django 6 has the tasks framework built in (django.tasks); before, it is the
# django-tasks package, installed as an app.
BUILT_IN_TASKS = importlib.util.find_spec("django.tasks") is not None
INSTALLED_APPS = [
    "django.contrib.contenttypes",
    *([] if BUILT_IN_TASKS else ["django_tasks"]),
    "mongosched.contrib.django",
    "tests.djangoproject.testapp",
]
DATABASES = {"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": ":memory:"}}
DEFAULT_AUTO_FIELD = "django.db.models.AutoField"

MONGOSCHED = {
    "URI": os.environ.get("MONGOSCHED_DJANGO_URI", "memory://djangoproject"),
    "WORKERS": 2,
    "LEASE_DURATION": 5.0,
    "POLL_INTERVAL": 0.05,
    "RUN_IN_PROCESS": os.environ.get("MONGOSCHED_DJANGO_RUN_IN_PROCESS") == "1",
    "TASK_MODULES": ["tests.djangoproject.testapp.more_tasks"],
}

TASKS = {
    "default": {
        "BACKEND": "mongosched.contrib.django.TasksBackend",
        "QUEUES": ["default", "emails"],
    }
}
