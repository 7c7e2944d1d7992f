"""gunicorn settings for ``--preload``, as the docs advise: the master loads Django's
own WSGI application (no runner there) and each worker starts its runner once it is
initialised (``post_worker_init``: ``post_fork`` runs before a worker loads Django).

    gunicorn -c python:tests.djangoproject.gunicorn_preload \\
        'django.core.wsgi:get_wsgi_application()'
"""

from typing import Any

preload_app = True


def post_worker_init(worker: Any) -> None:
    from mongosched.contrib.django import start_runner

    start_runner()
