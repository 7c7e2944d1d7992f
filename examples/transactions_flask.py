"""Flask: a view that saves a document and schedules its job in one transaction.

    MONGODB_URI="mongodb://localhost/shop?replicaSet=rs0" \
        flask --app examples.transactions_flask run

mongosched uses the Flask app's own client (``MONGOSCHED_DATABASE``), so the view's
writes and the job share one transaction: ``app.transaction()`` commits both when the
block ends, or neither if it raises.
"""

from __future__ import annotations

import os

import pymongo
from flask import Flask, request

from mongosched.contrib.flask import MongoSched

sched = MongoSched()


@sched.task
def send_welcome(user_id: str) -> None:
    print(f"welcome, {user_id}")


def create_app() -> Flask:
    web = Flask(__name__)
    client: pymongo.MongoClient = pymongo.MongoClient(
        os.environ.get("MONGODB_URI", "mongodb://localhost/shop?replicaSet=rs0"), tz_aware=True
    )
    db = client.get_default_database()
    web.config["MONGOSCHED_DATABASE"] = db  # no second URI: one client, one pool
    sched.init_app(web)

    @web.post("/users")
    def sign_up() -> tuple[dict[str, str], int]:
        user = {"_id": request.form["email"], "name": request.form["name"]}
        with sched.app.transaction() as tx:
            db.users.insert_one(user, session=tx.session)
            send_welcome.schedule(user["_id"])  # joins the block's transaction
        return {"user": user["_id"]}, 201

    return web
