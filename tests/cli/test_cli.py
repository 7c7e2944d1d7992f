"""The ``mongosched`` command: in-process through ``main(argv, app=...)``, and as a real
subprocess (``python -m mongosched``) for help, errors and the worker.

Most tests run on the test's store (``make_app``); those of ``--uri`` run on a store a
URI names: ``memory://name`` (the same store, in this process) and ``mongodb://`` (the
SecantusDB test server, or the real server with ``MONGOSCHED_TEST_URI``)."""

from __future__ import annotations

import base64
import contextlib
import gc
import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from bson import ObjectId

from mongosched import App, JobStatus, current_job
from mongosched.cli import main, parse_duration
from mongosched.cli.output import cell
from mongosched.cli.parser import VERBS
from mongosched.errors import StoreError, StoreUnavailable
from mongosched.store.memory import MemoryStore
from mongosched.testing import FakeClock, drain
from tests.support.waiting import wait_for

if TYPE_CHECKING:
    from tests.support.server_fixtures import SharedDatabase

pytest_plugins = ["tests.support.server_fixtures"]

REPO = Path(__file__).resolve().parents[2]
MISSING_ID = "0123456789abcdef01234567"
UNREACHABLE = "mongodb://127.0.0.1:1/x"


# Helpers -----------------------------------------------------------------------------------
class Run:
    """What one in-process run of the command returned and printed."""

    def __init__(self, code: int, out: str, err: str) -> None:
        self.code, self.out, self.err = code, out, err

    def json(self) -> Any:
        return json.loads(self.out)

    def fields(self) -> dict[str, str]:
        """The ``name: value`` lines of ``jobs show``."""
        pairs = (line.split(":", 1) for line in self.out.splitlines() if ":" in line)
        return {name: value.strip() for name, value in pairs}


def parse_utc(text: str) -> datetime:
    """An ISO 8601 UTC time as the CLI prints it (``...Z``; Python 3.10's
    ``fromisoformat`` does not take the ``Z``)."""
    assert text.endswith("Z"), text
    return datetime.fromisoformat(text[:-1] + "+00:00")


@pytest.fixture
def cli(capsys: pytest.CaptureFixture[str]) -> Callable[..., Run]:
    """``cli(*argv, app=...)``: run ``main`` and capture its output."""

    def run(*argv: str, app: App | None = None) -> Run:
        capsys.readouterr()
        code = main(list(argv), app=app)
        captured = capsys.readouterr()
        return Run(code, captured.out, captured.err)

    return run


def add_tasks(app: App) -> App:
    """``cli.add``, ``cli.boom`` (fails, no retry) and ``cli.echo`` (returns its
    arguments)."""

    @app.task(name="cli.add")
    def add(a: int, b: int) -> int:
        return a + b

    @app.task(name="cli.boom", retry=0)
    def boom() -> None:
        raise ValueError("boom")

    @app.task(name="cli.echo")
    def echo(*values: Any, **named: Any) -> list[Any]:
        return [*values, named]

    return app


@pytest.fixture
def sched(make_app: Callable[..., App], clock: FakeClock) -> App:
    """An app on the test's store and a fake clock, with the tasks of :func:`add_tasks`."""
    return add_tasks(make_app(clock=clock))


@pytest.fixture(params=["memory", "mongodb"])
def by_uri(request: pytest.FixtureRequest, clock: FakeClock) -> Iterator[tuple[App, str]]:
    """An app with the tasks of :func:`add_tasks`, and a URI naming its store."""
    if request.param == "memory":
        name = f"cli-{uuid.uuid4().hex[:12]}"
        request.addfinalizer(lambda: MemoryStore.forget(name))
        uri = f"memory://{name}"
    else:
        shared: SharedDatabase = request.getfixturevalue("shared_db")
        uri = shared.uri()
    app = add_tasks(App(uri, clock=clock, lease_duration=5, poll_interval=0.05))
    yield app, uri
    app.close()


def ids(rows: list[dict[str, Any]]) -> set[str]:
    return {row["id"] for row in rows}


