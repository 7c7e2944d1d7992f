"""Flask integration: real Flask apps, their test client and their CLI runner.

Apps store where the test suite's ``store_target`` says (``memory://`` unless
MONGOSCHED_TEST_URI or MONGOSCHED_TEST_STORE choose a MongoDB), except where a test is
about a pymongo ``Database`` object given as ``MONGOSCHED_DATABASE`` (the ``database``
fixture: on the SecantusDB test server, or the real server's), or about several
processes (``shared_db``: the same).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

pytest.importorskip("flask")

import click  # noqa: E402
from flask import Flask, jsonify, request  # noqa: E402

from mongosched import App, JobStatus  # noqa: E402
from mongosched.contrib import with_database  # noqa: E402
from mongosched.contrib.flask import MongoSched, SchedTask  # noqa: E402
from mongosched.errors import ConfigurationError, MongoschedError, StoreUnavailable  # noqa: E402
from mongosched.testing import FakeClock, drain  # noqa: E402
from tests.conftest import TEST_URI  # noqa: E402
from tests.support.waiting import wait_for  # noqa: E402
from tests.support.web import gunicorn, recycle_workers  # noqa: E402

if TYPE_CHECKING:
    from tests.support.server_fixtures import SharedDatabase

ROOT = Path(__file__).resolve().parents[2]

pytest_plugins = ["tests.support.server_fixtures"]  # shared_db: SecantusDB


def store_config(store_target: dict[str, Any]) -> dict[str, Any]:
    """The Flask config naming the test's store: a URI, or a Database object."""
    if "uri" in store_target:
        return {"MONGOSCHED_URI": store_target["uri"]}
    return {"MONGOSCHED_DATABASE": store_target["database"]}


@pytest.fixture
def make_flask(
    store_target: dict[str, Any],
) -> Iterator[Callable[..., tuple[Flask, MongoSched]]]:
    """``make_flask(sched=None, **config)``: a Flask app with a view that schedules
    ``add`` and one that shows a job, on this test's store."""
    made: list[tuple[Flask, MongoSched]] = []

    def make(sched: MongoSched | None = None, **config: Any) -> tuple[Flask, MongoSched]:
        flask_app = Flask(f"test_flask_{uuid.uuid4().hex[:6]}")
        flask_app.config.update(
            **store_config(store_target),
            MONGOSCHED_LEASE_DURATION=5.0,
            MONGOSCHED_POLL_INTERVAL=0.05,
            **config,
        )
        if sched is None:
            sched = MongoSched(flask_app)
        else:
            sched.init_app(flask_app)
        made.append((flask_app, sched))

        @flask_app.get("/add")
        def schedule_add() -> Any:
            task = sched.app.get_task("add")
            job = task.schedule(int(request.args["x"]), int(request.args["y"]))
            return jsonify(id=str(job.id)), 202

        @flask_app.get("/jobs/<job_id>")
        def job_detail(job_id: str) -> Any:
            job = sched.app.get_job(job_id)
            assert job is not None
            return jsonify(status=job.status.value, result=job.result)

        @flask_app.get("/ping")
        def ping() -> str:
            return "pong"

        return flask_app, sched

    yield make
    for flask_app, sched in made:
        for runner in list(sched.get_app(flask_app).runners):
            runner.stop(graceful=False, timeout=5)


def declare_add(sched: MongoSched) -> SchedTask[[int, int], int]:
    @sched.task(name="add", retry=0)
    def add(x: int, y: int) -> int:
        return x + y

    return add


def runner_starts(app: App) -> list[Any]:
    starts: list[Any] = []
    app.on("runner:start", lambda event: starts.append(event.runner))
    return starts


def test_extension_view_and_runner(make_flask: Callable[..., tuple[Flask, MongoSched]]) -> None:
    flask_app, sched = make_flask()
    add = declare_add(sched)  # declared after init_app: registered at once
    assert add(1, 2) == 3  # calling runs inline
    client = flask_app.test_client()
    job_id = client.get("/add?x=20&y=22").get_json()["id"]
    assert client.get(f"/jobs/{job_id}").get_json() == {"status": "pending", "result": None}

    runner = sched.app.runner(workers=2).start()
    try:
        job = sched.app.get_job(job_id)
        assert job is not None and job.wait(timeout=10).status is JobStatus.COMPLETED
        with flask_app.app_context():
            assert add.schedule(2, 3).wait(timeout=10).result == 5
    finally:
        runner.stop()
    assert client.get(f"/jobs/{job_id}").get_json() == {"status": "completed", "result": 42}
    assert flask_app.extensions["mongosched"].app is sched.app


