"""Exit safety: a process that exits normally with its runner busy (``sys.exit``,
gunicorn's SIGTERM or ``--max-requests``) orphans nothing.

Before the fix, the interpreter's exit hook shut the worker pool while the daemon
dispatcher went on claiming: each claim then failed to start and stayed ``running``
until its lease expired, and with ``retry=0`` such a job ended ``failed`` without ever
having run.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from mongosched import App, JobStatus
from tests.support.server_fixtures import SharedDatabase, mongo_server, shared_db

__all__ = ["mongo_server", "shared_db"]

pytestmark = pytest.mark.processes


def test_a_process_that_exits_mid_run_leaves_no_job_that_never_started(
    shared_db: SharedDatabase, tmp_path: Path
) -> None:
    started_file = tmp_path / "started"
    started_file.touch()
    uri = shared_db.uri(serverSelectionTimeoutMS=5000)
    child = subprocess.run(
        [sys.executable, "-m", "tests.support.exiting_app", uri, str(started_file)],
        cwd=Path(__file__).resolve().parents[2],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert child.returncode == 0, child.stderr
    started = set(started_file.read_text().split())
    app = App(uri)
    jobs = app.get_jobs(task="work", limit=0)
    assert len(jobs) == 40
    by_status = {status: [j for j in jobs if j.status is status] for status in JobStatus}
    assert not by_status[JobStatus.RUNNING], "a job was left running by the exiting process"
    assert not by_status[JobStatus.FAILED], "a retry=0 job failed without running"
    for job in by_status[JobStatus.COMPLETED]:
        assert str(job.id) in started
    for job in by_status[JobStatus.PENDING]:
        assert job.attempts == 0 and str(job.id) not in started  # given back, uncounted
    assert by_status[JobStatus.COMPLETED] and by_status[JobStatus.PENDING]  # exited mid-run
    assert "unexpected" not in child.stderr and "Traceback" not in child.stderr
    # The runner stopped before the interpreter shut its workers: no claim had to be
    # given back for want of a worker.
    assert "the process is exiting; stopping gracefully" in child.stderr
    assert "giving job" not in child.stderr
