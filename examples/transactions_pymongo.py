"""Plain pymongo: save an order and schedule its receipt in one MongoDB transaction,
and ship it with a task whose writes commit with its job's completion.

    MONGODB_URI="mongodb://localhost/shop?replicaSet=rs0" python examples/transactions_pymongo.py

runs the jobs in this process. To run them in a process of their own instead, comment out
the ``drain(app)`` line and, from the repository's root, start

    MONGODB_URI=... mongosched worker examples.transactions_pymongo:app

The tasks are named (``name=``): run as a script, an unnamed task would be
``__main__.ship`` here and ``examples.transactions_pymongo.ship`` in the runner, which
would then leave the jobs pending. Transactions need a replica set (a single-node one
will do) or a sharded cluster.
"""

from __future__ import annotations

import os

import pymongo

from mongosched import App, current_job
from mongosched.testing import drain

client: pymongo.MongoClient = pymongo.MongoClient(
    os.environ.get("MONGODB_URI", "mongodb://localhost/shop?replicaSet=rs0"), tz_aware=True
)
db = client.get_default_database()
app = App(database=db)  # the app's writes use your client, so they can join your sessions


@app.task(name="shop.send_receipt")
def send_receipt(order_id: str) -> None:
    order = db.orders.find_one({"_id": order_id})
    print(f"receipt for {order_id}: {order['total'] if order else 'no such order'}")


@app.task(name="shop.ship", transactional=True)
def ship(order_id: str) -> None:
    job = current_job()
    session = job.session if job else None  # commits with the job's completion
    db.orders.update_one({"_id": order_id}, {"$set": {"status": "shipped"}}, session=session)
    db.shipments.insert_one({"order": order_id}, session=session)


def place_order(order_id: str, total: int) -> None:
    """The order and its two jobs exist together, or none of them does."""

    def save(session: pymongo.client_session.ClientSession) -> None:
        db.orders.insert_one({"_id": order_id, "total": total}, session=session)
        send_receipt.configure(session=session).schedule(order_id)
        ship.configure(session=session).schedule(order_id)

    with client.start_session() as session:
        session.with_transaction(save)  # runs save again after a transient error


if __name__ == "__main__":
    for name in ("orders", "shipments"):  # made before transactions write in them
        if name not in db.list_collection_names():
            db.create_collection(name)
    place_order("order-1", 42)
    drain(app)  # runs the jobs here; or leave it out and run a runner (see above)
    print(db.orders.find_one({"_id": "order-1"}))
