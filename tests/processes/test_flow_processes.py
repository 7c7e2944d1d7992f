"""Flow control across real worker processes: 3 processes x 4 worker threads on the
SecantusDB test server (a real MongoDB with ``MONGOSCHED_TEST_URI``), the tasks of
tests/support/worker_app.py. Rate limits are checked on the jobs' ``started_at`` (the
time each start was recorded under, see docs/flow-control.rst) and on the side
collection of runs. Run with ``-s`` to see the figures."""

from __future__ import annotations

import time
from collections import defaultdict
from datetime import datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from tests.processes.test_processes import connected, runs_by_job, scheduler, workers
from tests.support.waiting import wait_for

if TYPE_CHECKING:
    from tests.support.server_fixtures import SharedDatabase

pytest_plugins = ["tests.support.server_fixtures"]

pytestmark = pytest.mark.processes
SECOND = timedelta(seconds=1)


def most_in_a_window(times: list[datetime], window: timedelta) -> int:
    """The most of ``times`` within any closed window of length ``window``."""
    times = sorted(times)
    most, first = 0, 0
    for last, at in enumerate(times):
        while at - times[first] > window:
            first += 1
        most = max(most, last - first + 1)
    return most


def wait_all(db: Any, ids: list[Any], timeout: float) -> None:
    """Wait until every job of ``ids`` has finished (any final status)."""
    final = ["completed", "failed", "cancelled", "expired"]
    query = {"_id": {"$in": ids}, "status": {"$in": final}}
    wait_for(
        lambda: db.mongosched_jobs.count_documents(query) == len(ids),
        timeout=timeout,
        interval=0.1,
        message=f"all {len(ids)} jobs to finish",
    )


def up(procs: list[Any]) -> None:
    wait_for(lambda: all(w.started() for w in procs), timeout=30, message="workers up")


def test_a_rate_limit_holds_across_processes(shared_db: SharedDatabase, tmp_path: Path) -> None:
    jobs = 20
    app = scheduler(shared_db)
    task = app.get_task("limited")
    with workers(shared_db, tmp_path, 3, lease=10.0) as procs, connected(shared_db) as db:
        up(procs)
        t0 = time.monotonic()
        ids = [j.id for j in app.schedule_bulk([task.job() for _ in range(jobs)])]
        wait_all(db, ids, timeout=60)
        elapsed = time.monotonic() - t0
        docs = list(db.mongosched_jobs.find({"_id": {"$in": ids}}))
        runs = runs_by_job(db)
    assert all(d["status"] == "completed" and d["attempts"] == 1 for d in docs)
    assert all(len(runs[i]) == 1 for i in ids), "every limited job ran once"
    started = [d["started_at"] for d in docs]
    assert most_in_a_window(started, SECOND) <= 5
    pids = {runs[i][0]["pid"] for i in ids}
    # 20 starts at 5 per second: the last can start no sooner than 3 s after the first.
    assert max(started) - min(started) >= timedelta(seconds=3)
    print(
        f"\n{jobs} jobs at rate_limit 5/s on 3 processes x 4 threads ({len(pids)} took part): "
        f"most starts in any 1 s window {most_in_a_window(started, SECOND)}; "
        f"all completed in {elapsed:.1f} s"
    )


def test_a_keyed_limit_holds_per_key_while_other_keys_run(
    shared_db: SharedDatabase, tmp_path: Path
) -> None:
    app = scheduler(shared_db)
    task = app.get_task("keyed")
    noisy = [task.job(customer="noisy") for _ in range(8)]
    quiet = [task.job(customer=f"quiet{n % 4}") for n in range(8)]
    with workers(shared_db, tmp_path, 3, lease=10.0) as procs, connected(shared_db) as db:
        up(procs)
        noisy_ids = [j.id for j in app.schedule_bulk(noisy)]
        quiet_ids = [j.id for j in app.schedule_bulk(quiet)]
        wait_all(db, noisy_ids + quiet_ids, timeout=60)
        docs = {d["_id"]: d for d in db.mongosched_jobs.find({})}
    by_key: dict[str, list[datetime]] = defaultdict(list)
    for doc in docs.values():
        assert doc["status"] == "completed" and doc["attempts"] == 1
        by_key[doc["rate_key"]].append(doc["started_at"])
    assert all(most_in_a_window(times, SECOND) <= 2 for times in by_key.values()), by_key
    quiet_done = max(docs[i]["finished_at"] for i in quiet_ids)
    noisy_done = max(docs[i]["finished_at"] for i in noisy_ids)
    # 8 noisy jobs at 2/s take 3 s or more; the quiet keys (2 jobs each) are not queued
    # behind them.
    assert noisy_done - min(by_key["noisy"]) >= timedelta(seconds=3)
    assert quiet_done < noisy_done - SECOND
    print(
        f"\nkeyed 2/s: noisy key (8 jobs) done after "
        f"{(noisy_done - min(by_key['noisy'])).total_seconds():.1f} s, 4 quiet keys done "
        f"{(noisy_done - quiet_done).total_seconds():.1f} s before it; most starts per key "
        f"in any 1 s window: {max(most_in_a_window(t, SECOND) for t in by_key.values())}"
    )


