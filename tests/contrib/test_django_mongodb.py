"""Django on MongoDB (django-mongodb-backend, Django 6.1 on Python 3.12: ``make
django6``): a real project (tests/djangomongo) on the transactions server, run in a
process of its own (tests/djangomongo/scenario.py prints what it found).

mongosched uses the Django database's client (``DJANGO_DATABASE``); a job scheduled
inside ``django_mongodb_backend.transaction.atomic()`` joins it without being told;
a transactional task's ORM writes commit with its job's completion."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

pytest.importorskip("django_mongodb_backend")

from tests.support.transactions import tx_uri  # noqa: E402

__all__ = ["tx_uri"]

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def findings(tx_uri: str) -> dict[str, object]:
    uri = tx_uri
    name = f"mongosched_django_{uuid.uuid4().hex[:10]}"
    env = {**os.environ, "MONGOSCHED_DJANGO_URI": uri, "MONGOSCHED_DJANGO_DB": name}
    env.pop("DJANGO_SETTINGS_MODULE", None)
    try:
        done = subprocess.run(
            [sys.executable, "-m", "tests.djangomongo.scenario"],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
    finally:
        import pymongo

        pymongo.MongoClient(uri).drop_database(name)
    assert done.returncode == 0, done.stderr[-3000:]
    found: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    return found


def test_jobs_join_the_projects_transactions_and_its_orm_joins_theirs(
    findings: dict[str, object],
) -> None:
    assert findings["same_client"] is True  # no second URI: the Django database's client
    # Rolled back: no order, no job, no event.
    assert findings["created_inside"] == [] and findings["rolled_back"] == [0, 0, []]
    # Committed: the order and both jobs; job:created only after the commit.
    assert findings["event_before_commit"] == []
    assert findings["committed"] == [1, 2, ["B1", "B1"]]
    # The transactional task: its ORM update and its follow-up job, with its completion.
    assert findings["receipt"] == "completed"
    assert findings["ship"] == ["completed", True] and findings["receipts"] == 2
    # A failing one: neither its ORM update nor its follow-up job exists.
    assert findings["failed"] == [True, False, 2]