def run_command(*argv: str, timeout: float = 20, **env: str) -> subprocess.CompletedProcess[str]:
    """``python -m mongosched argv`` in a real subprocess, from the repository root."""
    return subprocess.run(
        [sys.executable, "-m", "mongosched", *argv],
        cwd=REPO,
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def assert_one_line_error(stderr: str, *fragments: str) -> None:
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, stderr
    assert lines[0].startswith("mongosched: error: "), stderr
    assert "Traceback" not in stderr
    for fragment in fragments:
        assert fragment in lines[0], stderr


# jobs list ----------------------------------------------------------------------------------
def test_jobs_list_prints_an_aligned_table(sched: App, cli: Callable[..., Run]) -> None:
    first = sched.schedule("cli.add", 1, 2)
    second = sched.get_task("cli.add").configure(queue="emails", priority=2).schedule(3, 4)

    run = cli("jobs", "list", app=sched)

    assert run.code == 0, run.err
    header, *rows = run.out.splitlines()
    assert header.split() == [
        "ID", "TASK", "STATUS", "QUEUE", "PRI", "TRIES", "RUN", "AT", "(UTC)",
        "UPDATED", "(UTC)",
    ]  # fmt: skip
    assert {row.split()[0] for row in rows} == {str(first.id), str(second.id)}
    column = header.index("STATUS")
    for row in rows:
        assert row[column:].startswith("pending")
    assert any(row.split()[3:5] == ["emails", "2"] for row in rows)


def test_jobs_list_filters_and_json(sched: App, cli: Callable[..., Run]) -> None:
    done = sched.schedule("cli.add", 1, 2)
    failed = sched.schedule("cli.boom")
    later = sched.get_task("cli.add").configure(queue="emails", delay=60).schedule(5, 6)
    drain(sched)

    run = cli("jobs", "list", "--status", "failed", "--json", app=sched)
    assert run.code == 0, run.err
    (row,) = run.json()
    assert row["id"] == str(failed.id)
    assert row["status"] == "failed"
    assert (row["error"]["type"], row["error"]["message"]) == ("ValueError", "boom")
    assert 'raise ValueError("boom")' in row["error"]["traceback"]
    finished = row["finished_at"]
    assert finished.endswith("Z")
    assert parse_utc(finished) == sched.get_job(failed.id).finished_at  # type: ignore[union-attr]

    def listed(*options: str) -> set[str]:
        run = cli("jobs", "list", *options, "--json", app=sched)
        assert run.code == 0, run.err
        return ids(run.json())

    assert listed("--status", "completed", "failed") == {str(done.id), str(failed.id)}
    assert listed("--status", "completed,failed") == {str(done.id), str(failed.id)}
    assert listed("--status", "pending", "--status", "failed") == {str(later.id), str(failed.id)}
    assert listed("--task", "cli.add") == {str(done.id), str(later.id)}
    assert listed("--queue", "emails") == {str(later.id)}
    assert len(listed("--limit", "2")) == 2
    assert cli("jobs", "list", "--status", "nonsense", app=sched).code == 2


def test_jobs_list_shows_and_filters_labelled_jobs_by_their_label(
    sched: App, cli: Callable[..., Run]
) -> None:
    """A labelled job (a Django task's) is listed under its label, found by it."""
    mail = sched.get_task("cli.add").configure(label="app.tasks.mail").schedule(1, 2)
    plain = sched.schedule("cli.add", 3, 4)
    run = cli("jobs", "list", app=sched)
    rows = {row.split()[0]: row.split()[1] for row in run.out.splitlines()[1:]}
    assert rows == {str(mail.id): "app.tasks.mail", str(plain.id): "cli.add"}
    assert ids(cli("jobs", "list", "--label", "app.tasks.mail", "--json", app=sched).json()) == {
        str(mail.id)
    }
    shown = cli("jobs", "show", str(mail.id), app=sched).fields()
    assert (shown["task"], shown["label"]) == ("cli.add", "app.tasks.mail")


def test_jobs_show_who_ran_each_attempt_and_a_django_tasks_own_call(
    sched: App, cli: Callable[..., Run]
) -> None:
    """``jobs show`` says, for each attempt that ended, which runner, host and pid ran
    it, when and how it ended (``--json``: ``history``); a Django task's job shows its
    own arguments and Django priority (``call``, ``label_priority``)."""
    done = sched.schedule("cli.add", 1, 2)
    drain(sched)
    ran = done.refresh().history
    assert len(ran) == 1 and ran[0].pid is not None
    shown = cli("jobs", "show", str(done.id), app=sched).fields()
    assert shown["ran 1"].endswith(f"completed  runner drain on {ran[0].host} pid {ran[0].pid}")
    history = cli("jobs", "show", str(done.id), "--json", app=sched).json()["history"]
    assert [(h["attempt"], h["runner"], h["pid"], h["status"]) for h in history] == [
        (1, "drain", ran[0].pid, "completed")
    ]
    wrapped = sched.task(name="mongosched.contrib.django.run_task")(lambda **kw: None)
    django = wrapped.configure(label="shop.tasks.resize", priority=4.6).schedule(
        path="shop.tasks.resize", args=[42], kwargs={"width": 640}, django_priority=10
    )
    shown = cli("jobs", "show", str(django.id), app=sched).fields()
    assert (shown["args"], shown["kwargs"]) == ("[42]", '{"width": 640}')
    assert shown["priority"] == "10 (Django priority; mongosched priority 4.6)"
    data = cli("jobs", "show", str(django.id), "--json", app=sched).json()
    assert data["call"] == {"args": [42], "kwargs": {"width": 640}}
    assert data["label_priority"] == 10 and data["kwargs"]["path"] == "shop.tasks.resize"
    row = cli("jobs", "list", "--label", "shop.tasks.resize", app=sched).out.splitlines()[1]
    assert "10 (Django)" in row


def test_jobs_list_says_when_there_is_nothing(sched: App, cli: Callable[..., Run]) -> None:
    run = cli("jobs", "list", app=sched)
    assert (run.code, run.out.strip()) == (0, "no jobs")
    assert cli("jobs", "list", "--json", app=sched).json() == []


# jobs show ------------------------------------------------------------------------------------
def test_jobs_show_a_result_and_an_error(sched: App, cli: Callable[..., Run]) -> None:
    done = sched.schedule("cli.add", 1, 2)
    failed = sched.schedule("cli.boom")
    drain(sched)

    run = cli("jobs", "show", str(done.id), app=sched)
    assert run.code == 0, run.err
    fields = run.fields()
    assert fields["id"] == str(done.id)
    assert fields["status"] == "completed"
    assert fields["args"] == "[1, 2]"
    assert fields["result"] == "3"
    assert (fields["lease"], fields["error"]) == ("-", "-")

    run = cli("jobs", "show", str(failed.id), app=sched)
    assert run.code == 0, run.err
    assert run.fields()["error"] == "ValueError: boom"
    assert "traceback:" in run.out and 'raise ValueError("boom")' in run.out

    data = cli("jobs", "show", str(done.id), "--json", app=sched).json()
    assert (data["id"], data["task"], data["args"], data["result"]) == (
        str(done.id), "cli.add", [1, 2], 3,
    )  # fmt: skip
    assert list(data)[0] == "id" and "_id" not in data
    assert parse_utc(data["created_at"]) == done.created_at
    assert (data["status"], data["lease"], data["error"]) == ("completed", None, None)


def test_jobs_show_the_log_records_kept_with_the_job(sched: App, cli: Callable[..., Run]) -> None:
    task_log = logging.getLogger("cli.task")
    task_log.setLevel(logging.INFO)

    @sched.task(name="cli.logs", retry=0)
    def logs() -> None:
        task_log.info("step %d of %d", 1, 2)
        task_log.warning("slow disk:\nsecond line")

    job = logs.schedule()
    drain(sched)
    run = cli("jobs", "show", str(job.id), app=sched)
    assert run.code == 0, run.err
    at = cell(job.refresh().logs[0].at)
    lines = run.out.splitlines()
    start = lines.index("logs (2):")
    assert lines[start + 1 :] == [
        f"  {at}  INFO     cli.task  [1] step 1 of 2",
        f"  {at}  WARNING  cli.task  [1] slow disk:",
        "      second line",
    ]
    data = cli("jobs", "show", str(job.id), "--json", app=sched).json()
    assert [(e["level"], e["message"], e["attempt"]) for e in data["logs"]] == [
        ("INFO", "step 1 of 2", 1),
        ("WARNING", "slow disk:\nsecond line", 1),
    ]
    plain = cli("jobs", "show", str(sched.schedule("cli.add", 1, 2).id), app=sched)
    assert "logs" not in plain.out  # none kept: no section


HOSTILE = "\x1b]0;owned\x07\x1b[2J\x9b31m\x7f"
"""Escape sequences a terminal would play: ESC, BEL (C0), CSI (C1) and DEL."""
RAW = ("\x1b", "\x07", "\x9b", "\x7f")
SHOWN = "\\x1b]0;owned\\x07\\x1b[2J\\x9b31m\\x7f"
"""How the text output writes :data:`HOSTILE`: each control character as its escape."""


def assert_escaped(text: Run, as_json: Run, *values: Any) -> None:
    """Neither output holds a control character raw; the text shows each escaped and
    the JSON holds it as data (``values``: what the JSON decodes it as, somewhere)."""
    for run in (text, as_json):
        assert run.code == 0, run.err
        assert not [c for c in RAW if c in run.out], run.out
    assert SHOWN in text.out
    decoded = json.dumps(as_json.json(), ensure_ascii=False)
    for value in values:
        assert json.dumps(value, ensure_ascii=False)[1:-1] in decoded


def test_jobs_show_escapes_control_characters_in_an_error_and_a_log_line(
    sched: App, cli: Callable[..., Run]
) -> None:
    @sched.task(name="cli.hostile", retry=0)
    def hostile() -> None:
        logging.getLogger("cli.task").warning("log %s", HOSTILE)
        raise ValueError(f"error {HOSTILE}")

    job = hostile.schedule()
    drain(sched)
    text = cli("jobs", "show", str(job.id), app=sched)
    as_json = cli("jobs", "show", str(job.id), "--json", app=sched)
    assert_escaped(text, as_json, f"error {HOSTILE}", f"log {HOSTILE}")
    assert text.fields()["error"] == f"ValueError: error {SHOWN}"
    assert f"[1] log {SHOWN}" in text.out


def test_audit_escapes_control_characters_in_an_actor(sched: App, cli: Callable[..., Run]) -> None:
    sched.pause(queue="reports", actor=f"mallory{HOSTILE}")  # a Basic-auth user name, say
    text = cli("audit", app=sched)
    as_json = cli("audit", "--json", app=sched)
    assert_escaped(text, as_json, f"mallory{HOSTILE}")
    assert as_json.json()[0]["actor"] == f"mallory{HOSTILE}"


def test_jobs_show_into_a_pipe_closed_early_ends_quietly(shared_db: SharedDatabase) -> None:
    """``mongosched jobs show ID | head -1``: the reader leaves after one line of much
    more than a pipe holds; the command ends as SIGPIPE would end it, saying nothing."""
    app = add_tasks(App(shared_db.uri()))
    job = app.schedule("cli.echo", "x" * 512 * 1024)  # far more than a pipe's buffer
    app.close()
    env = {**os.environ, "MONGOSCHED_CLI_TEST_URI": shared_db.uri()}
    command = [sys.executable, "-m", "mongosched", "--app", "tests.support.cli_app:app",
               "jobs", "show", str(job.id)]  # fmt: skip
    with subprocess.Popen(
        command, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    ) as shown:
        assert shown.stdout is not None and shown.stderr is not None
        head = subprocess.run(
            ["head", "-1"], stdin=shown.stdout, capture_output=True, timeout=20, check=True
        )
        shown.stdout.close()  # head's end is the only reader left, and it has gone
        stderr = shown.stderr.read()
        assert shown.wait(timeout=20) == 141, stderr
    assert head.stdout.decode() == f"id:         {job.id}\n"
    assert stderr == b""


def test_json_holds_plain_data(sched: App, cli: Callable[..., Run]) -> None:
    """ObjectIds as their hex strings, bytes as base64, times as ISO 8601 UTC."""
    ref = ObjectId()
    at = datetime(2024, 5, 6, 7, 8, 9, 123000, tzinfo=timezone.utc)
    job = sched.schedule("cli.echo", ref, b"\x00\xffbin", at=at)
    drain(sched)
    expected = [
        str(ref),
        base64.b64encode(b"\x00\xffbin").decode(),
        {"at": "2024-05-06T07:08:09.123Z"},
    ]

    data = cli("jobs", "show", str(job.id), "--json", app=sched).json()
    assert data["status"] == "completed"
    assert [*data["args"], data["kwargs"]] == expected
    assert data["result"] == expected

    fields = cli("jobs", "show", str(job.id), app=sched).fields()
    assert json.loads(fields["args"]) == expected[:2]
    assert json.loads(fields["kwargs"]) == expected[2]
    assert json.loads(fields["result"]) == expected


def test_a_running_job_shows_its_lease_and_progress_and_can_be_cancelled(
    sched: App, cli: Callable[..., Run]
) -> None:
    release = threading.Event()  # set when the test ends, however it ends

    @sched.task(name="cli.slow", retry=0)
    def slow() -> str:
        context = current_job()
        assert context is not None
        context.set_progress(0.5, "halfway")
        deadline = time.monotonic() + 20
        while not context.is_cancelled() and time.monotonic() < deadline:
            if release.wait(0.01):
                break
        return "done"

    job = sched.schedule("cli.slow")
    runner = sched.runner(workers=1).start()
    try:
        wait_for(lambda: job.refresh().progress is not None, message="the job's progress")
        lease = job.lease
        assert lease is not None

        data = cli("jobs", "show", str(job.id), "--json", app=sched).json()
        assert data["status"] == "running"
        assert data["lease"]["owner"] == lease.owner
        assert parse_utc(data["lease"]["until"]) == lease.until
        assert (data["progress"]["value"], data["progress"]["message"]) == (0.5, "halfway")
        assert parse_utc(data["progress"]["at"]) == job.progress.at  # type: ignore[union-attr]

        fields = cli("jobs", "show", str(job.id), app=sched).fields()
        assert fields["lease"].startswith(f"{lease.owner} until {lease.until:%Y-%m-%d %H}")
        assert json.loads(fields["progress"])["message"] == "halfway"

        stats = cli("stats", "--json", app=sched).json()
        (row,) = stats["running"]
        assert (row["id"], row["task"], row["owner"], row["expired"]) == (
            str(job.id), "cli.slow", lease.owner, False,
        )  # fmt: skip
        assert parse_utc(row["lease_until"]) == lease.until
        text = cli("stats", app=sched).out
        assert "running: 1\n" in text and str(job.id) in text
        assert "backlog: default: 1 (0 due; 1 running)" in text  # it still needs a runner

        run = cli("jobs", "cancel", str(job.id), app=sched)
        assert run.code == 0, run.err
        assert "cancellation requested" in run.out
        status = cli("jobs", "show", str(job.id), app=sched).fields()["status"]
        assert status == "running (cancel requested)"
        # the task sees the request at its next heartbeat, returns, and the job ends
        wait_for(lambda: job.refresh().status is JobStatus.CANCELLED, message="the job to end")
    finally:
        release.set()
        runner.stop()


@pytest.mark.parametrize("verb", ["show", "cancel", "retry"])
def test_unknown_job_id_exits_3(sched: App, cli: Callable[..., Run], verb: str) -> None:
    run = cli("jobs", verb, MISSING_ID, app=sched)
    assert run.code == 3, run.err
    assert_one_line_error(run.err, f"no job with id {MISSING_ID}")
    assert run.out == ""


@pytest.mark.parametrize("verb", ["show", "cancel", "retry"])
@pytest.mark.parametrize("job_id", ["not-an-id", "0123456789abcdef0123456z", "{}"])
def test_what_is_not_a_job_id_exits_3(
    sched: App, cli: Callable[..., Run], verb: str, job_id: str
) -> None:
    run = cli("jobs", verb, job_id, app=sched)
    assert run.code == 3, run.err
    assert_one_line_error(run.err, f"{job_id!r} is not a job id")
    assert run.out == ""


# cancel, retry, purge ---------------------------------------------------------------------------
def test_cancel_then_retry(sched: App, cli: Callable[..., Run]) -> None:
    job = sched.schedule("cli.add", 1, 2)

    run = cli("jobs", "retry", str(job.id), app=sched)
    assert run.code == 1
    assert_one_line_error(run.err, "pending", "only failed, cancelled or expired")

    run = cli("jobs", "cancel", str(job.id), app=sched)
    assert run.code == 0, run.err
    assert "cancelled" in run.out
    assert job.refresh().status is JobStatus.CANCELLED

    run = cli("jobs", "cancel", str(job.id), app=sched)
    assert run.code == 1
    assert_one_line_error(run.err, "already cancelled")

    run = cli("jobs", "retry", str(job.id), app=sched)
    assert run.code == 0, run.err
    assert "pending again" in run.out
    assert job.refresh().status is JobStatus.PENDING
    drain(sched)
    assert job.refresh().result == 3


def test_purge_deletes_only_old_jobs_of_the_given_statuses(
    sched: App, clock: FakeClock, cli: Callable[..., Run]
) -> None:
    old = sched.schedule("cli.add", 1, 2)
    old_failed = sched.schedule("cli.boom")
    drain(sched)
    clock.advance(days=8)
    recent = sched.schedule("cli.add", 3, 4)
    drain(sched)

    run = cli("jobs", "purge", "--status", "completed", "--older-than", "7d", app=sched)
    assert run.code == 0, run.err
    assert "deleted 1 completed" in run.out
    assert sched.get_job(old.id) is None
    assert sched.get_job(recent.id) is not None
    assert sched.get_job(old_failed.id) is not None

    run = cli("jobs", "purge", "--status", "failed", "--older-than", "8d", app=sched)
    assert (run.code, sched.get_job(old_failed.id) is None) == (0, True)
    assert "deleted 1 failed" in run.out

    # pending jobs are never purged; --older-than is required; durations are checked
    for bad in (
        ["--status", "pending", "--older-than", "1s"],
        ["--status", "completed"],
        ["--older-than", "7 days"],
    ):
        assert cli("jobs", "purge", *bad, app=sched).code == 2, bad
    assert sched.get_job(recent.id) is not None


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("30s", 30), ("15m", 900), ("12h", 43200), ("7d", 604800), ("1.5h", 5400), ("45", 45)],
)
def test_durations(text: str, seconds: float) -> None:
    assert parse_duration(text) == timedelta(seconds=seconds)


