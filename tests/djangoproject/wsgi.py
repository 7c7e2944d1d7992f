"""The test project's WSGI entry point (the gunicorn tests), as the docs advise: with
``MONGOSCHED["RUN_IN_PROCESS"]`` on, every process that loads it runs a runner."""

import os

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.djangoproject.settings")

from mongosched.contrib.django.wsgi import get_wsgi_application  # noqa: E402

application = get_wsgi_application()
