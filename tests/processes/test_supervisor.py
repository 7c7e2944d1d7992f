"""``mongosched worker --processes N``: the supervisor and its children.

The children share one database on the SecantusDB test server (memory:// is one per
process), or a real MongoDB with ``MONGOSCHED_TEST_URI``. They run
``tests.support.supervised_app:app``, whose ``record`` task writes a document per run
to the side collection ``runs`` (start, end, token, pid): executions are counted
independently of the jobs' status.
"""

from __future__ import annotations

import os
import re
import signal
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from mongosched.cli.supervisor import ENV_INDEX, ENV_SUPERVISOR, Supervisor
from mongosched.cli.verbs import child_command
from tests.processes.test_processes import LEASE, connected, overlaps, runs_by_job, scheduler
from tests.support.processes import LoggedProcess
from tests.support.waiting import wait_for

if TYPE_CHECKING:
    from tests.support.server_fixtures import SharedDatabase

pytest_plugins = ["tests.support.server_fixtures"]

STARTED = re.compile(r"process (\d+)/\d+ started \(pid (\d+)\)")


class Supervised(LoggedProcess):
    """``python -m mongosched worker tests.support.supervised_app:app --processes N``."""

    def __init__(self, shared: SharedDatabase, log: Path, processes: int, threads: int) -> None:
        env = {
            "MONGOSCHED_TEST_WORKER_URI": shared.uri(),
            "MONGOSCHED_TEST_WORKER_LEASE": str(LEASE),
        }
        command = [
            "mongosched",
            "worker",
            "tests.support.supervised_app:app",
            "--processes",
            str(processes),
            "--workers",
            str(threads),
            "--shutdown-timeout",
            "10",
        ]
        super().__init__("supervisor", command, log, env=env)

    def children(self) -> list[tuple[int, int]]:
        """(slot, pid) of every child started so far, in order."""
        return [(int(a), int(b)) for a, b in STARTED.findall(self.log())]

    def runners_started(self) -> int:
        assert self.proc.poll() is None, f"supervisor exited:\n{self.log()[-3000:]}"
        return self.log().count(" started: ")

    def stop(self, timeout: float = 30) -> None:
        super().stop(timeout)
        for _, pid in self.children():
            if alive(pid):
                os.kill(pid, signal.SIGKILL)


def alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie nobody reaped has stopped running)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


@contextmanager
def supervised(
    shared: SharedDatabase, tmp_path: Path, processes: int = 2, threads: int = 2
) -> Iterator[Supervised]:
    sup = Supervised(shared, tmp_path / "supervisor.log", processes, threads)
    try:
        wait_for(lambda: sup.runners_started() == processes, timeout=60, message="children running")
        yield sup
    except BaseException:
        print(f"\n--- supervisor log (tail) ---\n{sup.log()[-4000:]}")
        raise
    finally:
        sup.stop()


def open_runs(db: Any) -> list[dict[str, Any]]:
    return [r for rs in runs_by_job(db).values() for r in rs if r["end"] is None]


@pytest.mark.processes
def test_children_share_the_jobs_and_a_killed_one_is_replaced_without_losing_any(
    shared_db: SharedDatabase, tmp_path: Path
) -> None:
    app = scheduler(shared_db)
    task = app.get_task("record")
    with supervised(shared_db, tmp_path) as sup, connected(shared_db) as db:
        first = dict(sup.children())
        assert sorted(first) == [1, 2] and all(alive(pid) for pid in first.values())
        ids = [j.id for j in app.schedule_bulk([task.job(seconds=0.3)] * 24)]
        wait_for(
            lambda: {r["pid"] for r in open_runs(db)} == set(first.values()),
            timeout=30,
            interval=0.02,
            message="both children running jobs",
        )
        victim = open_runs(db)[0]["pid"]
        os.kill(victim, signal.SIGKILL)
        wait_for(lambda: not alive(victim), timeout=10, message="the child killed")
        killed_at = time.time()
        wait_for(lambda: len(sup.children()) == 3, timeout=30, message="a replacement started")
        wait_for(
            lambda: (
                db.mongosched_jobs.count_documents({"_id": {"$in": ids}, "status": "completed"})
                == len(ids)
            ),
            timeout=60,
            interval=0.1,
            message="every job completed after the kill",
        )
        docs = {d["_id"]: d for d in db.mongosched_jobs.find({"_id": {"$in": ids}})}
        runs = runs_by_job(db)
        slot, replacement = sup.children()[-1]
        assert first[slot] == victim and alive(replacement)
        assert all(alive(pid) for s, pid in first.items() if s != slot)
        assert "killed by SIGKILL" in sup.log() and "restarting it" in sup.log()

    assert sup.proc.returncode == 0
    interrupted = 0
    for job_id in ids:
        job_runs = runs[job_id]
        finished = [r for r in job_runs if r["end"] is not None]
        # Exactly one run ran to its end, and its outcome is the one stored.
        assert len(finished) == 1 and docs[job_id]["result"] == finished[0]["token"]
        assert overlaps(job_runs, {victim: killed_at}) == []
        if len(job_runs) > 1:  # started in the killed child, taken again after its lease
            assert [r["pid"] for r in job_runs[:-1]] == [victim]
            assert docs[job_id]["attempts"] == 2
            interrupted += 1
    assert interrupted >= 1
    assert {r["pid"] for rs in runs.values() for r in rs} >= set(first.values())