@pytest.mark.parametrize(
    "option",
    [
        ("--workers", "0"),
        ("--workers", "two"),
        ("--workers", "1.5"),
        ("--poll-interval", "0"),
        ("--poll-interval", "-1"),
        ("--poll-interval", "nan"),
        ("--lease-duration", "soon"),
    ],
)
def test_bad_numbers_are_usage_errors_naming_the_option(
    cli: Callable[..., Run], option: tuple[str, str]
) -> None:
    run = cli("worker", "tests.support.cli_app:app", *option)
    assert run.code == 2 and f"argument {option[0]}: must be" in run.err, run.err


# schedules and stats ----------------------------------------------------------------------------
def test_schedules(sched: App, clock: FakeClock, cli: Callable[..., Run]) -> None:
    run = cli("schedules", app=sched)
    assert (run.code, run.out.strip()) == (0, "no schedules")

    @sched.task(name="cli.nightly", cron="0 3 * * *", timezone="Europe/Berlin", retry=0)
    def nightly() -> None:
        raise ValueError("no backup tonight")

    sched.ensure_schedules()

    run = cli("schedules", app=sched)
    assert run.code == 0, run.err
    header, row = run.out.splitlines()
    assert header.split()[:5] == ["ID", "TASK", "RULE", "TIMEZONE", "STATUS"]
    assert "cli.nightly" in row and "0 3 * * *" in row and "Europe/Berlin" in row

    (data,) = cli("schedules", "--json", app=sched).json()
    assert (data["task"], data["rule"], data["status"]) == ("cli.nightly", "0 3 * * *", "pending")
    next_run = parse_utc(data["next_run"])
    assert next_run > sched.now()
    assert (data["last_run"], data["last_status"], data["last_error"]) == (None, None, None)

    # its run fails: the schedule shows how, and waits for the next slot
    clock.set(next_run + timedelta(seconds=1))
    drain(sched)
    (data,) = cli("schedules", "--json", app=sched).json()
    assert (data["status"], data["last_status"]) == ("pending", "failed")
    assert parse_utc(data["last_run"]) == next_run + timedelta(seconds=1)
    assert (data["last_error"]["type"], data["last_error"]["message"]) == (
        "ValueError", "no backup tonight",
    )  # fmt: skip
    assert parse_utc(data["next_run"]) > next_run
    row = cli("schedules", app=sched).out.splitlines()[1]
    assert row.split()[-1] == "failed"