def test_app_factory(database: Any) -> None:
    """One extension, two Flask apps, each on its own pymongo Database object."""
    sched = MongoSched()

    @sched.task(retry=0)
    def shout(word: str) -> str:
        return word.upper()

    name = shout.name
    second_db = database.client.get_database(f"{database.name}_2")

    def create_app(db: Any) -> Flask:
        flask_app = Flask(__name__)
        flask_app.config.update(MONGOSCHED_DATABASE=db, MONGOSCHED_COLLECTION="jobs")
        sched.init_app(flask_app)
        return flask_app

    one, two = create_app(database), create_app(second_db)
    try:
        assert sched.get_app(one) is not sched.get_app(two)
        assert name in sched.get_app(one).tasks and name in sched.get_app(two).tasks
        with two.app_context():
            job = shout.schedule("hi")
        assert sched.get_app(two).get_job(job.id) is not None
        assert sched.get_app(one).get_job(job.id) is None
        # MONGOSCHED_COLLECTION names the collection, in the Database given.
        assert second_db["jobs"].count_documents({}) == 1
        assert database["jobs"].count_documents({}) == 0
        assert "mongosched_jobs" not in second_db.list_collection_names()
        with pytest.raises(ConfigurationError, match="several Flask apps"):
            shout.schedule("outside any app context")

        @sched.task
        def later() -> None: ...

        assert later.name in sched.get_app(one).tasks and later.name in sched.get_app(two).tasks
    finally:
        database.client.drop_database(second_db.name)


def test_config_errors() -> None:
    with pytest.raises(ConfigurationError, match="set URI.*memory://"):
        MongoSched(Flask(__name__))
    flask_app = Flask(__name__)
    flask_app.config.update(MONGOSCHED_URI="memory://", MONGOSCHED_WORKERS=0)
    with pytest.raises(ConfigurationError, match="MONGOSCHED_WORKERS"):
        MongoSched(flask_app)
    flask_app = Flask(__name__)
    flask_app.config.update(MONGOSCHED_URI="memory://", MONGOSCHED_LEASE=3)
    with pytest.raises(ConfigurationError, match="unknown setting.*LEASE"):
        MongoSched(flask_app)
    flask_app = Flask(__name__)
    flask_app.config.update(MONGOSCHED_URI="mongomock://x/y")
    with pytest.raises(ConfigurationError, match="MONGOSCHED_.*use memory://"):
        MongoSched(flask_app)
    flask_app = Flask(__name__)
    flask_app.config.update(MONGOSCHED_URI="mongodb://localhost", MONGOSCHED_DATABASE="shop")
    assert MongoSched(flask_app).app.uri == "mongodb://localhost/shop"
    with pytest.raises(ConfigurationError, match="unknown task option.*retires.*known: "):
        MongoSched().task(retires=2)  # type: ignore[call-arg]  # before init_app


def test_cli_commands(make_flask: Callable[..., tuple[Flask, MongoSched]]) -> None:
    flask_app, sched = make_flask(MONGOSCHED_WORKERS=3)
    declare_add(sched)
    job = sched.app.get_task("add").schedule(1, 1)
    cli = flask_app.test_cli_runner()

    listed = cli.invoke(args=["mongosched", "jobs", "list", "--json"])
    assert listed.exit_code == 0, listed.output
    assert [row["id"] for row in json.loads(listed.stdout)] == [str(job.id)]
    missing = cli.invoke(args=["mongosched", "jobs", "show", "0123456789abcdef01234567"])
    assert missing.exit_code == 3

    starts = runner_starts(sched.app)
    outcome: list[Any] = []
    thread = threading.Thread(
        target=lambda: outcome.append(cli.invoke(args=["mongosched", "worker"])), daemon=True
    )
    thread.start()
    runner = wait_for(lambda: starts and starts[0], timeout=10, message="the worker to start")
    try:
        assert runner.workers == 3  # MONGOSCHED_WORKERS: the default of --workers
        assert sched.app.get_job(job.id).wait(timeout=10).result == 2  # type: ignore[union-attr]
    finally:
        runner.stop(timeout=5)
        thread.join(timeout=10)
    assert not thread.is_alive()
    assert outcome[0].exit_code == 0, outcome[0].output


