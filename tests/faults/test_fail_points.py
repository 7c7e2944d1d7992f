"""Randomized faults through the real server's fail points (issue 23, item 3).

Two apps, each with a runner, share one database on SecantusDB and work through a
backlog while a driver thread arms one-shot ``failCommand`` fail points, one after
another, on the commands the store sends: the single claim's ``findAndModify``, the
batched claim's ``find`` and ``update``, settles and renewals (``update``), ``delete``,
and the change stream's ``aggregate`` and ``getMore``. Each fault is a dropped
connection, a server error (retryable, with the label MongoDB gives writes, or not), a
write concern error (the write applied, the reply an error) or a reply held back,
with ``times`` or ``skip``. Meanwhile a third app cancels some jobs.

After the run, with the fail point off, these hold:

* no job lost: every job ends completed, or cancelled when a cancel of it landed;
* never two runs of a job at once (each run is recorded with its start and end);
* no run after a run that finished: a one-shot fault costs a retry of the command that
  met it, never a second run;
* every cancel that landed is honoured: a job cancelled while pending never starts,
  one cancelled while running ends cancelled (or completed, when its outcome was
  written as the cancel landed).

Faults come 0.2 to 0.8 s apart, each meeting one command (or, with ``skip``, a short
burst). Closer together they make a lasting outage, not one-shot faults: pymongo
answers each "not primary" or "shutting down" error by discovering the server anew,
and with faults every 20 to 100 ms renewals and outcome writes waited longer than a
lease, which then expired as it should. The run is seeded (``MONGOSCHED_FAULT_SEED``
replays one); a failure names its seed, and the figures (runs, faults armed by kind
and by command, cancels) are printed (``-s``).

The apps' clients check the server every 0.5 s (``heartbeatFrequencyMS``). SecantusDB's
"not primary" errors carry no topology version, so pymongo marks the server unknown
and waits for its monitor's next reply, by default up to 10 s: as long as a lease,
which turned a one-shot fault into an outage, and finished jobs ran again once their
leases expired (tests/meta/test_realserver.py pins this). MongoDB's fail point errors
carry the version, and pymongo goes on at once.
"""

from __future__ import annotations

import os
import queue
import random
import threading
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pytest

from mongosched import App, Cancellation, JobStatus
from mongosched.errors import MongoschedError
from tests.support.realserver import configure_fail_point
from tests.support.waiting import wait_for

if TYPE_CHECKING:
    from tests.support.server_fixtures import SharedDatabase

pytest_plugins = ["tests.support.server_fixtures"]  # shared_db: SecantusDB

WRITES = ("findAndModify", "update", "delete")
READS = ("find", "aggregate", "getMore")
RETRYABLE = (91, 189, 10107, 11600)  # shutting down, stepped down, not primary, interrupted
NOT_RETRYABLE = 2  # BadValue
LEASE = 10.0  # seconds
GAP = (0.2, 0.8)  # seconds between two faults: each one-shot, not a lasting outage
HEARTBEAT_MS = 500  # how often pymongo checks the server (see the module)


def _fault(rng: random.Random) -> tuple[str, dict[str, Any], dict[str, int]]:
    """A one-shot fault: its name (``kind:command``), its data and its mode."""
    command = rng.choice(WRITES + READS)
    kind = rng.choice(("closeConnection", "retryable", "not_retryable", "writeConcern", "block"))
    if kind == "writeConcern" and command not in WRITES:
        kind = "retryable"
    data: dict[str, Any] = {"failCommands": [command]}
    if kind == "closeConnection":
        data["closeConnection"] = True
    elif kind == "retryable":
        data["errorCode"] = rng.choice(RETRYABLE)
        if command in WRITES:  # MongoDB labels a retryable error of a write so
            data["errorLabels"] = ["RetryableWriteError"]
    elif kind == "not_retryable":
        data["errorCode"] = NOT_RETRYABLE
    elif kind == "writeConcern":
        data["writeConcernError"] = {
            "code": 64,
            "codeName": "WriteConcernFailed",
            "errmsg": "waiting for replication timed out",
            "errInfo": {"wtimeout": True},
        }
    else:
        data["blockConnection"] = True
        data["blockTimeMS"] = rng.choice((100, 300, 600))
    # ``skip`` lets n commands pass, then fails every later one until the next fault
    # replaces it (within 0.8 s): a short burst.
    mode = {"times": 1} if rng.random() < 0.7 else {"skip": rng.randint(1, 3)}
    return f"{kind}:{command}", data, mode


@dataclass
class Record:
    runs: dict[int, list[tuple[float, float]]] = field(default_factory=lambda: defaultdict(list))
    lock: threading.Lock = field(default_factory=threading.Lock)


@dataclass
class Figures:
    seed: int
    jobs: int = 0
    runs: int = 0
    faults: Counter[str] = field(default_factory=Counter)
    cancels: Counter[str] = field(default_factory=Counter)

    def __str__(self) -> str:
        kinds = Counter(name.split(":")[0] for name in self.faults.elements())
        commands = Counter(name.split(":")[1] for name in self.faults.elements())
        return (
            f"seed {self.seed}: {self.jobs} jobs, {self.runs} runs, "
            f"{sum(self.faults.values())} faults armed by kind {dict(kinds)}, "
            f"by command {dict(commands)}; cancels {dict(self.cancels)}"
        )


def _app(uri: str, record: Record) -> App:
    app = App(uri, lease_duration=LEASE, poll_interval=0.2)

    @app.task(name="work")
    def work(i: int, pause: float) -> None:
        start = time.monotonic()
        time.sleep(pause)  # the work: it takes some time
        with record.lock:
            record.runs[i].append((start, time.monotonic()))

    return app


