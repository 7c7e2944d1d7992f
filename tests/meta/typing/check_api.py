"""What a type checker says about the public API. Checked by mypy (``make typecheck``:
strict, ``warn_unused_ignores``), never run: pytest does not collect it and nothing here
is called.

Each ``# type: ignore[code]`` marks a call that must be a type error. If it stops being
one, the ignore is unused and mypy fails; ``assert_type`` fails when a type changes.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING, Any

from mongosched import App, Cron, Every, Job, JobSpec, RetryPolicy, Transaction, current_job
from mongosched.contrib.flask import MongoSched
from mongosched.task import ScheduleOptions

if TYPE_CHECKING:
    from pymongo.client_session import ClientSession
    from typing_extensions import assert_type


def check_task_schedule(app: App) -> None:
    @app.task(name="emails.send", retry=RetryPolicy(retries=4))
    def send(user_id: int, lang: str = "en") -> str:
        return f"{user_id}: {lang}"

    job = send.schedule(42, lang="fr")
    assert_type(job, Job[str])
    assert_type(job.result, str | None)  # None until a run returned
    assert_type(job.wait(timeout=1).result, str | None)
    assert_type(job.refresh(), Job[str])
    assert_type(send(1), str)  # a plain call runs inline

    send.schedule("not-an-int")  # type: ignore[arg-type]
    send.schedule()  # type: ignore[call-arg]
    send.schedule(1, langg="fr")  # type: ignore[call-arg]
    send.schedule(1, "fr", "extra")  # type: ignore[call-arg]
    send.schedule(1, delay=60)  # type: ignore[call-arg]  # options go through configure()
    send.job("not-an-int")  # type: ignore[arg-type]
    send.job(1, langg="fr")  # type: ignore[call-arg]
    len(job.result)  # type: ignore[arg-type]  # may be None
    job.result - 1  # type: ignore[operator]  # a str (or None), not a number


def check_configure(app: App) -> None:
    @app.task
    def send(user_id: int, lang: str = "en") -> str:
        return f"{user_id}: {lang}"

    later = send.configure(delay=timedelta(minutes=5), priority=1, queue="urgent")
    assert_type(later.schedule(1), Job[str])
    assert_type(later.configure(dedupe_key="k", dedupe_scope="pending").schedule(2), Job[str])
    assert_type(send.configure(run_at=datetime.now(timezone.utc)).job(3), JobSpec)
    assert_type(send.configure(repeat=Cron("0 6 * * 1")).schedule(4, "de"), Job[str])
    options: ScheduleOptions = {"delay": 5.0}
    assert_type(send.configure(**options).schedule(5), Job[str])

    send.configure(dealy=5)  # type: ignore[call-arg]
    send.configure(delay=5).configure(prio=1)  # type: ignore[call-arg]
    send.configure(delay="soon")  # type: ignore[arg-type]
    send.configure(run_at="2030-01-01")  # type: ignore[arg-type]
    send.configure(dedupe_scope="forever")  # type: ignore[arg-type]
    send.configure(repeat="0 6 * * 1")  # type: ignore[arg-type]
    send.configure(priority=1).schedule("not-an-int")  # type: ignore[arg-type]
    send.configure(priority=1).schedule()  # type: ignore[call-arg]
    send.configure(priority=1).job(1, langg="fr")  # type: ignore[call-arg]


def check_after_at_and_database(app: App, sched: MongoSched) -> None:
    @app.task
    def send(user_id: int, lang: str = "en") -> str:
        return f"{user_id}: {lang}"

    assert_type(send.after(60).schedule(1), Job[str])
    assert_type(send.after(timedelta(hours=1)).schedule(1, lang="de"), Job[str])
    assert_type(send.at(datetime.now(timezone.utc)).job(2), JobSpec)
    assert_type(
        send.configure(priority=1).after(5).at(datetime.now(timezone.utc)).schedule(3), Job[str]
    )
    send.after("soon")  # type: ignore[arg-type]
    send.at("2030-01-01")  # type: ignore[arg-type]
    send.after(5).schedule("not-an-int")  # type: ignore[arg-type]
    database = app.database
    if database is not None:
        database.orders.insert_one({"_id": 1})
    app.database.orders.insert_one({})  # type: ignore[union-attr]  # None on memory://


def check_payload_names_and_untyped_uses(app: App, seen: Job) -> None:
    @app.task
    def mail(to: str, delay: int, queue: str = "default") -> None: ...

    # Parameters named like options are payload: schedule() takes the function's own.
    assert_type(mail.schedule("ann", delay=5, queue="vip"), Job[None])
    mail.schedule("ann", 5, priority=1)  # type: ignore[call-arg]

    # By name the payload is not checked, and a bare Job is Job[Any].
    assert_type(app.schedule("emails.send", 1, anything=2), Job[Any])
    specs = [mail.job("bo", 1), mail.configure(delay=9).job("cy", 2)]
    assert_type(app.schedule_bulk(specs), list[Job[Any]])
    assert_type(seen.result, Any | None)
    assert_type(app.get_job(seen.id), Job[Any] | None)


def check_retry_policy(app: App) -> None:
    policy = RetryPolicy(retries=3, backoff="linear", delay=timedelta(seconds=2))
    app.task(retry=policy)
    app.task(retry="3")  # type: ignore[call-overload]
    RetryPolicy(backoff="cubic")  # type: ignore[arg-type]


def check_task_options(app: App) -> None:
    @app.task(queue="emails", retry=2, timeout=timedelta(minutes=1), concurrency=2)
    def fine() -> int:
        return 1

    assert_type(fine.schedule(), Job[int])
    app.task(retyr=3)  # type: ignore[call-overload]

    @app.task(rate_limit="100/m", rate_key="customer", concurrency=2, concurrency_key="customer")
    def limited(customer: str) -> None:
        pass

    first = fine.schedule()
    later = limited.configure(expires=timedelta(minutes=5), timeout=30, depends_on=first)
    assert_type(later.schedule("acme"), Job[None])
    app.task(rate_limit=(10, timedelta(seconds=1)))
    app.task(rate_limit=5)  # type: ignore[call-overload]
    limited.configure(expires=5)  # type: ignore[arg-type]
    app.task(queue="emails", cron=5)  # type: ignore[call-overload]
    app.task(repeat=Every(seconds=30))
    app.task(repeat="0 9 * * *")  # type: ignore[call-overload]


def check_flask() -> None:
    sched = MongoSched()

    @sched.task(retry=2, queue="emails")
    def greet(name: str) -> int:
        return len(name)

    assert_type(greet.schedule("ann"), Job[int])
    assert_type(greet.configure(delay=1).schedule("bo"), Job[int])
    assert_type(greet.task.schedule("cy"), Job[int])
    assert_type(greet("di"), int)

    sched.task(retyr=3)  # type: ignore[call-overload]
    greet.schedule(1)  # type: ignore[arg-type]
    greet.schedule("ann", langg="fr")  # type: ignore[call-arg]
    greet.configure(dealy=1)  # type: ignore[call-arg]


def check_job_filters(app: App) -> None:
    assert_type(app.get_jobs(task="emails.send", status=["failed", "cancelled"]), list[Job])
    assert_type(app.count_jobs(queue="mail", finished_after=datetime.now(timezone.utc)), int)
    assert_type(app.retry_jobs(error_type="TimeoutError", dry_run=True), int)
    app.get_jobs(stauts="failed")  # type: ignore[call-arg]  # a misspelt filter
    app.count_jobs(created_after="yesterday")  # type: ignore[arg-type]
    app.purge_jobs(task=3)  # type: ignore[arg-type]
    app.cancel_jobs("emails.send")  # type: ignore[call-arg, arg-type]  # filters are keywords only


def check_transactions(app: App, session: ClientSession) -> None:
    @app.task(transactional=True)
    def ship(order_id: str) -> None: ...

    assert_type(ship.configure(session=session).schedule("o1"), Job[None])
    assert_type(app.schedule_bulk([ship.job("o2")], session=session), list[Job[Any]])
    with app.transaction() as tx:
        assert_type(tx, Transaction)
        assert_type(tx.session, ClientSession | None)
        assert_type(ship.configure(session=tx).schedule("o3"), Job[None])
    placed = app.with_transaction(lambda tx: ship.configure(session=tx).schedule("o4"))
    assert_type(placed, Job[None])
    job = current_job()
    if job is not None:
        assert_type(job.session, ClientSession | None)
        assert_type(job.transaction, Transaction | None)

    ship.configure(session="a session")  # type: ignore[arg-type]
    ship.configure(session=tx).schedule(1)  # type: ignore[arg-type]
    app.with_transaction(lambda: None)  # type: ignore[arg-type,misc]


def _workflows(app: App) -> None:
    @app.step(retry=2)
    def charge(order: str) -> int:
        return len(order)

    paid: int = charge("A")
    assert paid >= 0
