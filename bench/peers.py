"""mongosched beside the Python job queues teams pick instead, on this machine, in one run.

    python bench/peers.py [--jobs 10000] [--workers 8] [--systems a,b] [--json]
    make bench-peers

Each system drains a backlog of ``--jobs`` no-op jobs with its own worker command and
``--workers`` threads (bench/harness.py has the method: timed from the first job taken
to the last done, the worker's own CPU read from /proc, its start-up left out), and the
table shows jobs/s, the worker's CPU per job and, where the storage counts them, the
requests it received from the worker per job.

* The peers run from their own venv, ``.venv-peers`` (made on first use with pip:
  Huey, Dramatiq, Celery, RQ, Procrastinate, redis, psycopg).
* Redis and PostgreSQL are Debian's ``redis-server`` and ``postgresql``; if missing
  they are installed with apt-get when this runs as root, and each runs here as a
  private instance on a free port, in a scratch folder, stopped at the end (Redis
  without persistence, PostgreSQL with fsync and synchronous_commit off: the workers'
  CPU is what is compared, not the disks). A system whose service cannot be had is a
  row saying why it was skipped.
* mongosched runs ``mongosched worker`` against bench/stub_server.py, a fast in-memory
  wire-protocol server in a process of its own, so that its row measures the client;
  the stub counts the commands it receives.

Performance claims live here, as printed numbers, never in timed tests.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from harness import BENCH, ROOT, Measured, free_port, load, start_stub, stop  # noqa: E402
from peer_systems import SYSTEMS  # noqa: E402

VENV = ROOT / ".venv-peers"
PEER_PACKAGES = [
    "huey>=2.5",
    "dramatiq[redis]>=1.17",
    "celery[redis]>=5.4",
    "rq>=2.0",
    "procrastinate>=3.0",
    "psycopg[binary]>=3.2",
    "redis>=5",
]
CPU_GOAL = 0.6
"""mongosched's worker CPU per job, at most this many times Huey's on SQLite."""
CAPS = {"rq-redis": 1_000, "procrastinate-pg": 5_000}
"""Systems run with fewer jobs: the slowest (RQ forks a process per job) would take minutes."""
NEEDS = {
    "huey-sqlite": (),
    "huey-redis": ("redis",),
    "dramatiq-redis": ("redis",),
    "celery-redis": ("redis",),
    "procrastinate-pg": ("postgresql",),
    "rq-redis": ("redis",),
    "mongosched-stub": ("stub",),
}
ORDER = list(NEEDS)
"""The systems as the table lists them."""
GOAL = ("huey-sqlite", "mongosched-stub")
RUN_ORDER = [*GOAL, *[s for s in ORDER if s not in GOAL]]
"""The order they run in, each round: the two the goal compares back to back, since this
machine's speed drifts from one minute to the next."""


def say(*lines: str) -> None:
    print(*lines, sep="\n", file=sys.stderr, flush=True)


# The peers' venv ---------------------------------------------------------------------------------
def peers_python() -> Path:
    """.venv-peers/bin/python, made and filled on first use."""
    python = VENV / "bin" / "python"
    stamp = VENV / ".installed"
    if stamp.exists() and stamp.read_text() == "\n".join(PEER_PACKAGES):
        return python
    say(f"making {VENV.name} with {', '.join(PEER_PACKAGES)} ...")
    subprocess.run([sys.executable, "-m", "venv", str(VENV)], check=True)
    subprocess.run(
        [str(python), "-m", "pip", "install", "--quiet", *PEER_PACKAGES],
        check=True,
        stdout=subprocess.DEVNULL,
    )
    stamp.write_text("\n".join(PEER_PACKAGES))
    return python


def versions(python: Path) -> str:
    code = (
        "import importlib.metadata as m\n"
        "names = ['huey', 'dramatiq', 'celery', 'rq', 'procrastinate', 'redis', 'psycopg']\n"
        "print(', '.join(f'{n} {m.version(n)}' for n in names))"
    )
    out = subprocess.run([str(python), "-c", code], capture_output=True, text=True)
    return out.stdout.strip() or out.stderr.strip().splitlines()[-1]


# Services ----------------------------------------------------------------------------------------
def apt_install(package: str) -> str | None:
    """Install a Debian package (root only); None if done, else why not."""
    if os.geteuid() != 0 or not shutil.which("apt-get"):
        return f"{package} is not installed (and this is not root with apt-get to install it)"
    say(f"installing {package} with apt-get ...")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for attempt in ([], ["update"]):
        if attempt:
            subprocess.run(["apt-get", "update", "-q"], env=env, capture_output=True)
        done = subprocess.run(
            ["apt-get", "install", "-y", "-q", package], env=env, capture_output=True, text=True
        )
        if done.returncode == 0:
            return None
    return f"apt-get install {package} failed: {done.stderr.strip().splitlines()[-1:]}"


