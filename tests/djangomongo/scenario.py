"""The Django-on-MongoDB scenarios of tests/contrib/test_django_mongodb.py, run in a process of
their own (Django is configured once per process): prints one JSON line of findings.

    MONGOSCHED_DJANGO_URI=... MONGOSCHED_DJANGO_DB=... python -m tests.djangomongo.scenario
"""

from __future__ import annotations

import json
import os

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.djangomongo.settings")

import django  # noqa: E402

django.setup()

from django.db import connection  # noqa: E402
from django_mongodb_backend import transaction  # noqa: E402

from mongosched import JobStatus  # noqa: E402
from mongosched.contrib.django import get_app  # noqa: E402
from mongosched.testing import drain  # noqa: E402
from tests.djangomongo.shop.models import Order  # noqa: E402
from tests.djangomongo.shop.tasks import send_receipt, ship  # noqa: E402


def main() -> None:
    app = get_app()
    app.ensure_indexes()  # collections exist before a transaction writes in them
    with connection.schema_editor() as editor:
        editor.create_model(Order)
    created: list[str] = []
    app.on("job:created", lambda event: created.append(event.job.args[0]))
    found: dict[str, object] = {
        "same_client": app.store.connection.database.client is connection.database.client,  # type: ignore[attr-defined]
    }

    # A rolled-back block: neither the order nor its job.
    try:
        with transaction.atomic():
            Order.objects.create(number="A1")
            send_receipt.schedule("A1")
            found["created_inside"] = list(created)
            raise RuntimeError("refused")
    except RuntimeError:
        pass
    found["rolled_back"] = [len(Order.objects.all()), app.count_jobs(), list(created)]

    # A committed block: both, the event after the commit.
    with transaction.atomic():
        Order.objects.create(number="B1")
        receipt = send_receipt.schedule("B1")
        ship.schedule("B1")
        found["event_before_commit"] = list(created)
    found["committed"] = [len(Order.objects.all()), app.count_jobs(), sorted(created)]

    # A transactional task: the ORM's update commits with the job's completion.
    drain(app)
    job = app.get_job(receipt.id)
    found["receipt"] = None if job is None else job.status.value
    shipped = app.get_jobs(task="shop.ship")[0]
    found["ship"] = [shipped.status.value, Order.objects.get(number="B1").shipped]
    found["receipts"] = app.count_jobs(task="shop.send_receipt")

    # A failing transactional task: its ORM write and its follow-up are rolled back.
    Order.objects.create(number="C1")
    failing = ship.schedule("C1", True)
    drain(app)
    failing.refresh()
    found["failed"] = [
        failing.status is JobStatus.FAILED or failing.status is JobStatus.PENDING,
        Order.objects.get(number="C1").shipped,
        app.count_jobs(task="shop.send_receipt"),
    ]
    print(json.dumps(found))


if __name__ == "__main__":
    main()
