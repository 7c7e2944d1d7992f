"""gunicorn settings for ``--preload`` with the Flask site, as the docs advise: the
master creates the app (``SITE_RUN_IN_PROCESS`` off: no runner there) and each worker
starts its runner once it is initialised.

    gunicorn -c python:tests.support.flask_gunicorn_preload \\
        'tests.support.flask_site:create_app()'
"""

from typing import Any

preload_app = True


def post_worker_init(worker: Any) -> None:
    from tests.support.flask_site import sched

    sched.start_runner()
