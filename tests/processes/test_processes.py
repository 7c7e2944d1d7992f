"""Real worker processes sharing one server: throughput, kill -9 of a worker, kill -9
of the server.

The server is SecantusDB (tests/support/realserver.py; a real MongoDB with
``MONGOSCHED_TEST_URI``); the tests of the wire-protocol stand-in itself
(tests/support/server.py) run on it. Workers are ``python -m tests.support.worker_app``
subprocesses running ``app.run_worker``; every run of the ``record`` task writes a
document to the side collection ``runs`` (start, end, lease token, pid), so executions
are counted independently of job status. Run with ``-s`` to see the figures.
"""

from __future__ import annotations

import signal
import time
from collections import Counter, defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from pymongo.errors import AutoReconnect, BulkWriteError, DuplicateKeyError

from mongosched import App
from tests.support import worker_app
from tests.support.processes import LoggedProcess
from tests.support.waiting import wait_for

if TYPE_CHECKING:
    from tests.support.server_fixtures import SharedDatabase

# The fixtures shared_db (SecantusDB) and standin_db (the wire-protocol stand-in).
pytest_plugins = ["tests.support.server_fixtures"]

LEASE = 1.5


# Worker processes -----------------------------------------------------------------------------
class Worker(LoggedProcess):
    """``python -m tests.support.worker_app``: always stopped."""

    def __init__(
        self, name: str, uri: str, log: Path, workers: int, lease: float, *extra: str
    ) -> None:
        args = ["--workers", str(workers), "--lease", str(lease), "--name", name, *extra]
        super().__init__(name, ["tests.support.worker_app", uri, *args], log)

    def ready(self) -> bool:
        assert self.proc.poll() is None, f"worker {self.name} exited:\n{self.log()[-3000:]}"
        return " ready" in self.log()

    def started(self) -> bool:
        assert self.proc.poll() is None, f"worker {self.name} exited:\n{self.log()[-3000:]}"
        return " started: " in self.log()


@contextmanager
def workers(
    shared: SharedDatabase,
    tmp_path: Path,
    count: int,
    *,
    threads: int = 4,
    lease: float = LEASE,
    **uri_options: Any,
) -> Iterator[list[Worker]]:
    """``count`` worker processes; always stopped (killed if they will not stop)."""
    uri = shared.uri(**uri_options)
    started: list[Worker] = []
    try:
        for i in range(count):
            started.append(Worker(f"w{i}", uri, tmp_path / f"w{i}.log", threads, lease))
        yield started
    except BaseException:
        for w in started:
            tail = w.log()[-2000:] if w.log_path.exists() else ""
            print(f"\n--- worker {w.name} log (tail) ---\n{tail}")
        raise
    finally:
        for w in started:
            w.stop()


def start_worker(shared: SharedDatabase, tmp_path: Path, name: str, *extra: str) -> Worker:
    return Worker(name, shared.uri(), tmp_path / f"{name}.log", 4, LEASE, *extra)


# Reading the facts --------------------------------------------------------------------------------
@contextmanager
def connected(shared: SharedDatabase) -> Iterator[Any]:
    client = shared.client(serverSelectionTimeoutMS=10000)
    try:
        yield shared.database(client)
    finally:
        client.close()


def scheduler(shared: SharedDatabase) -> App:
    """An app in this process for scheduling and reading jobs (it runs nothing)."""
    return worker_app.build(shared.uri(serverSelectionTimeoutMS=10000), LEASE, 0.05)


def runs_by_job(db: Any) -> dict[Any, list[dict[str, Any]]]:
    runs: dict[Any, list[dict[str, Any]]] = defaultdict(list)
    for run in db[worker_app.RUNS].find({}):
        runs[run["job"]].append(run)
    for job_runs in runs.values():
        job_runs.sort(key=lambda r: r["start"])
    return runs


def overlaps(
    runs: list[dict[str, Any]], ended: dict[int, float] | None = None
) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """Pairs of runs of one job by different lease holders whose executions overlap.
    A run without ``end`` is still going, unless its process was killed: then it ended
    when the process did (``ended[pid]``), since nothing runs in a dead process."""
    ended = ended or {}

    def end(run: dict[str, Any]) -> float:
        if run.get("end") is not None:
            return float(run["end"])
        return ended.get(run["pid"], float("inf"))

    pairs = []
    for i, a in enumerate(runs):
        for b in runs[i + 1 :]:
            if a["token"] != b["token"] and b["start"] < end(a) and a["start"] < end(b):
                pairs.append((a, b))
    return pairs


