"""A worker process that runs ten-step workflows and kills itself with SIGKILL at a
chosen boundary: for tests/processes/test_workflow_crash.py.

``python -m tests.support.workflow_crash_app URI DIR``: runs the workflows of task
``ten`` until none is left to run (then exits 0). Workflow ``n`` is given a kill point
``(step, when)``: ``when`` is ``"before"`` (the process dies as step ``step`` starts,
after the record of the step before it) or ``"after"`` (it dies once the step's effect
is done, before its record), or, for a transactional step, ``"commit"`` (it dies as the
step's transaction commits, its write and its record in it). Each process dies at most once, at the first kill point it
meets whose marker file (``DIR/killed-N``) does not exist yet. Every run of a step
appends ``N STEP`` to ``DIR/runs``; a transactional step also inserts a document with
the workflow's session, so the test counts its MongoDB writes. With
``INSIDE_TRANSACTION=1`` it schedules transactional workflows only, two of them killed
inside a step's transaction and one not. With ``SOAK=N`` in
the environment it schedules N workflows without kill points whose odd steps are
transactional and which sleep twice (the soak kills the processes from outside).
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from pathlib import Path

from mongosched import App, StoreUnavailable, Transaction, current_job

STEPS = 10
TRANSACTIONAL = (False,) if os.environ.get("PLAIN_ONLY") else (False, True)
"""Which kinds of step the workflows use (the test runs plain steps only: see its
module)."""


def main() -> None:
    uri, folder = sys.argv[1], Path(sys.argv[2])
    app = App(uri, lease_duration=1.0, poll_interval=0.02)
    effects = app.store.connection.database.get_collection("crash_effects")  # type: ignore[attr-defined]

    at_commit = threading.local()  # the commit to die at, in this worker's thread
    commit = Transaction.commit

    def dying_commit(self: Transaction) -> None:
        if getattr(at_commit, "kill", False):
            os.kill(os.getpid(), signal.SIGKILL)
        commit(self)

    Transaction.commit = dying_commit  # type: ignore[method-assign]

    def boundary(n: int, step: int, when: str, kill: list[int | str]) -> None:
        marker = folder / f"killed-{n}"
        if kill == [step, when] and not marker.exists():
            marker.touch()
            if when == "commit":  # its step's record is written in the transaction too
                at_commit.kill = True
                return
            os.kill(os.getpid(), signal.SIGKILL)

    def effect(n: int, step: int, kill: list[int | str], transactional: bool) -> int:
        boundary(n, step, "before", kill)
        with open(folder / "runs", "a") as out:
            out.write(f"{n} {step}\n")
        if transactional:
            job = current_job()
            assert job is not None
            effects.insert_one({"n": n, "step": step}, session=job.session)
        boundary(n, step, "after", kill)
        boundary(n, step, "commit", kill)
        return n * 100 + step

    @app.step(name="plain")
    def plain(n: int, step: int, kill: list[int | str]) -> int:
        return effect(n, step, kill, False)

    @app.step(name="written", transactional=True)
    def written(n: int, step: int, kill: list[int | str]) -> int:
        return effect(n, step, kill, True)

    # The soak's kill clock starts when this process runs its first workflow: a loaded
    # machine takes seconds to import, prepare and make its first reaper pass.
    started = folder / f"started-{os.getpid()}"

    @app.workflow(name="ten", retry=100)  # every kill reaps up to four in flight
    def ten(n: int, kill: list[int | str], transactional: bool, soak: bool = False) -> int:
        if not started.exists():
            started.touch()
        total = 0
        for step in range(STEPS):
            run = written if transactional or (soak and step % 2) else plain
            total += run(n, step, kill)
            if soak and step in (3, 6):
                app.sleep(0.2)  # the worker is freed; the kills come during sleeps too
        return total

    if os.environ.get("SOAK"):  # killed from outside instead, at random times
        count = int(os.environ["SOAK"])
        effects.insert_one({"made": True})
        app.schedule_bulk(ten.job(n, [-1, "none"], False, soak=True) for n in range(count))
        return
    if os.environ.get("SCHEDULE"):
        effects.insert_one({"made": True})  # made before any transaction writes in it
        kills = [
            (s, w, t) for t in TRANSACTIONAL for s in range(STEPS) for w in ("before", "after")
        ]
        if os.environ.get("INSIDE_TRANSACTION"):  # killed with its writes uncommitted
            kills = [(4, "after", True), (6, "commit", True), (-1, "none", True)]
        for n, (step, when, transactional) in enumerate(kills):
            ten.schedule(n, [step, when], transactional)
        return
    # One worker: one workflow in flight when the process dies (the soak runs four).
    # A reaper pass a second (not a third of the lease): its sweeps read the server
    # each pass, and a killed process's leases are reaped as soon.
    runner = app.runner(workers=int(os.environ.get("WORKERS", "4")), reap_interval=1.0)
    runner.start()
    # Ended: final statuses never change back, so two counts cannot race a reap.
    total = app.count_jobs(task="ten")
    while ended(app) < total:
        time.sleep(0.5)  # each count reads the ended jobs: not a load on the server
    runner.stop(timeout=5)


def ended(app: App) -> int:
    """How many workflows ended; a count the server did not answer in time is tried
    again (this poll is the test's, not what it tests)."""
    while True:
        try:
            return app.count_jobs(task="ten", status=["completed", "failed", "cancelled"])
        except StoreUnavailable as exc:
            print(f"count not answered ({exc}); again", file=sys.stderr, flush=True)


if __name__ == "__main__":
    main()