def test_cli_help_shows_the_configured_defaults(
    make_flask: Callable[..., tuple[Flask, MongoSched]],
) -> None:
    flask_app, _ = make_flask(MONGOSCHED_WORKERS=3)
    cli = flask_app.test_cli_runner()
    worker = cli.invoke(args=["mongosched", "worker", "--help"])
    assert worker.exit_code == 0, worker.output
    assert "mongosched worker [-h]" in worker.output
    assert "threads (default 3)" in worker.output  # MONGOSCHED_WORKERS, not the CLI's 4
    assert "--queues" in worker.output and "--timeout" in worker.output
    for option in ("MODULE:APP", "--app", "--uri", "--collection"):
        assert option not in worker.output, option
    top = cli.invoke(args=["mongosched", "--help"])
    assert top.exit_code == 0 and "ping" in top.output and "--uri" not in top.output


def test_testing_recipes_of_the_docs() -> None:
    sched = MongoSched()
    add = declare_add(sched)

    def create_app(config: dict[str, Any]) -> Flask:
        flask_app = Flask(f"test_flask_{uuid.uuid4().hex[:6]}")
        flask_app.config.update(config)
        sched.init_app(flask_app)
        return flask_app

    eager_app = create_app({"MONGOSCHED_URI": "memory://", "MONGOSCHED_EAGER": True})
    with eager_app.app_context():
        assert add.schedule(1, 2).result == 3  # ran inline
    clock = FakeClock()
    later_app = create_app({"MONGOSCHED_URI": "memory://", "MONGOSCHED_CLOCK": clock})
    with later_app.app_context():
        assert sched.app.count_jobs() == 0  # a new store for each app
        job = add.after(timedelta(days=1)).schedule(2, 3)
        assert drain(sched.app) == 0
        clock.advance(days=1)
        assert drain(sched.app) == 1 and job.refresh().result == 5


def test_run_in_process(make_flask: Callable[..., tuple[Flask, MongoSched]]) -> None:
    off_app, off_sched = make_flask()
    declare_add(off_sched)
    off_starts = runner_starts(off_sched.app)
    off_app.test_client().get("/ping")
    assert off_starts == [] and off_sched.app.in_process_runner is None

    sched = MongoSched()
    declare_add(sched)
    flask_app, _ = make_flask(sched=sched, MONGOSCHED_RUN_IN_PROCESS=True, MONGOSCHED_WORKERS=2)
    runner = sched.app.in_process_runner  # started by init_app, before any request
    assert runner is not None and runner.workers == 2
    starts = runner_starts(sched.app)
    listed = flask_app.test_cli_runner().invoke(args=["mongosched", "stats", "--json"])
    assert listed.exit_code == 0
    client = flask_app.test_client()
    job_id = client.get("/add?x=3&y=4").get_json()["id"]
    for _ in range(3):
        client.get("/ping")
    assert starts == [] and sched.app.in_process_runner is runner  # no other
    job = sched.app.get_job(job_id)
    assert job is not None and job.wait(timeout=10).result == 7
    assert sched.stop_runner() is True and not runner.is_running
    client.get("/ping")  # the fallback: a request starts it when it is not running
    assert len(starts) == 1 and starts[0].is_running


def test_run_in_process_starts_no_runner_inside_a_flask_command(
    make_flask: Callable[..., tuple[Flask, MongoSched]], monkeypatch: pytest.MonkeyPatch
) -> None:
    with click.Context(click.Command("some-command")):  # what a click command runs in
        _, sched = make_flask(MONGOSCHED_RUN_IN_PROCESS=True)
    assert sched.app.in_process_runner is None
    monkeypatch.setenv("FLASK_RUN_FROM_CLI", "true")  # what the flask command sets
    flask_app, sched = make_flask(MONGOSCHED_RUN_IN_PROCESS=True)
    assert sched.app.in_process_runner is None
    flask_app.test_client().get("/ping")  # flask run: on the first request
    assert sched.app.in_process_runner is not None