def wait_until(check: object, what: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if callable(check) and check():
            return
        time.sleep(0.1)
    raise RuntimeError(f"{what} did not start within {timeout:.0f} s")


@contextmanager
def redis_server(scratch: Path) -> Iterator[tuple[str, int]]:
    binary = shutil.which("redis-server")
    if binary is None:
        why = apt_install("redis-server")
        binary = shutil.which("redis-server")
        if binary is None:
            raise RuntimeError(why or "redis-server not found")
    port = free_port()
    process = subprocess.Popen(
        [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
         "--dir", str(scratch)],
        stdout=subprocess.DEVNULL,
    )  # fmt: skip
    cli = shutil.which("redis-cli")

    def ready() -> bool:
        if cli is None:
            return process.poll() is None
        ping = subprocess.run([cli, "-p", str(port), "ping"], capture_output=True, text=True)
        return ping.stdout.strip() == "PONG"

    try:
        wait_until(ready, "redis-server")
        yield f"redis://127.0.0.1:{port}/0", process.pid
    finally:
        stop(process)


def postgres_bin() -> Path | None:
    """The folder of initdb, postgres and pg_isready: Debian's newest, else on PATH."""
    found = glob.glob("/usr/lib/postgresql/*/bin/postgres")
    found.sort(key=lambda p: int(p.split("/")[4]) if p.split("/")[4].isdigit() else 0)
    if found:
        return Path(found[-1]).parent
    on_path = shutil.which("postgres")
    return Path(on_path).parent if on_path and shutil.which("initdb") else None


@contextmanager
def postgres_server(scratch: Path) -> Iterator[tuple[str, int]]:
    bindir = postgres_bin()
    if bindir is None:
        why = apt_install("postgresql")
        bindir = postgres_bin()
        if bindir is None:
            raise RuntimeError(why or "PostgreSQL's initdb not found")
    data = scratch / "pgdata"
    as_user: list[str] = []
    if os.geteuid() == 0:  # PostgreSQL refuses to run as root
        data.mkdir()
        shutil.chown(data, "postgres", "postgres")
        shutil.chown(scratch, "postgres", "postgres")
        as_user = ["runuser", "-u", "postgres", "--"]
    subprocess.run(
        [*as_user, str(bindir / "initdb"), "-D", str(data), "-U", "postgres", "--auth=trust"],
        check=True,
        capture_output=True,
    )
    port = free_port()
    process = subprocess.Popen(
        [*as_user, str(bindir / "postgres"), "-D", str(data), "-p", str(port), "-k", str(scratch),
         "-c", "listen_addresses=127.0.0.1", "-c", "fsync=off", "-c", "synchronous_commit=off",
         "-c", "full_page_writes=off"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )  # fmt: skip

    def ready() -> bool:
        check = [str(bindir / "pg_isready"), "-h", "127.0.0.1", "-p", str(port)]
        return subprocess.run(check, capture_output=True).returncode == 0

    try:
        wait_until(ready, "PostgreSQL")
        yield f"postgresql://postgres@127.0.0.1:{port}/postgres", process.pid
    finally:
        stop(process)


@contextmanager
def stub_server() -> Iterator[tuple[str, int]]:
    process, uri = start_stub()
    try:
        yield uri + "bench", process.pid
    finally:
        process.kill()
        process.wait()


# Running ------------------------------------------------------------------------------------------
def run_system(
    system: str, python: Path, env: dict[str, str], options: argparse.Namespace, logs: Path
) -> Measured:
    jobs = min(options.jobs, CAPS.get(system, options.jobs))
    command = [
        str(python), str(BENCH / "peer_systems.py"), system, "--jobs", str(jobs),
        "--workers", str(options.workers), "--log", str(logs / f"{system}.log"),
    ]  # fmt: skip
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=1800)
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines:
        name, storage = SYSTEMS[system]
        why = (done.stderr.strip().splitlines() or ["no output"])[-1]
        return Measured(name, storage, skipped=f"failed: {why}")
    return Measured.from_json(lines[-1])


def spread(values: list[float], digits: int = 0) -> str:
    """The median, and the range when there are several values."""
    text = f"{statistics.median(values):,.{digits}f}"
    if len(values) > 1:
        text += f" ({min(values):,.{digits}f}–{max(values):,.{digits}f})"
    return text


def table(results: dict[str, list[Measured]]) -> list[str]:
    """An RST simple table (the docs take it as printed): one row per system, the
    median of its runs and, over several, their range."""
    headers = [
        "system (storage)",
        "jobs/s",
        "worker CPU µs/job",
        "round trips/job",
        "server CPU µs/job",
        "notes",
    ]
    body = []
    for runs in results.values():
        done = [r for r in runs if not r.skipped]
        first = runs[0]
        label = f"{first.system} ({first.storage})"
        if not done:
            body.append([label, "—", "—", "—", "—", f"skipped: {first.skipped}"])
            continue
        trips = [r.round_trips for r in done if r.round_trips is not None]
        servers = [r.server_cpu_us for r in done if r.server_cpu_us is not None]
        body.append(
            [
                label,
                spread([r.rate for r in done]),
                spread([r.cpu_us for r in done]),
                f"{spread(trips, 2)} {done[0].trips_what}" if trips else "—",
                spread(servers) if servers else "—",
                done[0].note,
            ]
        )
    widths = [max(len(str(row[i])) for row in [headers, *body]) for i in range(len(headers))]
    line = "  ".join("=" * w for w in widths)
    fmt = lambda row: "  ".join(str(c).ljust(w) for c, w in zip(row, widths, strict=True)).rstrip()  # noqa: E731
    return [line, fmt(headers), line, *map(fmt, body), line]


def machine() -> str:
    model = "unknown CPU"
    try:
        for text in Path("/proc/cpuinfo").read_text().splitlines():
            if text.startswith("model name"):
                model = text.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{os.cpu_count()} cores ({model}), Python {platform.python_version()}, {platform.system()} {platform.release()}"


def commit() -> str:
    out = subprocess.run(
        ["git", "-C", str(ROOT), "log", "-1", "--format=%h %cs"], capture_output=True, text=True
    )
    return out.stdout.strip() or "unknown"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--workers", type=int, default=8)
    parser.add_argument("--systems", default=",".join(ORDER), help=f"from {','.join(ORDER)}")
    parser.add_argument("--rounds", type=int, default=1, help="runs of each system, in turn")
    parser.add_argument("--json", action="store_true", help="also print the rows as JSON")
    options = parser.parse_args()
    systems = [s.strip() for s in options.systems.split(",") if s.strip()]
    unknown = set(systems) - set(ORDER)
    if unknown:
        raise SystemExit(f"unknown systems: {', '.join(sorted(unknown))}")

    python = peers_python() if any(s != "mongosched-stub" for s in systems) else None
    before = load()
    with ExitStack() as stack, tempfile.TemporaryDirectory(prefix="mongosched-peers-") as tmp:
        scratch = Path(tmp)
        logs = scratch / "logs"
        logs.mkdir()
        services: dict[str, tuple[str, int]] = {}
        broken: dict[str, str] = {}
        starters = {"redis": redis_server, "postgresql": postgres_server}
        for service in sorted({n for s in systems for n in NEEDS[s]}):
            if service == "stub":
                services[service] = stack.enter_context(stub_server())
                continue
            try:
                services[service] = stack.enter_context(starters[service](scratch))
            except Exception as exc:  # the row says why
                broken[service] = f"{service}: {exc}"
        env = {
            **os.environ,
            "BENCH_DIR": str(scratch),
            "BENCH_REDIS_URL": services.get("redis", ("", 0))[0],
            "BENCH_PG_DSN": services.get("postgresql", ("", 0))[0],
            "BENCH_MONGO_URI": services.get("stub", ("", 0))[0],
            "BENCH_SERVER_PIDS": ",".join(f"{n}:{pid}" for n, (_, pid) in services.items()),
        }
        results: dict[str, list[Measured]] = {system: [] for system in systems}
        for round_ in range(options.rounds):
            for system in sorted(systems, key=RUN_ORDER.index):
                runs = results[system]
                missing = [broken[n] for n in NEEDS[system] if n in broken]
                if missing:
                    name, storage = SYSTEMS[system]
                    runs.append(Measured(name, storage, skipped="; ".join(missing)))
                    continue
                interpreter = Path(sys.executable) if system == "mongosched-stub" else python
                assert interpreter is not None
                say(f"{system}: {options.jobs:,} jobs (round {round_ + 1}) ...")
                row = run_system(system, interpreter, env, options, logs)
                if system in CAPS and CAPS[system] < options.jobs and not row.skipped:
                    row.note += f" ({CAPS[system]:,} jobs)"
                runs.append(row)
                done = f"{row.rate:,.0f} jobs/s, {row.cpu_us:,.0f} us/job"
                say(f"  {'skipped: ' + row.skipped if row.skipped else done}")

    print(
        f"{options.jobs:,} no-op jobs each, {options.workers} worker threads, one worker process; "
        f"{options.rounds} round(s), the systems in turn, Huey (SQLite) and mongosched first "
        "(median, and range); "
        f"mongosched at {commit()}",
        f"machine: {machine()}",
        f"{before} before the runs, {load()} after",
        *([f"peers: {versions(python)}"] if python else []),
        "",
        *table(results),
        sep="\n",
    )
    rows = [r for runs in results.values() for r in runs if not r.skipped]
    ms = [r for r in rows if r.system == "mongosched"]
    huey = [r for r in rows if r.system == "Huey" and r.storage == "SQLite"]
    if ms and huey:
        ratio = statistics.median(r.cpu_us for r in ms) / statistics.median(r.cpu_us for r in huey)
        print(
            f"\ngoal: mongosched worker CPU per job <= {CPU_GOAL}x Huey's (SQLite): "
            f"{ratio:.2f}x Huey's ({'met' if ratio <= CPU_GOAL else 'MISSED'})"
        )
    trips = [r.round_trips for r in ms if r.round_trips is not None]
    if trips:
        median = statistics.median(trips)
        met = "met" if median <= 1.2 else "MISSED"
        print(
            f"goal: <= 1.2 round trips per job with {options.workers} workers and a backlog: "
            f"{median:.2f} ({met})"
        )
    if options.json:
        everything = [json.loads(r.to_json()) for runs in results.values() for r in runs]
        print(json.dumps(everything, indent=2))


if __name__ == "__main__":
    main()
