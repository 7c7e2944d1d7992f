"""Instructions per claimed job, by thread, as callgrind counts them: a measure that the
machine's load does not move.

    python bench/instructions.py [--jobs 2000] [--workers 8]

The CPU time a job costs moves by a tenth or more from one run to the next on a shared
machine, so that a change of a few percent cannot be seen in it (see
docs/performance.rst). The instructions a job costs move by about 1 %. This script runs
one drain of ``--jobs`` no-op jobs against bench/stub_server.py (as bench/jobcpu.py
drains them, but with no listener, as in ``mongosched worker``) under
``valgrind --tool=callgrind --separate-threads=yes``, then reads each thread's
count and prints, per job, the dispatcher thread's instructions (the busiest thread
but the main one, which only schedules), the other threads' (the workers, and the few
the runner and pymongo keep) and their sum. Compare two versions by running it in
each checkout.

Under valgrind the drain runs about fifty times slower, so two things are set as the
speed would otherwise change them: the read-ahead of batched claims is kept for a
minute rather than a tenth of a second (else every claim reads again), and the heap
loaded before the runner starts is frozen, as ``mongosched worker`` freezes it. The
stub server runs outside valgrind. It needs valgrind (Debian's ``valgrind`` package);
a run of 2,000 jobs takes a minute or two.

Performance claims live here, as printed numbers, never in timed tests.
"""

from __future__ import annotations

import argparse
import gc
import re
import subprocess
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

OTHERS_FROM = 1_000_000
"""A thread with fewer instructions than this in the whole run is left out (one that
started and waited: a signal or monitor thread)."""


def drain(jobs: int, workers: int) -> None:
    """The measured run, inside valgrind: no listener (a listener makes each job's
    record as stored, which a runner otherwise skips), the jobs counted as the runner
    counts them."""
    from bench.harness import start_stub
    from bench.jobcpu import make_app
    from mongosched.store.parts import ReadAhead

    ReadAhead.FOR = timedelta(seconds=60)  # (valgrind's pace; see the module)
    process, uri = start_stub()
    try:
        app, noop = make_app("stub", uri)
        for start in range(0, jobs, 10_000):
            app.schedule_bulk(noop.job() for _ in range(min(10_000, jobs - start)))
        gc.collect()
        gc.freeze()  # as the worker command does
        runner = app.runner(workers=workers).start()
        deadline = time.monotonic() + 3600
        while runner.finished < jobs and time.monotonic() < deadline:
            time.sleep(0.2)
        runner.stop(graceful=False, timeout=30)
        app.close()
    finally:
        process.terminate()
        process.wait(10)


def counts(folder: Path) -> list[int]:
    """The instructions of each thread of the run, the main thread's first. (A process
    the run forks leaves files too, until it execs: the run's are the most.)"""
    runs: dict[str, list[Path]] = {}
    for path in folder.glob("cg.*-*"):
        runs.setdefault(path.name.rsplit("-", 1)[0], []).append(path)
    files = max(runs.values(), key=len, default=[])
    found = []
    for path in sorted(files, key=lambda p: int(p.name.rsplit("-", 1)[-1])):
        total = re.search(r"^(?:totals|summary): (\d+)", path.read_text(errors="replace"), re.M)
        found.append(int(total.group(1)) if total else 0)
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=2000)
    parser.add_argument("--workers", type=int, default=8)
    parser.add_argument("--drain", action="store_true", help=argparse.SUPPRESS)
    options = parser.parse_args()
    if options.drain:
        drain(options.jobs, options.workers)
        return
    with tempfile.TemporaryDirectory(prefix="mongosched-callgrind-") as folder:
        command = [
            "valgrind", "--tool=callgrind", "--separate-threads=yes",
            f"--callgrind-out-file={folder}/cg.%p",
            sys.executable, __file__, "--drain",
            "--jobs", str(options.jobs), "--workers", str(options.workers),
        ]  # fmt: skip
        subprocess.run(command, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        threads = counts(Path(folder))
    runner = sorted((n for n in threads[1:] if n >= OTHERS_FROM), reverse=True)
    if not runner:
        raise SystemExit("callgrind counted no runner thread")
    dispatcher, others = runner[0], sum(runner[1:])
    per_job = 1000 * options.jobs
    print(
        f"mongosched instructions: {options.jobs:,} no-op jobs, 1 dispatcher + "
        f"{options.workers} workers, Python {sys.version.split()[0]}; thousands a job: "
        f"dispatcher {dispatcher / per_job:,.0f}k, other threads {others / per_job:,.0f}k, "
        f"runner {(dispatcher + others) / per_job:,.0f}k"
    )


if __name__ == "__main__":
    main()
