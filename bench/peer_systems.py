"""One system of bench/peers.py: enqueue a backlog of no-op jobs, run the system's own
worker on it (bench/harness.py's method), print one JSON line.

    python bench/peer_systems.py SYSTEM --jobs N --workers N [--processes N]

Run by bench/peers.py, mongosched with the project's venv, the others with the peers'
venv (.venv-peers). Services come from the environment: ``BENCH_REDIS_URL``,
``BENCH_PG_DSN``, ``BENCH_MONGO_URI`` (the stub server), ``BENCH_DIR`` (scratch).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from harness import BENCH, Measured, measure  # noqa: E402

APPS = BENCH / "peer_apps"
sys.path.insert(0, str(APPS))

SYSTEMS = {
    "huey-sqlite": ("Huey", "SQLite"),
    "huey-redis": ("Huey", "Redis"),
    "dramatiq-redis": ("Dramatiq", "Redis"),
    "celery-redis": ("Celery, threads", "Redis"),
    "procrastinate-pg": ("Procrastinate", "PostgreSQL"),
    "rq-redis": ("RQ", "Redis"),
    "mongosched-stub": ("mongosched", "stub wire server"),
}


def worker_env(**extra: str) -> dict[str, str]:
    path = os.pathsep.join([str(APPS), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    return {**os.environ, "PYTHONPATH": path, "PYTHONUNBUFFERED": "1", **extra}


def tool(name: str) -> str:
    return str(Path(sys.executable).with_name(name))


def fresh_redis() -> Any:
    """A client of the Redis at ``BENCH_REDIS_URL``, its database emptied."""
    import redis

    client = redis.Redis.from_url(os.environ["BENCH_REDIS_URL"])
    client.flushdb()
    return client


def redis_counter() -> Callable[[], int]:
    import redis

    client = redis.Redis.from_url(os.environ["BENCH_REDIS_URL"])
    return lambda: int(client.info("stats")["total_commands_processed"])


def calibrate(remaining: Callable[[], int], requests: Callable[[], int]) -> int:
    """Requests one poll makes (the counter's own read taken off)."""
    a = requests()
    remaining()
    b = requests()
    c = requests()
    return max(0, (b - a) - (c - b))


def run(system: str, jobs: int, workers: int, processes: int, log: Path | None) -> Measured:
    name, storage = SYSTEMS[system]
    result = Measured(name, storage)
    scratch = Path(os.environ.get("BENCH_DIR", "/tmp"))
    requests: Callable[[], int] | None = None
    env = worker_env()
    if system.startswith("huey"):
        env["BENCH_HUEY_STORAGE"] = storage.lower()
        os.environ.update(env)
        if storage == "SQLite":
            db = scratch / f"huey-{os.getpid()}.db"
            os.environ["BENCH_SQLITE"] = env["BENCH_SQLITE"] = str(db)
        import huey_app

        huey_app.huey.flush()
        for _ in range(jobs):
            huey_app.noop()
        remaining: Callable[[], int] = huey_app.huey.pending_count
        command = [tool("huey_consumer"), "huey_app.huey", "-k", "thread", "-w", str(workers), "-q"]
        if storage == "Redis":
            requests = redis_counter()
        result.note = "huey_consumer -k thread"
    elif system == "dramatiq-redis":
        import dramatiq_app

        client = fresh_redis()
        for _ in range(jobs):
            dramatiq_app.noop.send()
        remaining = lambda: int(client.hlen("dramatiq:default.msgs"))  # noqa: E731
        command = [tool("dramatiq"), "dramatiq_app", "--processes", "1", "--threads", str(workers)]
        requests = redis_counter()
        result.note = "1 process"
    elif system == "celery-redis":
        import celery_app

        client = fresh_redis()
        for _ in range(jobs):
            celery_app.noop.delay()

        def remaining() -> int:
            return int(client.llen("celery")) + int(client.hlen("unacked"))

        command = [
            tool("celery"), "-A", "celery_app", "worker", "--pool", "threads",
            "-c", str(workers), "--loglevel", "WARNING",
            "--without-gossip", "--without-mingle", "--without-heartbeat",
        ]  # fmt: skip
        requests = redis_counter()
        result.note = "--pool threads"
    elif system == "rq-redis":
        import rq
        import rq_app

        client = fresh_redis()
        queue = rq.Queue(connection=client)
        for _ in range(jobs):
            queue.enqueue(rq_app.noop, result_ttl=0)

        def remaining() -> int:
            return len(queue) + int(client.zcard(queue.started_job_registry.key))

        command = [tool("rq"), "worker", "--url", os.environ["BENCH_REDIS_URL"], "-q"]
        requests = redis_counter()
        result.note = "rq worker: one job at a time, a fork per job"
    elif system == "procrastinate-pg":
        import procrastinate_app
        import psycopg

        app = procrastinate_app.app
        conn = psycopg.connect(os.environ["BENCH_PG_DSN"], autocommit=True)
        conn.execute("drop schema public cascade; create schema public")
        with app.open():
            app.schema_manager.apply_schema()
            for start in range(0, jobs, 1000):
                procrastinate_app.noop.batch_defer(*[{} for _ in range(min(1000, jobs - start))])

        def remaining() -> int:
            sql = "select count(*) from procrastinate_jobs where status in ('todo', 'doing')"
            row = conn.execute(sql).fetchone()
            return int(row[0]) if row else 0

        def transactions() -> int:
            sql = (
                "select pg_stat_force_next_flush(), xact_commit + xact_rollback "
                "from pg_stat_database where datname = current_database()"
            )
            row = conn.execute(sql).fetchone()
            return int(row[1]) if row else 0

        command = [
            tool("procrastinate"), "--log-level", "warning", "--app", "procrastinate_app.app",
            "worker",
            "--concurrency", str(workers),
        ]  # fmt: skip
        requests = transactions
        result.trips_what = "transactions"
    elif system == "mongosched-stub":
        import ms_app
        import pymongo

        client: Any = pymongo.MongoClient(os.environ["BENCH_MONGO_URI"])
        db = client.get_default_database()
        db.drop_collection("mongosched_jobs")
        ms_app.app.ensure_indexes()
        noop = ms_app.app.get_task("noop")
        for start in range(0, jobs, 5000):
            ms_app.app.schedule_bulk(noop.job() for _ in range(min(5000, jobs - start)))

        def remaining() -> int:
            return int(
                db.command(
                    "count", "mongosched_jobs", query={"status": {"$in": ["pending", "running"]}}
                )["n"]
            )

        def commands() -> int:
            stats = client.admin.command("stubStats")["commands"]
            setup = {"hello", "ismaster", "isMaster", "ping", "buildinfo", "buildInfo"}
            return sum(n for c, n in stats.items() if not c.startswith("stub") and c not in setup)

        command = [
            sys.executable, "-m", "mongosched", "worker", "ms_app:app",
            "--workers", str(workers), "--processes", str(processes), "--log-level", "warning",
        ]  # fmt: skip
        requests = commands
        result.trips_what = "commands"
        result.note = f"{workers} workers" + (f" x {processes} processes" if processes > 1 else "")
    else:
        raise SystemExit(f"unknown system {system!r}: choose from {', '.join(SYSTEMS)}")
    servers = {}
    for item in filter(None, os.environ.get("BENCH_SERVER_PIDS", "").split(",")):
        service, _, pid = item.partition(":")
        if service == {"SQLite": "", "Redis": "redis", "PostgreSQL": "postgresql"}.get(
            storage, "stub"
        ):
            servers[service] = int(pid)
    per_poll = calibrate(remaining, requests) if requests else 0
    if requests and not result.trips_what:
        result.trips_what = "commands"
    time.sleep(0.2)  # let the storage's own counters settle
    return measure(
        result,
        total=jobs,
        remaining=remaining,
        command=command,
        env=env,
        requests=requests,
        requests_per_poll=per_poll,
        log=log,
        servers=servers,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("system", choices=sorted(SYSTEMS))
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--workers", type=int, default=8)
    parser.add_argument("--processes", type=int, default=1)
    parser.add_argument("--log", type=Path, default=None, help="the worker's output")
    options = parser.parse_args()
    result = run(options.system, options.jobs, options.workers, options.processes, options.log)
    print(result.to_json(), flush=True)


if __name__ == "__main__":
    main()
