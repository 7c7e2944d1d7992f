"""Jobs scheduled in a transaction (docs/transactions.rst): they exist if and only if it
commits, and no runner sees one before.

Each behaviour runs on ``memory://`` (its in-process transactions) and on a real server
with multi-document transactions (``tx_database``: skipped without one), as users'
code runs on both: ``app.transaction()``, ``app.with_transaction()``, and, on MongoDB,
a pymongo ``ClientSession`` of their own."""

from __future__ import annotations

import threading
from typing import Any

import pymongo
import pytest
from pymongo.errors import PyMongoError

from mongosched import App, JobStatus, Transaction
from mongosched.errors import MongoschedError, TransactionConflict, TransactionError
from mongosched.store import DueHint
from mongosched.testing import drain
from tests.support.transactions import own_collection, store_target, tx_database, tx_uri
from tests.support.waiting import wait_for

__all__ = ["store_target", "tx_database", "tx_uri"]


def tasks(app: App) -> tuple[Any, Any]:
    @app.task(name="send")
    def send(n: int) -> int:
        ran.append(n)
        return n

    @app.task(name="marker")
    def marker() -> None: ...

    ran: list[int] = []
    send.ran = ran  # type: ignore[attr-defined]
    return send, marker


class Hints:
    """What a watch of the store reports (a runner's wake-ups), collected in a thread."""

    def __init__(self, app: App) -> None:
        self.watch = app.store.watch_due(None)
        self.seen: list[DueHint] = []
        self.thread = threading.Thread(target=self._collect, daemon=True)
        self.thread.start()
        wait_for(lambda: self.seen, message="the watch to start")

    def _collect(self) -> None:
        for hint in self.watch:
            self.seen.append(hint)

    def tasks(self) -> list[str | None]:
        return [hint.task for hint in self.seen[1:]]

    def close(self) -> None:
        self.watch.close()
        self.thread.join(5)


def test_an_aborted_transaction_leaves_no_job_never_run_and_wakes_nobody(app: App) -> None:
    send, marker = tasks(app)
    hints = Hints(app)
    orders = own_collection(app, "orders")
    try:
        with pytest.raises(RuntimeError), app.transaction() as tx:
            if orders is not None:
                orders.insert_one({"_id": 1}, session=tx.session)
            job = send.schedule(1)
            again = send.configure(session=tx).schedule(2)
            raise RuntimeError("the order is refused")
        assert app.get_job(job.id) is None and app.get_job(again.id) is None
        assert orders is None or orders.find_one({"_id": 1}) is None
        marker.schedule()  # committed: its wake-up comes, and none came before it
        wait_for(lambda: "marker" in hints.tasks(), message="the marker's wake-up")
        assert hints.tasks() == ["marker"]
        assert drain(app) == 1 and send.ran == []
    finally:
        hints.close()


def test_a_committed_transaction_makes_exactly_one_job_seen_only_after_the_commit(
    app: App,
) -> None:
    send, _ = tasks(app)
    hints = Hints(app)
    orders = own_collection(app, "orders")
    try:
        with app.transaction() as tx:
            if orders is not None:
                orders.insert_one({"_id": 1}, session=tx.session)
            job = send.schedule(7)
            assert app.get_job(job.id) is None  # not before the commit
            assert drain(app) == 0  # no runner can claim it
            assert hints.tasks() == []
        assert tx.committed
        stored = app.get_job(job.id)
        assert stored is not None and stored.status is JobStatus.PENDING
        assert orders is None or orders.find_one({"_id": 1}) == {"_id": 1}
        wait_for(lambda: hints.tasks() == ["send"], message="the wake-up after the commit")
        assert drain(app) == 1 and send.ran == [7]
        assert app.count_jobs() == 1
    finally:
        hints.close()


