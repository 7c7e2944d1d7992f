"""The ``mongosched`` command: in-process through ``main(argv, app=...)``, and as a real
subprocess (``python -m mongosched``) for help, errors and the worker."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from mongosched import App, JobStatus
from mongosched.cli import main, parse_duration
from mongosched.testing import FakeClock, drain
from tests.conftest import TEST_URI
from tests.support.waiting import wait_for

REPO = Path(__file__).resolve().parent.parent
MISSING_ID = "0123456789abcdef01234567"


# Helpers -----------------------------------------------------------------------------------
class Run:
    """What one in-process run of the command returned and printed."""

    def __init__(self, code: int, out: str, err: str) -> None:
        self.code, self.out, self.err = code, out, err

    def json(self) -> Any:
        return json.loads(self.out)


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


@pytest.fixture
def sched(make_app: Callable[..., App], clock: FakeClock) -> App:
    """An app on a fake clock with three tasks: ``cli.add``, ``cli.boom`` (fails, no
    retry) and ``cli.nightly`` (cron, registered but only used by the schedules test)."""
    app = make_app(clock=clock)

    @app.task(name="cli.add")
    def add(a: int, b: int) -> int:
        return a + b

    @app.task(name="cli.boom", retry=1)
    def boom() -> None:
        raise ValueError("boom")

    return app


def ids(rows: list[dict[str, Any]]) -> set[str]:
    return {row["id"] for row in rows}


def uri_for(database: Any) -> str:
    """A URI naming this test's database (embedded server, or the real one)."""
    if not TEST_URI:
        # conftest names the embedded server after the database
        return f"mongomock://test-{database.name}/{database.name}"
    base, _, query = TEST_URI.partition("?")
    scheme, _, rest = base.partition("://")
    hosts, _, old_db = rest.partition("/")
    if "@" in hosts and "authsource" not in query.lower():
        query = "&".join(filter(None, [query, f"authSource={old_db or 'admin'}"]))
    return f"{scheme}://{hosts}/{database.name}" + (f"?{query}" if query else "")


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
    second = sched.schedule("cli.add", 3, 4, queue="emails", priority=2)

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
    later = sched.schedule("cli.add", 5, 6, queue="emails", delay=60)
    drain(sched)

    run = cli("jobs", "list", "--status", "failed", "--json", app=sched)
    assert run.code == 0, run.err
    (row,) = run.json()
    assert row["id"] == str(failed.id)
    assert row["status"] == "failed"
    assert row["error"]["type"] == "ValueError"
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
    fields = dict(line.split(":", 1) for line in run.out.splitlines() if ":" in line)
    assert fields["id"].strip() == str(done.id)
    assert fields["status"].strip() == "completed"
    assert fields["args"].strip() == "[1, 2]"
    assert fields["result"].strip() == "3"

    run = cli("jobs", "show", str(failed.id), app=sched)
    assert run.code == 0, run.err
    assert "ValueError: boom" in run.out
    assert "traceback:" in run.out and 'raise ValueError("boom")' in run.out

    data = cli("jobs", "show", str(done.id), "--json", app=sched).json()
    assert (data["id"], data["task"], data["args"], data["result"]) == (
        str(done.id), "cli.add", [1, 2], 3,
    )  # fmt: skip
    assert data["created_at"].endswith("Z")


@pytest.mark.parametrize("job_id", [MISSING_ID, "not-an-id"])
def test_unknown_job_id_exits_3(sched: App, cli: Callable[..., Run], job_id: str) -> None:
    for verb in ("show", "cancel", "retry"):
        run = cli("jobs", verb, job_id, app=sched)
        assert run.code == 3, (verb, run.err)
        assert_one_line_error(run.err, f"no job with id {job_id}")
        assert run.out == ""


# cancel, retry, purge ---------------------------------------------------------------------------
def test_cancel_then_retry(sched: App, cli: Callable[..., Run]) -> None:
    job = sched.schedule("cli.add", 1, 2)

    run = cli("jobs", "retry", str(job.id), app=sched)
    assert run.code == 1
    assert_one_line_error(run.err, "pending", "only failed or cancelled")

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
def test_schedules(sched: App, cli: Callable[..., Run]) -> None:
    run = cli("schedules", app=sched)
    assert (run.code, run.out.strip()) == (0, "no schedules")

    @sched.task(name="cli.nightly", cron="0 3 * * *", timezone="Europe/Berlin")
    def nightly() -> None: ...

    sched.ensure_schedules()

    run = cli("schedules", app=sched)
    assert run.code == 0, run.err
    header, row = run.out.splitlines()
    assert header.split()[:5] == ["ID", "TASK", "RULE", "TIMEZONE", "STATUS"]
    assert "cli.nightly" in row and "0 3 * * *" in row and "Europe/Berlin" in row

    (data,) = cli("schedules", "--json", app=sched).json()
    assert (data["task"], data["rule"], data["status"]) == ("cli.nightly", "0 3 * * *", "pending")
    assert parse_utc(data["next_run"]) > sched.now()