def test_stats(
    make_app: Callable[..., App], sched: App, clock: FakeClock, cli: Callable[..., Run]
) -> None:
    sched.schedule("cli.add", 1, 2)
    sched.schedule("cli.boom")
    drain(sched)
    due = sched.schedule("cli.add", 3, 4)
    clock.advance(seconds=2)
    sched.get_task("cli.add").configure(delay=60).schedule(5, 6)
    other = make_app(clock=clock)  # another app's task, on the same store
    other.task(name="cli.elsewhere")(lambda: None)
    other.schedule("cli.elsewhere")

    data = cli("stats", "--json", app=sched).json()
    assert data["totals"] == {
        **{s.value: 0 for s in JobStatus},
        "pending": 3, "running": 0, "completed": 1, "failed": 1, "cancelled": 0,
    }  # fmt: skip
    assert data["by_task"]["cli.add"] == {"completed": 1, "pending": 2}
    assert data["unknown_tasks"] == {"cli.elsewhere": 1}
    assert (data["oldest_due"]["id"], data["oldest_due"]["late_seconds"]) == (str(due.id), 2.0)
    assert parse_utc(data["now"]) == clock()
    assert data["running"] == []
    # the backlog per queue (an autoscaler's signal): due pending jobs, the oldest's
    # lateness, running jobs and expired leases
    assert data["backlog"] == {
        "default": {
            "due": 2,
            "oldest_run_at": data["oldest_due"]["run_at"],
            "late_seconds": 2.0,
            "running": 0,
            "expired": 0,
            "total": 2,
        }
    }

    run = cli("stats", app=sched)
    assert run.code == 0, run.err
    lines = run.out.splitlines()
    assert lines[0].split()[:6] == [
        "TASK",
        "PENDING",
        "RUNNING",
        "COMPLETED",
        "FAILED",
        "CANCELLED",
    ]
    assert ["cli.add", "2", "0", "1", "0", "0"] in [line.split()[:6] for line in lines]
    assert ["(all)", "3", "0", "1", "1", "0"] in [line.split()[:6] for line in lines]
    assert "due jobs of tasks this app does not register: cli.elsewhere (1)" in run.out
    assert f"oldest due job: {due.id} (cli.add)" in run.out
    assert "backlog: default: 2 (2 due, the oldest 2.0 s late; 0 running)" in run.out
    assert "running: 0" in run.out


