"""The recipes of docs/transactions.rst run as written, on the transactions server:
``examples/transactions_pymongo.py`` and ``examples/transactions_flask.py``."""

from __future__ import annotations

import runpy
from pathlib import Path
from typing import Any

import pytest
from pymongo.errors import DuplicateKeyError

from mongosched import JobStatus
from mongosched.testing import drain
from tests.support.transactions import database_uri, tx_database, tx_uri

__all__ = ["tx_database", "tx_uri"]

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


@pytest.fixture
def shop(tx_uri: str, tx_database: Any, monkeypatch: pytest.MonkeyPatch) -> Any:
    """The recipes' MONGODB_URI names this test's database; their collections exist."""
    monkeypatch.setenv("MONGODB_URI", database_uri(tx_uri, tx_database.name))
    for name in ("orders", "shipments", "users"):
        tx_database.create_collection(name)
    return tx_database


def test_the_pymongo_recipe_commits_the_order_with_its_jobs_or_nothing(
    shop: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    recipe = runpy.run_path(str(EXAMPLES / "transactions_pymongo.py"), run_name="__main__")
    app, place_order = recipe["app"], recipe["place_order"]
    drained = app.get_jobs(limit=0)  # the script's own run, as a user runs it
    assert [j.status for j in drained] == [JobStatus.COMPLETED] * 2
    app.purge(status="completed")
    shop.orders.delete_many({})
    shop.shipments.delete_many({})
    capsys.readouterr()
    place_order("order-1", 42)
    assert shop.orders.count_documents({}) == 1 and app.count_jobs() == 2
    with pytest.raises(DuplicateKeyError):  # the same order again: it all aborts
        place_order("order-1", 43)
    assert shop.orders.find_one({"_id": "order-1"})["total"] == 42
    assert app.count_jobs() == 2
    drain(app)
    assert all(job.status is JobStatus.COMPLETED for job in app.get_jobs(limit=0))
    assert shop.orders.find_one({"_id": "order-1"})["status"] == "shipped"
    assert shop.shipments.count_documents({"order": "order-1"}) == 1
    assert "receipt for order-1: 42" in capsys.readouterr().out


def test_the_flask_recipe_saves_the_user_and_schedules_the_welcome_together(
    shop: Any,
) -> None:
    recipe = runpy.run_path(str(EXAMPLES / "transactions_flask.py"))
    web = recipe["create_app"]()
    web.config["TESTING"] = True
    client = web.test_client()
    response = client.post("/users", data={"email": "ann@example.com", "name": "Ann"})
    assert response.status_code == 201
    app = recipe["sched"].get_app(web)
    assert shop.users.count_documents({}) == 1 and app.count_jobs() == 1
    web.config["PROPAGATE_EXCEPTIONS"] = False
    again = client.post("/users", data={"email": "ann@example.com", "name": "Ann B"})
    assert again.status_code == 500  # a duplicate user: the block aborted
    assert app.count_jobs() == 1 and shop.users.find_one()["name"] == "Ann"


def readme_block() -> str:
    readme = (EXAMPLES.parent / "README.rst").read_text()
    section = readme.split("In your own transaction")[1]
    block = section.split(".. code-block:: python")[1].split("\nDjango (")[0]
    return "\n".join(line[4:] for line in block.splitlines())


def test_the_readmes_transaction_example_runs_as_written(shop: Any, tx_uri: str) -> None:
    """The README's block (run on ``memory://`` by tests/meta/test_readme.py) on a server:
    the job scheduled in the transaction exists once it commits, and the transactional
    task completes in a transaction of its own."""
    from mongosched import App, current_job

    app = App(database_uri(tx_uri, shop.name))  # as the README's: made from a URI
    assert app.database is not None and app.database.name == shop.name
    namespace = {"app": app, "current_job": current_job}
    exec(compile(readme_block(), "README.rst", "exec"), namespace)
    assert [job.task for job in app.get_jobs(limit=0)] == ["orders.receipt"]
    assert shop.orders.find_one({"_id": "A-1"}) == {"_id": "A-1", "total": 42}
    namespace["ship"].schedule("A-1")
    drain(app)
    assert all(job.status is JobStatus.COMPLETED for job in app.get_jobs(limit=0))
    assert app.count_jobs() == 2
    assert shop.orders.find_one({"_id": "A-1"})["shipped"] is True
    app.close()


def test_an_apps_database_is_the_one_it_was_given_or_none_in_memory(shop: Any) -> None:
    from mongosched import App

    assert App("memory://").database is None
    assert App(database=shop).database is shop


def test_the_pymongo_recipe_names_its_tasks_as_a_worker_importing_it_does(shop: Any) -> None:
    """Run as a script, the recipe's tasks keep the names that ``mongosched worker
    examples.transactions_pymongo:app`` registers, so that worker runs its jobs (an
    unnamed task would be ``__main__.ship`` in the script: the worker leaves it
    pending)."""
    recipe = str(EXAMPLES / "transactions_pymongo.py")
    script = runpy.run_path(recipe, run_name="__main__")
    imported = runpy.run_path(recipe, run_name="examples.transactions_pymongo")
    names = sorted(script["app"].tasks)
    assert names == sorted(imported["app"].tasks) == ["shop.send_receipt", "shop.ship"]