def _site_env(uri: str, run_in_process: bool = True) -> dict[str, str]:
    return {
        **os.environ,
        "SITE_URI": uri,
        "SITE_RUN_IN_PROCESS": "1" if run_in_process else "0",
        "PYTHONPATH": str(ROOT),
    }


def test_flask_commands_start_no_runner(shared_db: SharedDatabase) -> None:
    env = _site_env(shared_db.uri())
    flask = [sys.executable, "-m", "flask", "--app", "tests.support.flask_site"]
    for command, expected in ((["runner"], "none"), (["mongosched", "stats", "--json"], "")):
        done = subprocess.run(
            [*flask, *command], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60
        )
        assert done.returncode == 0, done.stderr
        assert expected in done.stdout
    # flask mongosched is a process of its own: a memory:// store would be its own, empty
    memory = _site_env(f"memory://site-{uuid.uuid4().hex[:8]}")
    done = subprocess.run(
        [*flask, "mongosched", "ping"], cwd=ROOT, env=memory, capture_output=True, text=True
    )
    assert done.returncode == 4
    assert "flask mongosched ping' runs in a process of its own" in done.stderr
    assert "memory:// is the in-process store" in done.stderr
    probe = "from tests.support.flask_site import create_app, sched; "
    probe += "print(sched.get_app(create_app()).in_process_runner is not None)"
    done = subprocess.run(  # one process: memory:// is fine
        [sys.executable, "-c", probe], cwd=ROOT, env=memory, capture_output=True, text=True
    )
    assert done.stdout.strip() == "True", done.stderr  # what a server's worker does


@pytest.mark.processes
@pytest.mark.parametrize("preload", [False, True], ids=["init-app", "preload"])
def test_gunicorn_workers_recycled_without_traffic_run_the_jobs(
    shared_db: SharedDatabase, tmp_path: Path, preload: bool
) -> None:
    """gunicorn, 2 workers, --max-requests 5: once the workers alive have served no
    request, jobs scheduled from here all run, in those workers. With --preload, as
    the docs advise: RUN_IN_PROCESS off, the runner started in post_worker_init."""
    pytest.importorskip("gunicorn")
    config = ["-c", "python:tests.support.flask_gunicorn_preload"] if preload else []
    with gunicorn(
        ["tests.support.flask_site:create_app()"],
        _site_env(shared_db.uri(), run_in_process=not preload),
        tmp_path / "gunicorn.log",
        *config,
        "--workers",
        "2",
        "--max-requests",
        "5",
    ) as (_, url):
        served = recycle_workers(f"{url}/pid", max_requests=5)
        app = App(shared_db.uri(), poll_interval=0.05)
        app.task(name="site.where")(os.getpid)  # by name: the workers run the real one
        finished = [app.schedule("site.where").wait(timeout=15) for _ in range(10)]
        app.close()
    assert [job.status for job in finished] == [JobStatus.COMPLETED] * 10
    ran = {job.result for job in finished}
    print(f"flask on gunicorn: {sum(served.values())} requests; jobs run by {sorted(ran)}")
    assert not ran & set(served)  # by workers that served no request