def test_stats(
    make_app: Callable[..., App], sched: App, clock: FakeClock, cli: Callable[..., Run]
) -> None:
    sched.schedule("cli.add", 1, 2)
    sched.schedule("cli.boom")
    drain(sched)
    due = sched.schedule("cli.add", 3, 4)
    clock.advance(seconds=2)
    sched.schedule("cli.add", 5, 6, delay=60)
    other = make_app(clock=clock)  # another app's task, on the same database
    other.task(name="cli.elsewhere")(lambda: None)
    other.schedule("cli.elsewhere")

    data = cli("stats", "--json", app=sched).json()
    assert data["totals"] == {
        "pending": 3, "running": 0, "completed": 1, "failed": 1, "cancelled": 0,
    }  # fmt: skip
    assert data["by_task"]["cli.add"] == {"completed": 1, "pending": 2}
    assert data["unknown_tasks"] == {"cli.elsewhere": 1}
    assert (data["oldest_due"]["id"], data["oldest_due"]["late_seconds"]) == (str(due.id), 2.0)

    run = cli("stats", app=sched)
    assert run.code == 0, run.err
    lines = run.out.splitlines()
    assert lines[0].split() == ["TASK", "PENDING", "RUNNING", "COMPLETED", "FAILED", "CANCELLED"]
    assert ["cli.add", "2", "0", "1", "0", "0"] in [line.split() for line in lines]
    assert ["(all)", "3", "0", "1", "1", "0"] in [line.split() for line in lines]
    assert "due jobs of tasks this app does not register: cli.elsewhere (1)" in run.out
    assert f"oldest due job: {due.id} (cli.add)" in run.out
    assert "running: 0" in run.out


# Where the database comes from ---------------------------------------------------------------------
def test_uri_alone_is_enough(database: Any, sched: App, cli: Callable[..., Run]) -> None:
    job = sched.schedule("cli.add", 1, 2)
    uri = uri_for(database)

    assert ids(cli("--uri", uri, "jobs", "list", "--json").json()) == {str(job.id)}
    # the options also work after the verb
    assert ids(cli("jobs", "list", "--json", "--uri", uri).json()) == {str(job.id)}
    assert cli("--uri", uri, "--collection", "elsewhere", "jobs", "list", "--json").json() == []
    # a bare URI knows no tasks, so it does not call every task unknown
    assert "unknown_tasks" not in cli("--uri", uri, "stats", "--json").json()
    run = cli("--uri", uri, "jobs", "cancel", str(job.id))
    assert run.code == 0, run.err
    assert job.refresh().status is JobStatus.CANCELLED
    # the worker needs the app that registers the tasks
    run = cli("--uri", uri, "worker")
    assert run.code == 2
    assert_one_line_error(run.err, "MODULE:APP")


def test_environment_variables(
    database: Any, sched: App, cli: Callable[..., Run], monkeypatch: pytest.MonkeyPatch
) -> None:
    job = sched.schedule("cli.add", 1, 2)
    monkeypatch.delenv("MONGOSCHED_APP", raising=False)
    monkeypatch.delenv("MONGOSCHED_URI", raising=False)
    run = cli("jobs", "list")
    assert run.code == 2
    assert_one_line_error(run.err, "--uri", "MONGOSCHED_URI")

    monkeypatch.setenv("MONGOSCHED_URI", uri_for(database))
    assert cli("jobs", "show", str(job.id), "--json").json()["id"] == str(job.id)

    monkeypatch.setenv("MONGOSCHED_APP", "tests.support.no_such_module:app")
    run = cli("jobs", "list")  # MONGOSCHED_APP is preferred: it knows the tasks
    assert run.code == 4
    assert_one_line_error(run.err, "tests.support.no_such_module")
    # the command line wins over the environment
    assert cli("--uri", uri_for(database), "jobs", "list").code == 0


def test_a_given_app_takes_no_app_or_uri(sched: App, cli: Callable[..., Run]) -> None:
    assert cli("stats", app=sched).code == 0
    for argv in (["--uri", "mongodb://h/db", "stats"], ["worker", "tests.support.cli_app:app"]):
        run = cli(*argv, app=sched)
        assert run.code == 2, argv
        assert_one_line_error(run.err, "the app is given")


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
        ("notauri", "invalid MongoDB URI"),
        ("mongodb://user:secret@localhost", "names no database"),
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
    assert_one_line_error(result.stderr, "cannot connect to mongodb://127.0.0.1:1/x")
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


def test_unknown_job_id_in_a_subprocess_exits_3(database: Any) -> None:
    result = run_command(
        "--app", "tests.support.cli_app:app", "jobs", "show", MISSING_ID,
        MONGOSCHED_CLI_TEST_DB=database.name,
    )  # fmt: skip
    assert result.returncode == 3
    assert_one_line_error(result.stderr, f"no job with id {MISSING_ID}")


def test_worker_runs_jobs_and_stops_gracefully_on_sigterm(database: Any, tmp_path: Path) -> None:
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
            ],  # fmt: skip
            cwd=REPO,
            env={
                **os.environ,
                "MONGOSCHED_CLI_TEST_DIR": str(tmp_path),
                "MONGOSCHED_CLI_TEST_DB": database.name,
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
    assert "stopped" in log
    assert "Traceback" not in log