# Where the database comes from ---------------------------------------------------------------------
def test_a_uri_alone_is_enough(by_uri: tuple[App, str], cli: Callable[..., Run]) -> None:
    app, uri = by_uri
    job = app.schedule("cli.add", 1, 2)

    assert ids(cli("--uri", uri, "jobs", "list", "--json").json()) == {str(job.id)}
    # the options also work after the verb
    assert ids(cli("jobs", "list", "--json", "--uri", uri).json()) == {str(job.id)}
    assert cli("--uri", uri, "jobs", "show", str(job.id), "--json").json()["args"] == [1, 2]
    # a bare URI knows no tasks, so it does not call every task unknown
    data = cli("--uri", uri, "stats", "--json").json()
    assert "unknown_tasks" not in data and data["totals"]["pending"] == 1
    run = cli("--uri", uri, "jobs", "cancel", str(job.id))
    assert run.code == 0, run.err
    assert job.refresh().status is JobStatus.CANCELLED
    # the worker needs the app that registers the tasks
    run = cli("--uri", uri, "worker")
    assert run.code == 2
    assert_one_line_error(run.err, "MODULE:APP")


def test_collection_names_the_job_collection(
    shared_db: SharedDatabase, cli: Callable[..., Run]
) -> None:
    uri = shared_db.uri()
    app = add_tasks(App(uri, collection="elsewhere_jobs"))
    try:
        job = app.schedule("cli.add", 1, 2)
        assert cli("--uri", uri, "jobs", "list", "--json").json() == []
        listed = cli("--uri", uri, "--collection", "elsewhere_jobs", "jobs", "list", "--json")
        assert ids(listed.json()) == {str(job.id)}
    finally:
        app.close()