def count_status(db: Any, status: str) -> int:
    return int(db.mongosched_jobs.count_documents({"status": status}))


# The stand-in server itself ------------------------------------------------------------------------
def test_the_wire_protocol_server_serves_pymongo(standin_db: SharedDatabase) -> None:
    """CRUD, cursors, indexes and errors through a real pymongo client."""
    with connected(standin_db) as db:
        jobs = db.jobs
        assert db.command("ping")["ok"] == 1
        jobs.create_index(
            [("task", 1), ("key", 1)],
            name="dedupe",
            unique=True,
            partialFilterExpression={"key": {"$exists": True}},
        )
        jobs.create_index([("expire_at", 1)], name="ttl", expireAfterSeconds=0)
        info = jobs.index_information()
        assert info["dedupe"]["unique"] and "partialFilterExpression" in info["dedupe"]
        assert info["ttl"]["expireAfterSeconds"] == 0
        now = datetime.now(timezone.utc).replace(microsecond=0)
        jobs.insert_many([{"_id": i, "task": "t", "n": i % 3, "at": now} for i in range(250)])
        # A cursor over several batches (find, then getMore), with sort/skip/limit/projection.
        docs = list(
            jobs.find({"n": 1}, {"n": 1}, sort=[("_id", -1)], skip=2, limit=60, batch_size=7)
        )
        assert [d["_id"] for d in docs] == list(range(247, 0, -3))[2:62]
        assert all(set(d) == {"_id", "n"} for d in docs)
        assert jobs.find_one({"_id": 4})["at"] == now  # tz-aware datetimes round-trip
        assert jobs.count_documents({"n": 2}) == 83
        # Unique partial index: only documents that carry the key are constrained.
        jobs.insert_one({"_id": "a", "task": "t", "key": "k"})
        jobs.insert_one({"_id": "b", "task": "t"})
        with pytest.raises(DuplicateKeyError):
            jobs.insert_one({"_id": "c", "task": "t", "key": "k"})
        with pytest.raises(DuplicateKeyError):
            jobs.update_one({"_id": "b"}, {"$set": {"key": "k"}})
        with pytest.raises(DuplicateKeyError):
            jobs.find_one_and_update({"_id": "b"}, {"$set": {"key": "k"}})
        with pytest.raises(BulkWriteError) as bulk:
            jobs.insert_many(
                [{"_id": "d", "task": "t", "key": "k"}, {"_id": "e", "task": "t", "key": "e"}],
                ordered=False,
            )
        assert [e["code"] for e in bulk.value.details["writeErrors"]] == [11000]
        assert bulk.value.details["nInserted"] == 1
        # findAndModify: sort, $inc, projection, return after; upsert.
        got = jobs.find_one_and_update(
            {"n": 2},
            {"$inc": {"hits": 1}},
            sort=[("_id", -1)],
            projection={"hits": 1},
            return_document=True,
        )
        assert got == {"_id": 248, "hits": 1}
        assert jobs.find_one_and_update({"_id": "x"}, {"$set": {"v": 1}}) is None
        assert jobs.find_one_and_update({"_id": "x"}, {"$set": {"v": 1}}, upsert=True) is None
        assert jobs.find_one({"_id": "x"}) == {"_id": "x", "v": 1}
        assert jobs.update_many({"n": 0}, {"$set": {"z": 1}}).modified_count == 84
        assert jobs.delete_many({"n": 0}).deleted_count == 84
        rows = list(
            jobs.aggregate(
                [{"$match": {"task": "t"}}, {"$group": {"_id": "$n", "c": {"$sum": 1}}},
                 {"$sort": {"c": -1}}, {"$limit": 1}]
            )
        )  # fmt: skip
        assert rows == [{"_id": 1, "c": 83}] or rows == [{"_id": 2, "c": 83}]
    print(f"\nserver commands: {standin_db.server.engine.commands}")