@pytest.mark.processes
def test_sigterm_stops_every_child_once_its_running_jobs_finish(
    shared_db: SharedDatabase, tmp_path: Path
) -> None:
    app = scheduler(shared_db)
    task = app.get_task("record")
    with supervised(shared_db, tmp_path) as sup, connected(shared_db) as db:
        pids = [pid for _, pid in sup.children()]
        ids = [j.id for j in app.schedule_bulk([task.job(seconds=1.5)] * 4)]
        wait_for(lambda: len(open_runs(db)) == 4, timeout=30, interval=0.02, message="4 running")
        assert {r["pid"] for r in open_runs(db)} == set(pids)
        sup.proc.send_signal(signal.SIGTERM)
        assert sup.proc.wait(30) == 0
        assert not any(alive(pid) for pid in pids)
        docs = list(db.mongosched_jobs.find({"_id": {"$in": ids}}))
        runs = runs_by_job(db)
    assert [d["status"] for d in docs] == ["completed"] * 4
    assert all(d["attempts"] == 1 for d in docs)
    assert all(len(runs[i]) == 1 and runs[i][0]["end"] is not None for i in ids)
    assert "supervisor: stopped" in sup.log()


@pytest.mark.processes
def test_children_stop_when_their_supervisor_is_killed(
    shared_db: SharedDatabase, tmp_path: Path
) -> None:
    with supervised(shared_db, tmp_path) as sup:
        pids = [pid for _, pid in sup.children()]
        sup.proc.kill()
        sup.proc.wait(10)
        wait_for(lambda: not any(alive(pid) for pid in pids), timeout=20, message="orphans stop")
        assert "is gone: stopping this process" in sup.log()


# The supervisor alone, with commands that are not workers -------------------------------------
def python(code: str) -> list[str]:
    return [sys.executable, "-c", code]


def test_a_child_that_keeps_dying_at_start_makes_the_supervisor_give_up_with_its_code() -> None:
    supervisor = Supervisor(
        python("import sys; sys.exit(4)"), 2, min_uptime=5, max_failures=3, backoff=0.01, poll=0.01
    )
    started = time.monotonic()
    assert supervisor.run() == 4
    assert supervisor.restarts >= 2
    assert time.monotonic() - started < 10
    assert supervisor.pids == []  # the other child was stopped too


def test_a_child_that_ran_a_while_is_restarted_each_time_and_sees_its_slot(
    tmp_path: Path,
) -> None:
    marks = tmp_path / "marks"
    marks.mkdir()
    # Each child writes its mark atomically (a temporary file outside marks/, then
    # os.replace): a child stopped mid-write must not leave an empty mark behind.
    code = (
        "import os, pathlib, time; "
        f"name = os.environ[{ENV_INDEX!r}] + '-' + str(os.getpid()); "
        f"tmp = pathlib.Path({str(tmp_path)!r}, name); "
        f"tmp.write_text(os.environ[{ENV_SUPERVISOR!r}]); "
        f"os.replace(tmp, pathlib.Path({str(marks)!r}, name)); time.sleep(0.2)"
    )
    supervisor = Supervisor(python(code), 2, min_uptime=0.05, max_failures=1, poll=0.01)

    def stop_after_restarts() -> None:
        wait_for(lambda: supervisor.restarts >= 4, timeout=20, message="restarts")
        supervisor.request_stop()

    timer = threading.Thread(target=stop_after_restarts)
    timer.start()
    assert supervisor.run() == 0  # never gave up: each child ran longer than min_uptime
    timer.join()
    names = [p.name for p in marks.iterdir()]
    assert {n.split("-")[0] for n in names} == {"0", "1"} and len(names) >= 4
    assert {p.read_text() for p in marks.iterdir()} == {str(os.getpid())}


def test_a_child_that_will_not_stop_is_killed_after_the_shutdown_timeout() -> None:
    stubborn = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(60)"
    supervisor = Supervisor(python(stubborn), 1, shutdown_timeout=0.1, kill_margin=0.1, poll=0.01)
    threading.Timer(1.0, supervisor.request_stop).start()
    started = time.monotonic()
    assert supervisor.run() == 1
    assert supervisor.pids == []
    assert time.monotonic() - started < 10  # not the child's 60 s


def test_the_children_run_the_command_line_that_started_the_supervisor(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    argv = ["worker", "proj:app", "--processes", "3"]
    monkeypatch.setattr(sys, "orig_argv", ["python3", "manage.py", "mongosched", *argv])
    assert child_command(argv, framework=True) == [
        sys.executable,
        "manage.py",
        "mongosched",
        *argv,
        "--processes",
        "1",
    ]
    monkeypatch.setattr(sys, "orig_argv", ["python3", "-m", "pytest"])
    assert child_command(argv, framework=False) == [
        sys.executable,
        "-m",
        "mongosched",
        *argv,
        "--processes",
        "1",
    ]
    from mongosched.cli.exits import CommandError

    with pytest.raises(CommandError, match="--processes"):
        child_command(argv, framework=True)