def test_environment_variables(
    by_uri: tuple[App, str], cli: Callable[..., Run], monkeypatch: pytest.MonkeyPatch
) -> None:
    app, uri = by_uri
    job = app.schedule("cli.add", 1, 2)
    monkeypatch.delenv("MONGOSCHED_APP", raising=False)
    monkeypatch.delenv("MONGOSCHED_URI", raising=False)
    run = cli("jobs", "list")
    assert run.code == 2
    assert_one_line_error(run.err, "--uri", "MONGOSCHED_URI")

    monkeypatch.setenv("MONGOSCHED_URI", uri)
    assert cli("jobs", "show", str(job.id), "--json").json()["id"] == str(job.id)

    monkeypatch.setenv("MONGOSCHED_APP", "tests.support.no_such_module:app")
    run = cli("jobs", "list")  # MONGOSCHED_APP is preferred: it knows the tasks
    assert run.code == 4
    assert_one_line_error(run.err, "tests.support.no_such_module")
    # the command line wins over the environment
    assert ids(cli("--uri", uri, "jobs", "list", "--json").json()) == {str(job.id)}


def test_a_given_app_takes_no_app_or_uri(sched: App, cli: Callable[..., Run]) -> None:
    assert cli("stats", app=sched).code == 0
    for argv in (["--uri", "mongodb://h/db", "stats"], ["worker", "tests.support.cli_app:app"]):
        run = cli(*argv, app=sched)
        assert run.code == 2, argv
        assert_one_line_error(run.err, "the app is given")


# memory:// is one process's store -------------------------------------------------------------
EVERY_VERB = {
    "worker": ["worker"],
    "jobs": ["jobs", "list"],
    "workflows": ["workflows", "show", "1"],
    "schedules": ["schedules"],
    "stats": ["stats"],
    "ping": ["ping"],
    "retry": ["retry", "--all"],
    "cancel": ["cancel", "--all"],
    "purge": ["purge", "--all"],
    "pause": ["pause", "--queue", "emails"],
    "resume": ["resume", "--queue", "emails"],
    "pauses": ["pauses"],
    "schedule-edit": ["schedule-edit", "nightly", "--priority", "2"],
    "trigger": ["trigger", "nightly"],
    "backfill": ["backfill", "nightly", "--start", "2d", "--end", "1d"],
    "runners": ["runners"],
    "audit": ["audit"],
    "dashboard": ["dashboard", "--token", "t" * 32, "--port", "0"],
}


def test_every_verb_is_listed_here() -> None:
    assert set(EVERY_VERB) == set(VERBS)


@pytest.mark.parametrize("verb", sorted(EVERY_VERB))
def test_a_command_in_a_process_of_its_own_refuses_memory(
    capsys: pytest.CaptureFixture[str], verb: str
) -> None:
    """Run as its process's program, a command would see a memory:// store of its own,
    empty, and what it changed would vanish with it: each verb refuses, saying why and
    what to use; in this process (the store is the test's) the same command works."""
    name = f"cli-own-{uuid.uuid4().hex[:8]}"
    sched = add_tasks(App(f"memory://{name}"))
    argv = EVERY_VERB[verb]
    capsys.readouterr()
    assert main(argv, app=sched, own_process=True) == 4
    err = capsys.readouterr().err
    assert_one_line_error(
        err,
        "memory:// is the in-process store",
        "mongodb://",
        "start_runner",
        f"'mongosched {verb}'",
    )
    if verb not in ("worker", "dashboard"):  # they serve until stopped
        assert main(argv, app=sched) in (0, 1, 3), capsys.readouterr().err
    MemoryStore.forget(name)


def test_memory_uri_is_refused_by_the_command_in_its_own_process() -> None:
    result = run_command("--uri", "memory://", "ping")
    assert result.returncode == 4
    assert_one_line_error(result.stderr, "memory:// is the in-process store", "mongodb://")
    worker = run_command("worker", "tests.support.cli_app:app", MONGOSCHED_CLI_TEST_URI="memory://")
    assert worker.returncode == 4
    assert_one_line_error(worker.stderr, "'mongosched worker'", "memory://")


# Connecting and database errors ------------------------------------------------------------------
@pytest.mark.parametrize("given", [False, True], ids=["uri", "given-app"])
def test_the_timeout_bounds_the_connection_check(cli: Callable[..., Run], given: bool) -> None:
    """``--timeout`` wins over the URI's own (longer) server selection timeout, for an app
    made from ``--uri`` and for one a framework gives."""
    uri = f"{UNREACHABLE}?serverSelectionTimeoutMS=60000&appName=cli-test"
    app = App(uri) if given else None
    argv = ["--timeout", "0.5", "stats"] if given else ["--uri", uri, "--timeout", "0.5", "stats"]
    started = time.monotonic()
    try:
        run = cli(*argv, app=app)
    finally:
        if app is not None:
            app.close()
    assert run.code == 4
    assert_one_line_error(run.err, "cannot reach MongoDB at 127.0.0.1:1 within 0.5 s")
    assert time.monotonic() - started < 10
    assert run.out == ""