def test_a_database_outage_costs_only_the_pages_that_schedule(shared_db: SharedDatabase) -> None:
    """MongoDB down, MONGOSCHED_RUN_IN_PROCESS on: pages that do not schedule answer at
    once; a page that schedules gets a StoreUnavailable after about the connect
    timeout."""
    server = shared_db.server
    if server is None:
        pytest.skip("needs the SecantusDB server to take the database away")
    server.kill()
    flask_app = Flask(f"test_flask_{uuid.uuid4().hex[:6]}")
    flask_app.config.update(
        TESTING=True,  # the test client raises what a view raised
        MONGOSCHED_URI=shared_db.uri(),
        MONGOSCHED_CONNECT_TIMEOUT=0.5,
        MONGOSCHED_RUN_IN_PROCESS=True,
        MONGOSCHED_POLL_INTERVAL=0.05,
    )
    sched = MongoSched(flask_app)
    add = declare_add(sched)

    @flask_app.get("/ping")
    def ping() -> str:
        return "pong"

    @flask_app.get("/add")
    def schedule_add() -> Any:
        return jsonify(id=str(add.schedule(1, 2).id)), 202

    client = flask_app.test_client()
    try:
        pages = []
        for _ in range(3):
            started = time.monotonic()
            assert client.get("/ping").status_code == 200
            pages.append(time.monotonic() - started)
        runner = sched.app.in_process_runner
        assert runner is not None and not runner.ready  # started; waits for the database
        schedules = []
        for _ in range(2):
            started = time.monotonic()
            with pytest.raises(StoreUnavailable) as caught:
                client.get("/add")
            schedules.append(time.monotonic() - started)
            assert isinstance(caught.value, MongoschedError)
        print(f"database down: /ping {pages}, /add {schedules}")
        assert max(pages) < 0.25, pages
        assert max(schedules) < 1.5, schedules  # about the connect timeout (0.5 s)
    finally:
        sched.stop_runner(graceful=False, timeout=5)


FORK_SCRIPT = r"""
import os, sys, time
from flask import Flask
from mongosched.contrib.flask import MongoSched
from tests.support.waiting import wait_child

flask_app = Flask(__name__)
flask_app.config.update(
    MONGOSCHED_URI=os.environ["URI"], MONGOSCHED_RUN_IN_PROCESS=True,
    MONGOSCHED_POLL_INTERVAL=0.05, MONGOSCHED_LEASE_DURATION=5.0,
)
sched = MongoSched(flask_app)  # starts this process's runner
parent_runner = sched.app.in_process_runner
assert parent_runner is not None
starts = []
sched.app.on("runner:start", lambda e: starts.append(os.getpid()))

@sched.task
def add(x, y):
    return x + y

@flask_app.get("/ping")
def ping():
    return "pong"

client = flask_app.test_client()
client.get("/ping"); client.get("/ping")
assert starts == [], starts
pid = os.fork()  # while the parent's runner polls
if pid == 0:
    ok = True
    try:
        runner = sched.app.in_process_runner  # the child's own, from the fork on
        ok = runner is not None and runner is not parent_runner and runner.is_running
        flask_app.test_client().get("/ping")
        flask_app.test_client().get("/ping")
        ok = ok and starts == [os.getpid()] and sched.app.in_process_runner is runner
        ok = ok and add.schedule(1, 2).wait(timeout=20).result == 3
    except BaseException as exc:
        print(repr(exc), file=sys.stderr)
        ok = False
    os._exit(0 if ok else 1)
client.get("/ping")
code = wait_child(pid)
if code is None:
    sys.exit("child hung")
assert starts == [] and sched.app.in_process_runner is parent_runner  # the parent's own
sys.exit(code)
"""


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_run_in_process_after_fork() -> None:
    name = f"mongosched_flask_{uuid.uuid4().hex[:12]}"
    # Parent and child need not share jobs: the child's job is the child's own to run.
    uri = with_database(TEST_URI, name) if TEST_URI else f"memory://{name}"
    env = {**os.environ, "URI": uri, "PYTHONPATH": str(ROOT)}
    try:
        done = subprocess.run(
            [sys.executable, "-c", FORK_SCRIPT],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    finally:
        if TEST_URI:
            import pymongo

            client: Any = pymongo.MongoClient(TEST_URI)
            client.drop_database(name)
            client.close()
    assert done.returncode == 0, done.stderr


def test_worker_given_the_extension_says_what_to_run_instead() -> None:
    """``mongosched worker site:sched`` names the Flask extension, not an App: the
    error says which command, or which app path, works."""
    from mongosched.cli.connect import load_app
    from mongosched.cli.exits import CommandError

    with pytest.raises(CommandError) as caught:
        load_app("tests.support.flask_site:sched")
    message = str(caught.value)
    assert "names a MongoSched, not a mongosched App" in message
    assert "flask --app tests.support.flask_site mongosched worker" in message
    assert "tests.support.flask_site:sched.app" in message
