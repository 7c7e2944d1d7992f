"""The app that ``mongosched worker --processes N`` runs in tests/processes/test_supervisor.py.

``tests.support.worker_app``'s ``record`` task (every run writes a document to the side
collection ``runs``), on the database named by ``MONGOSCHED_TEST_WORKER_URI``, with the
lease of ``MONGOSCHED_TEST_WORKER_LEASE`` seconds (default 1.5).
"""

from __future__ import annotations

import os

from tests.support import worker_app

app = worker_app.build(
    os.environ["MONGOSCHED_TEST_WORKER_URI"],
    float(os.environ.get("MONGOSCHED_TEST_WORKER_LEASE", "1.5")),
    0.05,
)