@pytest.mark.parametrize(
    ("failure", "code", "fragment"),
    [
        (
            StoreUnavailable("cannot reach MongoDB at db1 within 5 s (refused): check ..."),
            4,
            "error: cannot reach MongoDB at db1 within 5 s (refused): check ...",
        ),
        (
            StoreError("MongoDB refused a request (stats): not authorized on db"),
            1,
            "error: MongoDB refused a request (stats): not authorized on db",
        ),
    ],
)
def test_store_failures_exit_4_or_1(
    sched: App,
    cli: Callable[..., Run],
    monkeypatch: pytest.MonkeyPatch,
    failure: StoreError,
    code: int,
    fragment: str,
) -> None:
    def fail(*args: Any, **kwargs: Any) -> Any:
        raise failure

    monkeypatch.setattr(sched.store.jobs, "counts", fail)
    run = cli("stats", app=sched)
    assert run.code == code
    assert_one_line_error(run.err, fragment)
    assert run.out == ""


def test_a_store_that_does_not_answer_the_check_exits_4_before_the_verb(
    sched: App, cli: Callable[..., Run], monkeypatch: pytest.MonkeyPatch
) -> None:
    job = sched.schedule("cli.add", 1, 2)

    def fail(*args: Any, **kwargs: Any) -> Any:
        raise StoreUnavailable("cannot reach MongoDB at db1 within 3 s (no server)")

    monkeypatch.setattr(sched.store.jobs, "count", fail)
    run = cli("jobs", "cancel", str(job.id), app=sched)
    assert run.code == 4
    assert_one_line_error(run.err, "error: cannot reach MongoDB at db1 within 3 s (no server)")
    assert job.refresh().status is JobStatus.PENDING


# The worker's process ----------------------------------------------------------------------------
def test_the_worker_command_freezes_what_is_loaded_before_its_runner_starts(
    cli: Callable[..., Run], sched: App, monkeypatch: pytest.MonkeyPatch
) -> None:
    """In its process's main thread the command leaves what is loaded out of the
    collector's passes (gc.freeze) before its runner starts; run in another thread (as
    an app or a test may), it leaves the collector alone."""
    frozen: list[str] = []
    monkeypatch.setattr(gc, "freeze", lambda: frozen.append(threading.current_thread().name))
    ran: list[list[str]] = []

    class Runner:
        def run_forever(self) -> None:
            ran.append(list(frozen))

    monkeypatch.setattr(sched, "runner", lambda **options: Runner())
    assert cli("worker", app=sched).code == 0
    assert ran == [[threading.main_thread().name]]
    thread = threading.Thread(target=lambda: main(["worker"], app=sched))
    thread.start()
    thread.join(timeout=10)
    assert len(ran) == 2 and frozen == [threading.main_thread().name]


# The real command, in a subprocess ------------------------------------------------------------------
def test_help() -> None:
    result = run_command("--help")
    assert result.returncode == 0, result.stderr
    for text in ("worker", "jobs", "schedules", "stats", "exit codes", "MONGOSCHED_URI"):
        assert text in result.stdout
    for code in range(5):
        assert f"\n  {code} " in result.stdout
    assert "--older-than" in run_command("jobs", "purge", "--help").stdout


def test_usage_error_exits_2() -> None:
    result = run_command("jobs", "frobnicate")
    assert result.returncode == 2
    assert "invalid choice" in result.stderr


@pytest.mark.parametrize(
    ("uri", "fragment"),
    [
        ("notauri", "unknown store URI"),
        ("mongomock://cli/cli", "unknown store URI"),  # test support only, not the library's
        ("ftp://user:secret@host/db", "unknown store URI 'ftp://***@host/db'"),
        ("mongodb://user:secret@localhost", "names no database"),
        ("mongodb://user:secret@localhost:port/db", "invalid MongoDB URI"),
    ],
)
def test_bad_uri_exits_4(uri: str, fragment: str) -> None:
    result = run_command("--uri", uri, "jobs", "list")
    assert result.returncode == 4
    assert_one_line_error(result.stderr, fragment)
    assert "secret" not in result.stderr
    assert result.stdout == ""


def test_unreachable_server_exits_4_after_the_timeout() -> None:
    started = time.monotonic()
    result = run_command("--uri", "mongodb://127.0.0.1:1/x", "--timeout", "1", "stats")
    assert result.returncode == 4
    assert_one_line_error(
        result.stderr,
        "error: cannot reach MongoDB at 127.0.0.1:1 within 1 s (",
        "Connection refused): ",
        "check that MongoDB is running there",
    )
    assert "socketTimeoutMS" not in result.stderr
    assert time.monotonic() - started < 10


@pytest.mark.parametrize(
    ("path", "fragment"),
    [
        ("tests.support.no_such_module:app", "cannot import app module"),
        ("tests.support.cli_app:missing", "has no attribute 'missing'"),
        ("tests.support.cli_app:not_an_app", "not a mongosched App"),
    ],
)
def test_app_path_that_does_not_work_exits_4(path: str, fragment: str) -> None:
    result = run_command("--app", path, "jobs", "list")
    assert result.returncode == 4
    assert_one_line_error(result.stderr, fragment, path.partition(":")[0])


def test_unknown_job_id_in_a_subprocess_exits_3(shared_db: SharedDatabase) -> None:
    result = run_command(
        "--app", "tests.support.cli_app:app", "jobs", "show", MISSING_ID,
        MONGOSCHED_CLI_TEST_URI=shared_db.uri(),
    )  # fmt: skip
    assert result.returncode == 3
    assert_one_line_error(result.stderr, f"no job with id {MISSING_ID}")


