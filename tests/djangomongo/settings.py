"""Settings of the Django-on-MongoDB test project: its database is the server of
``MONGOSCHED_DJANGO_URI`` (a database name included), and mongosched uses that
database's client (``DJANGO_DATABASE``), with no URI of its own."""

import os

SECRET_KEY = "test"
USE_TZ = True
INSTALLED_APPS = ["mongosched.contrib.django", "tests.djangomongo.shop"]
DATABASES = {
    "default": {
        "ENGINE": "django_mongodb_backend",
        "HOST": os.environ["MONGOSCHED_DJANGO_URI"],
        "NAME": os.environ["MONGOSCHED_DJANGO_DB"],
    }
}
DEFAULT_AUTO_FIELD = "django_mongodb_backend.fields.ObjectIdAutoField"
MONGOSCHED = {"DJANGO_DATABASE": "default", "POLL_INTERVAL": 0.05}