def test_the_server_restarts_on_its_port_with_its_data_and_can_lose_replies(
    standin_db: SharedDatabase,
) -> None:
    server = standin_db.server
    with connected(standin_db) as db:
        db.c.insert_one({"_id": 1})
        port = server.port
        server.stop()
        with pytest.raises(AutoReconnect):  # ServerSelectionTimeoutError is one
            standin_db.client(serverSelectionTimeoutMS=300).get_database("x").command("ping")
        server.start()
        assert server.port == port
        assert db.c.find_one({"_id": 1}) == {"_id": 1}
        # A lost reply: the insert is applied, the client sees a network error.
        server.drop_replies(1, ["insert"])
        with pytest.raises(AutoReconnect):
            db.c.insert_one({"_id": 2})
        assert db.c.find_one({"_id": 2}) == {"_id": 2}
        # Dropped connections: the next call fails (or retries, for reads) and recovers.
        assert server.drop_connections() >= 1
        wait_for(lambda: _pings(db), timeout=10, message="reconnect")
        server.delay = 0.3
        t0 = time.monotonic()
        db.command("ping")
        assert time.monotonic() - t0 >= 0.3
        server.delay = 0.0


def _pings(db: Any) -> bool:
    try:
        return bool(db.command("ping")["ok"])
    except AutoReconnect:
        return False


# 1. Real worker processes -----------------------------------------------------------------------------
@pytest.mark.processes
@pytest.mark.parametrize(
    "jobs",
    [
        pytest.param(200, id="200-jobs"),
        pytest.param(1000, id="1000-jobs", marks=[pytest.mark.soak, pytest.mark.timeout(1800)]),
    ],
)
def test_three_worker_processes_run_every_job_exactly_once(
    shared_db: SharedDatabase, tmp_path: Path, jobs: int
) -> None:
    app = scheduler(shared_db)
    # No faults here, so no lease may expire: the lease is far longer than the stand-in
    # server's latency under this load (it scans every document per query; at 500 jobs
    # and a 1.5 s lease a few leases did expire, and those jobs correctly ran twice).
    lease = 15.0
    with workers(shared_db, tmp_path, 3, lease=lease) as procs, connected(shared_db) as db:
        wait_for(lambda: all(w.started() for w in procs), timeout=30, message="workers up")
        t0 = time.monotonic()
        task = app.get_task("record")
        scheduled = app.schedule_bulk([task.job() for _ in range(jobs)])
        # SecantusDB's planner scans and sorts the whole collection for each claim
        # (tests/meta/test_realserver.py pins it): about 0.15 s of its one core per
        # claim with 1,000 jobs pending, against 0.03 s with 200. So the wait grows
        # with the backlog; on MongoDB the claim index keeps a claim's cost flat.
        wait_for(
            lambda: count_status(db, "completed") == jobs,
            timeout=max(300, 1.5 * jobs),
            interval=0.2,
            message=f"{jobs} jobs completed",
        )
        elapsed = time.monotonic() - t0
        docs = {d["_id"]: d for d in db.mongosched_jobs.find({})}
        runs = runs_by_job(db)
        requests = getattr(shared_db.server, "requests", None)  # the stand-in counts them

    ids = {job.id for job in scheduled}
    assert set(docs) == ids and len(ids) == jobs
    attempts = Counter(d["attempts"] for d in docs.values())
    assert all(d["status"] == "completed" for d in docs.values())
    assert attempts == {1: jobs}, f"attempts per job: {dict(attempts)}; errors: " + str(
        [d.get("error") for d in docs.values() if d["attempts"] != 1][:3]
    )
    # Counted by the side collection, not by status: one run per job, ended, and the
    # result stored is that run's.
    assert set(runs) == ids
    assert {job_id: len(r) for job_id, r in runs.items() if len(r) != 1} == {}
    assert all(r[0]["end"] is not None and not r[0]["lease_lost"] for r in runs.values())
    assert all(docs[job_id]["result"] == r[0]["token"] for job_id, r in runs.items())
    per_worker = Counter(r[0]["pid"] for r in runs.values())
    assert set(per_worker) == {w.pid for w in procs}, "every worker process took part"
    print(
        f"\n{jobs} jobs, 3 worker processes x 4 threads: {elapsed:.1f} s, "
        f"{jobs / elapsed:.0f} jobs/s; runs per job: 1; attempts: 1 each; "
        f"per worker: {sorted(per_worker.values())}; lease {lease} s"
        + (f"; {requests} server requests ({requests / jobs:.0f}/job)" if requests else "")
    )