def test_worker_waits_for_a_database_that_is_not_up_yet(
    shared_db: SharedDatabase, tmp_path: Path
) -> None:
    """In a deployment the worker often starts first: it waits, saying so, and runs
    jobs once the database answers; with --timeout it gives up (exit 4) as ping does."""
    server = shared_db.server
    if server is None:
        pytest.skip("needs the SecantusDB server, to start it after the worker")
    server.kill()
    uri = shared_db.uri(serverSelectionTimeoutMS=300)
    env = {"MONGOSCHED_CLI_TEST_URI": uri}
    given_up = run_command("worker", "tests.support.cli_app:app", "--timeout", "0.5", **env)
    assert given_up.returncode == 4
    assert_one_line_error(given_up.stderr, "cannot reach MongoDB at 127.0.0.1:", "within 0.5 s")
    log_path = tmp_path / "worker.log"
    command = [sys.executable, "-m", "mongosched", "worker", "tests.support.cli_app:app",
               "--poll-interval", "0.05", "--wake", "poll"]  # fmt: skip
    with worker_process(command, env, log_path) as worker:
        wait_for(
            lambda: log_path.read_text().count("waiting for the database") >= 3,
            timeout=20,
            message="the worker to say it waits, again and again",
        )
        assert worker.poll() is None, log_path.read_text()  # waiting, not exited 4
        server.start()
        (tmp_path / "release").touch()
        app = App(uri)
        app.task(name="cli.work")(lambda directory: directory)
        job = app.schedule("cli.work", str(tmp_path))
        assert job.wait(timeout=20).status is JobStatus.COMPLETED
        app.close()


def test_worker_runs_jobs_and_stops_gracefully_on_sigterm(
    shared_db: SharedDatabase, tmp_path: Path
) -> None:
    log_path = tmp_path / "worker.log"
    progress = tmp_path / "progress"
    with log_path.open("w") as log_file:
        worker = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "mongosched",
                "worker",
                "tests.support.cli_app:app",
                "--workers",
                "2",
                "--queues",
                "default,emails",
                "--poll-interval",
                "0.05",
                "--wake",
                "poll",
            ],  # fmt: skip
            cwd=REPO,
            env={
                **os.environ,
                "MONGOSCHED_CLI_TEST_DIR": str(tmp_path),
                "MONGOSCHED_CLI_TEST_URI": shared_db.uri(),
            },
            stdout=subprocess.DEVNULL,
            stderr=log_file,
        )
    try:
        # the app schedules its job when the runner starts; the worker claims and runs it
        wait_for(lambda: progress.exists(), timeout=20, message="the job to start")
        worker.send_signal(signal.SIGTERM)
        wait_for(lambda: "stopping" in log_path.read_text(), message="the worker to see SIGTERM")
        assert worker.poll() is None, "the worker exited with a job still running"
        (tmp_path / "release").touch()
        assert worker.wait(timeout=20) == 0, log_path.read_text()
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait()
    assert progress.read_text() == "started\ndone\n"  # the job finished: a graceful stop
    log = log_path.read_text()
    assert "started: 2 worker(s), queues default,emails" in log
    assert "wake poll" in log
    assert "stopped" in log
    assert "Traceback" not in log


@pytest.mark.parametrize("shown", [True, False])
def test_worker_prints_what_tasks_log_and_keeps_it_with_the_job(
    shared_db: SharedDatabase, tmp_path: Path, shown: bool
) -> None:
    """A task's ``log.info`` reaches the worker's stderr (as Celery's, RQ's and Huey's
    workers print them), unless ``--no-task-logs``; the job keeps it either way."""
    log_path = tmp_path / "worker.log"
    command = [sys.executable, "-m", "mongosched", "worker", "tests.support.cli_app:app",
               "--poll-interval", "0.05", "--wake", "poll"]  # fmt: skip
    if not shown:
        command.append("--no-task-logs")
    uri = shared_db.uri()
    with worker_process(command, {"MONGOSCHED_CLI_TEST_URI": uri}, log_path):
        app = App(uri)
        app.task(name="cli.chatty")(lambda n: n)
        job = app.schedule("cli.chatty", 7).wait(timeout=30)
        assert job.status is JobStatus.COMPLETED
        assert [(e.logger, e.message) for e in job.logs] == [("shop.tasks", "chatty says 7")]
        app.close()
    printed = log_path.read_text()
    assert ("INFO shop.tasks: chatty says 7" in printed) is shown, printed
    assert "mongosched" in printed  # the worker's own lines either way


@contextlib.contextmanager
def worker_process(command: list[str], env: dict[str, str], log_path: Path) -> Iterator[Any]:
    """``command`` (a worker) running from the repository, its stderr in ``log_path``;
    stopped with SIGTERM after the block, which it must obey (exit 0), or killed."""
    with log_path.open("w") as log_file:
        worker = subprocess.Popen(
            command, cwd=REPO, env={**os.environ, **env},
            stdout=subprocess.DEVNULL, stderr=log_file,
        )  # fmt: skip
    try:
        yield worker
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(timeout=20) == 0, log_path.read_text()
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait()


def test_the_readmes_first_job_runs_in_a_separate_worker(
    shared_db: SharedDatabase, tmp_path: Path
) -> None:
    """The README's quick start across processes, as written: ``mongosched worker
    examples.hello:app`` in one process, ``python -m examples.hello Ann`` in another,
    which prints the result and the worker's pid."""
    env = {"MONGOSCHED_URI": shared_db.uri()}
    command = [sys.executable, "-m", "mongosched", "worker", "examples.hello:app"]
    with worker_process(command, env, tmp_path / "worker.log") as worker:
        hello = subprocess.run(
            [sys.executable, "-m", "examples.hello", "Ann"],
            cwd=REPO, env={**os.environ, **env}, capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert hello.returncode == 0, hello.stderr
        last = hello.stdout.strip().splitlines()[-1]
        assert last.startswith("completed by runner ") and f"pid {worker.pid}:" in last
        assert last.endswith(f"hello, Ann (from process {worker.pid})")