def test_a_transaction_run_again_after_a_transient_error_still_makes_one_job(
    app: App,
) -> None:
    send, _ = tasks(app)
    orders = own_collection(app, "orders")
    if orders is not None:
        orders.insert_one({"_id": "stock", "left": 10})
    runs = []

    def place(tx: Transaction) -> Any:
        runs.append(1)
        job = send.schedule(len(runs))
        if len(runs) == 1:  # another writer changes what this transaction changes
            if orders is None:
                raise TransactionConflict("write conflict (as the server reports one)")
            orders.update_one({"_id": "stock"}, {"$inc": {"left": -5}})  # outside
            orders.update_one({"_id": "stock"}, {"$inc": {"left": -1}}, session=tx.session)
        return job

    job = app.with_transaction(place)
    assert len(runs) == 2
    assert [j.id for j in app.get_jobs(limit=0)] == [job.id]
    assert job.args == [2]
    assert orders is None or orders.find_one({"_id": "stock"})["left"] == 5


def test_a_dedupe_key_in_a_transaction_returns_the_job_holding_it(app: App) -> None:
    send, _ = tasks(app)
    held = send.configure(dedupe_key="order-1").schedule(1)
    with app.transaction():
        again = send.configure(dedupe_key="order-1").schedule(2)
        first = send.configure(dedupe_key="order-2").schedule(3)
        second = send.configure(dedupe_key="order-2").schedule(4)
    assert again.id == held.id and first.id == second.id
    assert app.count_jobs() == 2


def test_a_debounce_in_a_transaction_replaces_the_job_when_it_commits(app: App) -> None:
    """Finding N5 of the model (tests/model/test_found.py): memory:// refused it."""
    send, _ = tasks(app)
    debounced = send.configure(dedupe_key="doc-7", dedupe="replace")
    held = debounced.schedule(1)
    with pytest.raises(RuntimeError), app.transaction():
        assert debounced.schedule(2).id == held.id
        raise RuntimeError
    assert held.refresh().args == [1]  # aborted: untouched
    with app.transaction():
        assert debounced.schedule(3).id == held.id
        new = send.configure(dedupe_key="doc-8", dedupe="replace").schedule(4)
        again = send.configure(dedupe_key="doc-8", dedupe="replace").schedule(5)
        assert again.id == new.id
    assert held.refresh().args == [3] and again.refresh().args == [5]
    assert app.count_jobs() == 2


def test_schedule_bulk_and_dependencies_commit_and_abort_with_the_transaction(
    app: App,
) -> None:
    send, _ = tasks(app)
    done = send.schedule(0)
    assert drain(app) == 1
    with pytest.raises(RuntimeError), app.transaction() as tx:
        app.schedule_bulk([send.job(1), send.job(2)], session=tx)
        send.configure(depends_on=done).schedule(3)
        raise RuntimeError
    assert app.count_jobs() == 1
    with app.transaction() as tx:
        first, second = app.schedule_bulk([send.job(1), send.job(2)], session=tx)
        after_done = send.configure(depends_on=done).schedule(3)
        after_first = send.configure(depends_on=[first, second]).schedule(4)
    stored = app.get_job(after_done.id)
    assert stored is not None and stored.status is JobStatus.PENDING  # its dependency ended
    waiting = app.get_job(after_first.id)
    assert waiting is not None and waiting.status is JobStatus.WAITING
    drain(app)
    assert sorted(send.ran) == [0, 1, 2, 3, 4]
    assert all(j.status is JobStatus.COMPLETED for j in app.get_jobs(limit=0))


def test_a_transaction_that_ended_or_belongs_to_another_app_is_refused(app: App) -> None:
    send, _ = tasks(app)
    with app.transaction() as tx:
        pass
    with pytest.raises(TransactionError, match="task 'send': session: the transaction has ended"):
        send.configure(session=tx).schedule(1)
    other = App("memory://")
    with other.transaction() as elsewhere:
        with pytest.raises(TransactionError, match="another app's"):
            send.configure(session=elsewhere).schedule(1)
    with pytest.raises(TransactionError, match="one session"), app.transaction() as a:
        app.schedule_bulk([send.configure(session=a).job(1)], session=elsewhere)
    assert app.count_jobs() == 0


