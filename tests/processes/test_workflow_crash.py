"""Durable workflows under SIGKILL at every boundary (docs/workflows.rst): ten-step
workflows whose worker process dies before a step runs and after it ran but before its
record. A replacement process replays each: the steps recorded before the kill never run
again, the one in flight runs at most once more (exactly once for the MongoDB writes of
a transactional step), and the result is an uninterrupted run's.

The first test runs plain steps (a kill inside a transactional step holds its workflow
for the lease's 60 s); the second kills processes inside transactional steps, the soak
at random times through steps and sleeps."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from mongosched import App, JobStatus
from tests.support.realserver import sweeping_transactions
from tests.support.server_fixtures import SharedDatabase, mongo_server, shared_db

__all__ = ["mongo_server", "shared_db"]

pytestmark = pytest.mark.processes

ROOT = Path(__file__).resolve().parents[2]
STEPS = 10


@pytest.mark.timeout(900)  # twenty-one processes, one after another
def test_sigkill_at_every_step_boundary_loses_and_doubles_nothing(
    shared_db: SharedDatabase, tmp_path: Path
) -> None:
    uri = shared_db.uri(serverSelectionTimeoutMS=5000)
    command = [sys.executable, "-m", "tests.support.workflow_crash_app", uri, str(tmp_path)]
    env = {**os.environ, "PLAIN_ONLY": "1", "WORKERS": "1"}  # one step in flight at a kill
    subprocess.run(command, cwd=ROOT, env={**env, "SCHEDULE": "1"}, check=True, timeout=60)
    workflows = STEPS * 2
    kills = 0
    for _ in range(workflows + 2):  # each process dies once at most, the last finishes
        child = subprocess.run(
            command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
        )
        if child.returncode == 0:
            break
        assert child.returncode == -9, child.stderr
        kills += 1
    else:
        pytest.fail("the workflows never finished")
    app = App(uri)
    jobs = app.get_jobs(task="ten", limit=0)
    assert len(jobs) == workflows
    runs = Counter(
        tuple(map(int, line.split()))
        for line in (tmp_path / "runs").read_text().split("\n")
        if line
    )
    effects = app.store.connection.database.get_collection("crash_effects")  # type: ignore[attr-defined]
    for job in jobs:
        n, (kill_step, when), transactional = job.args
        assert job.status is JobStatus.COMPLETED, (job.args, job.error)
        assert job.result == sum(n * 100 + step for step in range(STEPS))
        for step in range(STEPS):
            expected = 2 if (step == kill_step and when == "after") else 1
            assert runs[(n, step)] == expected, (job.args, step)
            if transactional:
                assert effects.count_documents({"n": n, "step": step}) == 1, (job.args, step)
    assert kills == workflows


@pytest.mark.timeout(600)
def test_sigkill_inside_a_transactional_step_commits_its_writes_once(
    shared_db: SharedDatabase, tmp_path: Path
) -> None:
    """The worker dies inside a transactional step, after its MongoDB write and before
    its commit, or at the commit (its record written in the transaction too): the open
    transaction is discarded (by the server, after its lifetime: 60 s), the lease
    expires (held 60 s through the step's transaction), and the next process runs the
    step again. Each step's write exists once, and every workflow completes, the one not
    killed too, which runs while the killed transactions are still open."""
    uri = shared_db.uri(serverSelectionTimeoutMS=5000)
    command = [sys.executable, "-m", "tests.support.workflow_crash_app", uri, str(tmp_path)]
    env = {**os.environ, "INSIDE_TRANSACTION": "1", "WORKERS": "1"}
    subprocess.run(command, cwd=ROOT, env={**env, "SCHEDULE": "1"}, check=True, timeout=60)
    with sweeping_transactions(shared_db.uri()):  # as MongoDB does; see realserver.py
        codes = [
            subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
            for _ in range(3)
        ]
    assert [c.returncode for c in codes] == [-9, -9, 0], [c.stderr[-2000:] for c in codes]
    app = App(uri)
    runs = Counter(
        tuple(map(int, line.split()))
        for line in (tmp_path / "runs").read_text().split("\n")
        if line
    )
    effects = app.store.connection.database.get_collection("crash_effects")  # type: ignore[attr-defined]
    jobs = app.get_jobs(task="ten", limit=0)
    assert len(jobs) == 3
    for job in jobs:
        n, (kill_step, _), transactional = job.args
        assert transactional
        assert job.status is JobStatus.COMPLETED, (job.args, job.error)
        assert job.result == sum(n * 100 + step for step in range(STEPS))
        for step in range(STEPS):
            assert runs[(n, step)] == (2 if step == kill_step else 1), (job.args, step)
            assert effects.count_documents({"n": n, "step": step}) == 1, (job.args, step)


@pytest.mark.soak
@pytest.mark.timeout(3600)
def test_randomized_kills_over_a_thousand_workflows_lose_and_double_nothing(
    shared_db: SharedDatabase, tmp_path: Path
) -> None:
    """``WORKFLOW_SOAK`` (1,000) workflows of ten steps, the odd ones transactional,
    with two durable sleeps, run by four workers in processes killed with SIGKILL at
    random times (1 to 4 s after they began a workflow) until one finishes: every
    workflow completes with an uninterrupted run's result, every step ran, a
    transactional step's write exists once, and only the steps in flight at a kill ran
    again."""
    count, workers = int(os.environ.get("WORKFLOW_SOAK", "1000")), 4
    uri = shared_db.uri(serverSelectionTimeoutMS=5000)
    command = [sys.executable, "-m", "tests.support.workflow_crash_app", uri, str(tmp_path)]
    subprocess.run(command, cwd=ROOT, env={**os.environ, "SOAK": str(count)}, check=True)
    rng, kills, begun = random.Random(35), 0, time.monotonic()
    with sweeping_transactions(uri):  # as MongoDB does; see realserver.py
        while True:
            stderr = tmp_path / "stderr"  # the last process's, for a failure to show
            with stderr.open("wb") as sink:
                child = subprocess.Popen(command, cwd=ROOT, stderr=sink)
            started = tmp_path / f"started-{child.pid}"
            # From its first workflow: a loaded machine takes seconds to get there.
            while not started.exists() and child.poll() is None:
                time.sleep(0.05)
            try:
                child.wait(timeout=rng.uniform(1.0, 4.0))
            except subprocess.TimeoutExpired:
                child.send_signal(signal.SIGKILL)
                child.wait()
                kills += 1
                continue
            assert child.returncode == 0, stderr.read_text(errors="replace")[-4000:]
            break
    elapsed = time.monotonic() - begun
    app = App(uri)
    jobs = app.get_jobs(task="ten", limit=0)
    assert len(jobs) == count and kills > 0
    runs = Counter(
        tuple(map(int, line.split()))
        for line in (tmp_path / "runs").read_text().split("\n")
        if line
    )
    effects = app.store.connection.database.get_collection("crash_effects")  # type: ignore[attr-defined]
    written = Counter((doc["n"], doc["step"]) for doc in effects.find({"n": {"$exists": True}}))
    for job in jobs:
        n = job.args[0]
        assert job.status is JobStatus.COMPLETED, (job.args, job.error)
        assert job.result == sum(n * 100 + step for step in range(STEPS))
        assert all(runs[(n, step)] >= 1 for step in range(STEPS))
        assert all(written[(n, step)] == 1 for step in range(1, STEPS, 2)), job.args
    again = sum(runs.values()) - count * STEPS
    # A kill interrupts at most one step per worker: only those run again.
    assert again <= kills * workers
    print(
        f"workflow soak: {count} workflows, {kills} kills, {again} steps run again, {elapsed:.0f} s"
    )
