"""Settings of the Django project the integration tests run (tests/contrib/test_django.py).

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
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    *([] if BUILT_IN_TASKS else ["django_tasks"]),
    "mongosched.contrib.django",
    "tests.djangoproject.testapp",
]
# The admin, sessions and authentication: the dashboard is mounted for staff (urls.py).
MIDDLEWARE = [
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
]
TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ]
        },
    }
]
# Test users' passwords: a fast hash (the default takes most of a second per login).
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
# In memory, shared by the threads of this process (a live server's threads see the
# users the test made): SQLite's shared cache.
DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": "file:mongosched_djangoproject?mode=memory&cache=shared",
    }
}
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