def test_memory_refuses_a_driver_session_saying_what_to_use() -> None:
    app = App("memory://")
    send, _ = tasks(app)
    with pytest.raises(TransactionError, match="use app.transaction"):
        send.configure(session=object()).schedule(1)  # type: ignore[arg-type]
    assert issubclass(TransactionError, MongoschedError)


# A caller's own pymongo session (MongoDB only) ---------------------------------------------


@pytest.fixture
def server_app(tx_database: Any) -> App:
    app = App(database=tx_database, poll_interval=0.05)
    app.ensure_indexes()
    return app


def test_a_job_scheduled_in_a_callers_session_commits_and_aborts_with_it(server_app: App) -> None:
    send, _ = tasks(server_app)
    client = server_app.store.connection.database.client  # type: ignore[attr-defined]
    orders = server_app.store.connection.database["orders"]  # type: ignore[attr-defined]

    def place(session: Any) -> Any:
        orders.insert_one({"_id": 1}, session=session)
        return send.configure(session=session).schedule(1)

    with client.start_session() as session:
        job = session.with_transaction(place)
    assert server_app.get_job(job.id) is not None and orders.count_documents({}) == 1

    with client.start_session() as session:
        session.start_transaction()
        lost = send.configure(session=session).schedule(2)
        bulk = server_app.schedule_bulk([send.job(3)], session=session)
        session.abort_transaction()
    assert server_app.get_job(lost.id) is None and server_app.get_job(bulk[0].id) is None
    assert server_app.count_jobs() == 1


def test_a_conflict_in_a_callers_session_surfaces_as_pymongos_transient_error(
    server_app: App,
) -> None:
    """A dedupe key taken by a write the transaction cannot see: the insert conflicts,
    with the label pymongo's with_transaction runs the callback again on; the second
    run finds the job holding the key."""
    send, _ = tasks(server_app)
    client = server_app.store.connection.database.client  # type: ignore[attr-defined]
    runs: list[Any] = []

    def place(session: Any) -> Any:
        server_app.store.connection.database["orders"].find_one({}, session=session)  # type: ignore[attr-defined]
        if not runs:  # the key is taken after this transaction's snapshot
            runs.append(send.configure(dedupe_key="k").schedule(0))
        job = send.configure(session=session, dedupe_key="k").schedule(1)
        runs.append(job)
        return job

    with client.start_session() as session:
        job = session.with_transaction(place)
    assert len(runs) == 2 and job.id == runs[0].id
    assert server_app.count_jobs() == 1

    with client.start_session() as session:
        session.start_transaction()
        server_app.store.connection.database["orders"].find_one({}, session=session)  # type: ignore[attr-defined]
        send.configure(dedupe_key="j").schedule(0)
        with pytest.raises(PyMongoError) as raised:
            send.configure(session=session, dedupe_key="j").schedule(1)
        assert raised.value.has_error_label("TransientTransactionError")
        assert isinstance(raised.value, TransactionConflict)


def test_a_session_of_another_client_or_outside_a_transaction_is_refused(
    server_app: App, tx_database: Any
) -> None:
    send, _ = tasks(server_app)
    client = server_app.store.connection.database.client  # type: ignore[attr-defined]
    with client.start_session() as session:
        with pytest.raises(TransactionError, match="task 'send': session: .*not in a transaction"):
            send.configure(session=session).schedule(1)
    other: Any = pymongo.MongoClient(_uri(tx_database))
    try:
        with other.start_session() as session:
            session.start_transaction()
            with pytest.raises(TransactionError, match="another MongoClient"):
                send.configure(session=session).schedule(1)
            session.abort_transaction()
    finally:
        other.close()
    assert server_app.count_jobs() == 0


def _uri(database: Any) -> str:
    host, port = database.client.address
    return f"mongodb://{host}:{port}/?directConnection=true"