# 2. kill -9 --------------------------------------------------------------------------------------------
@pytest.mark.processes
def test_jobs_of_a_sigkilled_worker_run_again_elsewhere_after_their_leases_expire(
    shared_db: SharedDatabase, tmp_path: Path
) -> None:
    long_jobs, short_jobs, long_seconds = 4, 30, 3.0
    app = scheduler(shared_db)
    task = app.get_task("record")
    gate = tmp_path / "gate"
    procs: list[Worker] = []
    try:
        # The other two processes start now but run their workers only once the gate opens.
        for i in (1, 2):
            procs.append(start_worker(shared_db, tmp_path, f"w{i}", "--gate", str(gate)))
        others = list(procs)
        victim = start_worker(shared_db, tmp_path, "victim")
        procs.append(victim)
        with connected(shared_db) as db:
            long_ids = [
                j.id for j in app.schedule_bulk([task.job(seconds=long_seconds)] * long_jobs)
            ]
            # The victim (4 threads) takes all four long jobs and starts running them.
            wait_for(
                lambda: db[worker_app.RUNS].count_documents({"pid": victim.pid}) == long_jobs,
                timeout=30,
                message="victim running the long jobs",
            )
            held = list(db.mongosched_jobs.find({"_id": {"$in": long_ids}}))
            assert all(d["status"] == "running" and d["lease"]["owner"] == "victim" for d in held)
            wait_for(lambda: all(w.ready() for w in others), timeout=30, message="others ready")
            gate.touch()
            wait_for(lambda: all(w.started() for w in others), timeout=30, message="others up")
            short_ids = [j.id for j in app.schedule_bulk([task.job() for _ in range(short_jobs)])]

            victim.proc.send_signal(signal.SIGKILL)
            victim.proc.wait(10)
            killed_at = time.time()  # after the process is gone: nothing of it runs later
            t_kill = time.monotonic()
            all_ids = long_ids + short_ids
            wait_for(
                lambda: (
                    db.mongosched_jobs.count_documents(
                        {"_id": {"$in": all_ids}, "status": "completed"}
                    )
                    == len(all_ids)
                ),
                timeout=60,
                interval=0.1,
                message="every job completed after the kill",
            )
            recovered = time.monotonic() - t_kill
            docs = {d["_id"]: d for d in db.mongosched_jobs.find({})}
            runs = runs_by_job(db)
    finally:
        for w in procs:
            w.stop()

    takeover_gaps = []
    for job_id in long_ids:
        job_runs = runs[job_id]
        first, second = job_runs
        assert first["pid"] == victim.pid and first["end"] is None  # killed mid-run
        assert second["pid"] in {w.pid for w in others} and second["end"] is not None
        assert docs[job_id]["attempts"] == 2 and second["attempt"] == 2
        assert docs[job_id]["result"] == second["token"]
        assert overlaps(job_runs, {victim.pid: killed_at}) == []
        takeover_gaps.append(second["start"] - killed_at)
    for job_id in short_ids:
        assert len(runs[job_id]) == 1 and docs[job_id]["attempts"] == 1
        assert docs[job_id]["result"] == runs[job_id][0]["token"]
    assert all(d["status"] == "completed" for d in docs.values()) and len(docs) == len(all_ids)
    print(
        f"\nkill -9 with {long_jobs} leases held ({LEASE} s lease, {long_seconds} s jobs): "
        f"all {long_jobs} re-run elsewhere with attempts=2, started "
        f"{min(takeover_gaps):.2f}-{max(takeover_gaps):.2f} s after the kill; "
        f"{short_jobs} other jobs once each; everything done {recovered:.1f} s after the kill; "
        "no overlapping holders"
    )