def test_jobs_expire_under_a_backlog(shared_db: SharedDatabase, tmp_path: Path) -> None:
    app = scheduler(shared_db)
    task = app.get_task("record")
    with workers(shared_db, tmp_path, 3, lease=10.0) as procs, connected(shared_db) as db:
        up(procs)
        backlog = [j.id for j in app.schedule_bulk([task.job(seconds=0.4) for _ in range(48)])]
        urgent = task.configure(expires=timedelta(seconds=0.8))
        patient = task.configure(expires=timedelta(seconds=20))
        late = [
            j.id
            for j in app.schedule_bulk(
                [(urgent if n % 2 else patient).job(seconds=0.1) for n in range(10)]
            )
        ]
        wait_all(db, backlog + late, timeout=60)
        docs = {d["_id"]: d for d in db.mongosched_jobs.find({})}
        runs = runs_by_job(db)
    assert all(docs[i]["status"] == "completed" for i in backlog)
    expired = [i for i in late if docs[i]["status"] == "expired"]
    ran = [i for i in late if docs[i]["status"] == "completed"]
    assert len(expired) + len(ran) == len(late)
    # 48 jobs of 0.4 s on 12 threads take 1.6 s: the urgent ones behind them expire, the
    # patient ones run.
    assert sorted(expired) == sorted(late[1::2]) and sorted(ran) == sorted(late[::2])
    for i in expired:
        assert i not in runs, "an expired job ran"
        assert docs[i]["error"]["type"] == "JobExpired" and docs[i]["attempts"] == 0
    for i in ran:
        assert docs[i]["started_at"] < docs[i]["expires_at"]
    print(f"\nbehind a 1.6 s backlog: {len(expired)} of 10 jobs expired unrun, {len(ran)} ran")


def test_dependencies_fan_out_and_in_with_a_failure(
    shared_db: SharedDatabase, tmp_path: Path
) -> None:
    app = scheduler(shared_db)
    step = app.get_task("step")
    with workers(shared_db, tmp_path, 3, lease=10.0) as procs, connected(shared_db) as db:
        up(procs)
        root = step.schedule(seconds=0.3)
        fan = [step.configure(depends_on=root).schedule(seconds=0.2) for _ in range(5)]
        failing = step.configure(depends_on=root).schedule(seconds=0.1, fail=True)
        join_ok = step.configure(depends_on=fan).schedule()
        join_all = step.configure(depends_on=[*fan, failing]).schedule()
        cleanup = step.configure(depends_on=[*fan, failing], on_dependency_failure="run").schedule()
        after = step.configure(depends_on=join_all).schedule()
        ids = [j.id for j in (root, *fan, failing, join_ok, join_all, cleanup, after)]
        wait_all(db, ids, timeout=60)
        docs = {d["_id"]: d for d in db.mongosched_jobs.find({})}
        runs = runs_by_job(db)

    def status(job: Any) -> str:
        return str(docs[job.id]["status"])

    assert status(root) == "completed" and all(status(j) == "completed" for j in fan)
    assert status(failing) == "failed"
    assert status(join_ok) == "completed" and status(cleanup) == "completed"
    assert status(join_all) == "cancelled" and status(after) == "cancelled"
    assert docs[join_all.id]["error"]["type"] == "DependencyFailed"
    assert str(failing.id) in docs[join_all.id]["error"]["message"]
    assert join_all.id not in runs and after.id not in runs
    # Every job that ran started after each of its dependencies had finished.
    ran = {i: r[0] for i, r in runs.items() if i in docs}
    for job in (*fan, failing, join_ok, cleanup):
        for dep in docs[job.id]["depends_on"]:
            assert ran[job.id]["start"] >= ran[dep]["end"], (job.id, dep)
    assert len({r["pid"] for r in ran.values()}) >= 2
    print(
        f"\nfan-out 6 (one failing), fan-in 3 ways: {len(ran)} ran, each after its "
        "dependencies; the join on the failed one and its dependent cancelled unrun"
    )