def run_under_fail_points(shared_db: SharedDatabase, jobs: int, seed: int) -> Figures:
    rng = random.Random(seed)
    figures = Figures(seed=seed, jobs=jobs)
    record = Record()
    uri = shared_db.uri(heartbeatFrequencyMS=HEARTBEAT_MS)
    apps = [_app(uri, record) for _ in range(3)]  # two runners' and an operator's
    operator = apps[2]
    ids = [
        operator.get_task("work").schedule(i, rng.choice((0.0, 0.01, 0.05, 0.3))).id
        for i in range(jobs)
    ]
    admin = shared_db.client()
    runners = [app.runner(workers=3, heartbeat_interval=0.5) for app in apps[:2]]
    done = threading.Event()
    cancelled: dict[int, tuple[Cancellation | None, float]] = {}  # None: it raised

    cancels: queue.Queue[int | None] = queue.Queue()

    def drive() -> None:
        # Faults come every GAP whatever else happens: a cancel that meets a burst of
        # failures retries for seconds, and the burst must not last that long (a
        # "skip" fault fails every matching command until the next fault replaces it).
        faults = random.Random(rng.random())
        while not done.wait(faults.uniform(*GAP)):
            name, data, mode = _fault(faults)
            configure_fail_point(admin, mode, data)
            figures.faults[name] += 1
            if faults.random() < 0.05:  # an operator cancels a job
                cancels.put(faults.randrange(jobs))
        cancels.put(None)

    def cancel() -> None:
        while (i := cancels.get()) is not None:
            try:
                result = operator.cancel(ids[i])
            except MongoschedError:  # it may have landed all the same
                figures.cancels["raised"] += 1
                cancelled.setdefault(i, (None, time.monotonic()))
                continue
            figures.cancels[str(result)] += 1
            earlier = cancelled.get(i, (None, 0.0))[0]
            if result is not Cancellation.ALREADY_FINISHED and earlier is None:
                cancelled[i] = (result, time.monotonic())

    driver = threading.Thread(target=drive, name="fail points", daemon=True)
    canceller = threading.Thread(target=cancel, name="operator", daemon=True)
    try:
        for runner in runners:
            runner.start()
        driver.start()
        canceller.start()
        finished = (JobStatus.COMPLETED, JobStatus.CANCELLED, JobStatus.FAILED)

        def all_finished() -> bool:
            return all(
                (job := operator.get_job(job_id)) is not None and job.status in finished
                for job_id in ids
            )

        try:
            wait_for(lambda: _quietly(all_finished), jobs * 0.5 + 60, 0.5, "every job to end")
        except AssertionError as exc:
            configure_fail_point(admin, "off")
            left = {s: operator.count_jobs(status=s) for s in ("pending", "running")}
            raise AssertionError(f"{exc}: {left} left ({seed=}; {figures})") from None
        done.set()
        driver.join(5)
        canceller.join(15)  # a cancel in flight retries for at most connect_timeout
        configure_fail_point(admin, "off")
        statuses = [_status(operator, job_id) for job_id in ids]
    finally:
        done.set()
        configure_fail_point(admin, "off")
        for runner in runners:
            runner.stop(timeout=10)
        for app in apps:
            app.close()
        admin.close()
    _check(figures, record, cancelled, ids, statuses)
    return figures


def _quietly(condition: Any) -> bool:
    try:
        return bool(condition())
    except MongoschedError:  # a fault met the check's own query
        return False


def _status(app: App, job_id: Any) -> JobStatus:
    job = app.get_job(job_id)
    assert job is not None, f"job {job_id} lost"
    return job.status


def _check(
    figures: Figures,
    record: Record,
    cancelled: dict[int, tuple[Cancellation | None, float]],
    ids: list[Any],
    statuses: list[JobStatus],
) -> None:
    seed = figures.seed
    figures.runs = sum(len(runs) for runs in record.runs.values())
    for i, status in enumerate(statuses):
        runs = sorted(record.runs.get(i, []))
        cancel = cancelled.get(i)
        where = (
            f"job {i} {ids[i]} ({seed=}; {figures}): status {status}, runs {runs}, cancel {cancel}"
        )
        if cancel is None:
            assert status is JobStatus.COMPLETED, where
        elif cancel[0] is Cancellation.CANCELLED:
            assert status is JobStatus.CANCELLED, where
            assert all(start < cancel[1] for start, _ in runs), where
        else:
            assert status in (JobStatus.CANCELLED, JobStatus.COMPLETED), where
        for (_, end), (start, _) in zip(runs, runs[1:], strict=False):
            assert start >= end, f"two runs at once: {where}"
        assert len(runs) <= 1, f"a run after a finished run: {where}"
        if status is JobStatus.COMPLETED:
            assert len(runs) == 1, where


SEED = 2146380152
"""The seed of the run in ``make test`` (``MONGOSCHED_FAULT_SEED`` replays another)."""


def _seed() -> int:
    return int(os.environ.get("MONGOSCHED_FAULT_SEED") or SEED)


@pytest.mark.timeout(300)  # about 60 s here; room for a loaded machine
def test_fail_points_cost_retries_never_a_job_or_a_second_run(shared_db: SharedDatabase) -> None:
    figures = run_under_fail_points(shared_db, jobs=250, seed=_seed())
    print(figures)


@pytest.mark.soak
@pytest.mark.timeout(3600)
@pytest.mark.parametrize("round", range(8))
def test_fail_points_cost_retries_never_a_job_or_a_second_run_soak(
    shared_db: SharedDatabase, round: int
) -> None:
    """Eight runs of 250 jobs (2,000 in all), each seeded anew (its seed is printed)."""
    figures = run_under_fail_points(shared_db, jobs=250, seed=random.randrange(2**32))
    print(figures)