# 3. The server killed ----------------------------------------------------------------------------------
@pytest.mark.processes
def test_workers_carry_on_after_the_server_is_killed_and_restarted_on_its_storage(
    shared_db: SharedDatabase, tmp_path: Path
) -> None:
    """kill -9 of the server while two worker processes work through a backlog; five
    seconds later it starts again on the same storage (its journal): no job is lost,
    none ran twice at once, none is left running."""
    server = shared_db.server
    if server is None:
        pytest.skip("killing the server needs SecantusDB (not MONGOSCHED_TEST_URI)")
    jobs, seconds, outage = 90, 0.25, 5.0
    app = scheduler(shared_db)
    task = app.get_task("record")
    # Fail fast while the server is away: with the default (30 s) every operation would
    # just block through the outage. At 0.25 s the store's own retries (4 tries, about
    # 1.6 s) give up well within it, so the runners' error handling and backoff are tested.
    options = {"serverSelectionTimeoutMS": 250, "connectTimeoutMS": 500}
    with workers(shared_db, tmp_path, 2, threads=2, **options) as procs:
        with connected(shared_db) as db:
            wait_for(lambda: all(w.started() for w in procs), timeout=30, message="workers up")
            t0 = time.monotonic()
            ids = [j.id for j in app.schedule_bulk([task.job(seconds=seconds)] * jobs)]
            wait_for(lambda: count_status(db, "completed") >= 20, timeout=60, message="progress")
            in_flight = count_status(db, "running")
            done_before = count_status(db, "completed")
        server.kill()
        time.sleep(outage)  # the outage itself
        server.start()
        restarted_at = time.time()
        with connected(shared_db) as db:
            wait_for(
                lambda: count_status(db, "completed") == jobs,
                timeout=90,
                interval=0.2,
                message="every job completed after the outage",
            )
            elapsed = time.monotonic() - t0
            # Run records written while the server was away are flushed after it is back.
            wait_for(
                lambda: (
                    all(r["end"] is not None for rs in runs_by_job(db).values() for r in rs)
                    and len(runs_by_job(db)) == jobs
                ),
                timeout=30,
                interval=0.2,
                message="run records flushed",
            )
            now = datetime.now(timezone.utc)
            running = db.mongosched_jobs.count_documents({"status": "running"})
            stale = db.mongosched_jobs.count_documents(
                {"status": "running", "lease.until": {"$lt": now}}
            )
            docs = {d["_id"]: d for d in db.mongosched_jobs.find({})}
            runs = runs_by_job(db)
        assert all(w.proc.poll() is None for w in procs), "every worker survived"
        logs = {w.name: w.log() for w in procs}

    assert set(docs) == set(ids) and all(d["status"] == "completed" for d in docs.values())
    assert running == 0 and stale == 0
    outage_lines = ("database error", "maintenance failed", "heartbeat for job")
    for name, log in logs.items():
        assert any(line in log for line in outage_lines), f"{name} logged nothing of the outage"
    # The dispatchers back off (each one that tried to claim during the outage).
    backoffs = {name: log.count("database error") for name, log in logs.items()}
    assert sum(backoffs.values()) >= 1
    assert all("reachable again" in logs[name] for name, n in backoffs.items() if n)
    # Resumed: every worker process started runs after the server came back.
    resumed = {r["pid"] for rs in runs.values() for r in rs if r["start"] > restarted_at}
    assert resumed == {w.pid for w in procs}
    rerun = 0
    for job_id, job_runs in runs.items():
        doc = docs[job_id]
        landed = [r for r in job_runs if r["token"] == doc["result"]]
        # The stored outcome is from a run that ended holding its lease, the last attempt.
        assert len(landed) == 1 and landed[0]["end"] is not None
        assert not landed[0]["lease_lost"] and landed[0]["attempt"] == doc["attempts"]
        # Executions overlap only if the earlier holder had lost its lease (and so its
        # outcome was refused): never two live holders.
        for a, _ in overlaps(job_runs):
            assert a["lease_lost"] is True, f"two live holders of job {job_id}"
        rerun += len(job_runs) > 1
    assert set(runs) == set(ids)
    lost = sum(r.get("lease_lost", False) for rs in runs.values() for r in rs)
    print(
        f"\n{jobs} jobs x {seconds} s on 2 workers x 2 threads; server killed (-9), down "
        f"{outage:.0f} s after {done_before} done ({in_flight} running), started again on "
        f"its storage: all completed in {elapsed:.1f} s; "
        f"{rerun} ran again (at-least-once), {lost} runs lost their lease; "
        f"dispatcher backoffs logged per worker {sorted(backoffs.values())}; max attempts "
        f"{max(d['attempts'] for d in docs.values())}; none left running"
    )
