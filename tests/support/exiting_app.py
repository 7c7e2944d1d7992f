"""A process that runs jobs in an in-process runner and then exits normally, as a web
worker does on SIGTERM or ``--max-requests``: for tests/processes/test_exit.py.

``python -m tests.support.exiting_app URI STARTED_FILE [--after S] [--jobs N]``: schedules
N jobs of ``work`` (``retry=0``), starts ``app.start_runner(workers=4)``, and calls
``sys.exit(0)`` after S seconds, in the middle of the run. Each run appends its job id to
STARTED_FILE when it starts, so the test knows which jobs ever started.
"""

from __future__ import annotations

import argparse
import logging
import sys
import time

from mongosched import App, current_job


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("uri")
    parser.add_argument("started")
    parser.add_argument("--after", type=float, default=0.8)
    parser.add_argument("--jobs", type=int, default=40)
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO)
    app = App(args.uri, lease_duration=3, poll_interval=0.02)

    @app.task(name="work", retry=0)
    def work(n: int) -> int:
        ctx = current_job()
        assert ctx is not None
        with open(args.started, "a") as out:
            out.write(f"{ctx.id}\n")
        time.sleep(0.1)  # the job's own work
        return n

    app.schedule_bulk(work.job(n) for n in range(args.jobs))
    app.start_runner(workers=4)
    time.sleep(args.after)
    sys.exit(0)  # a normal exit with the runner busy


if __name__ == "__main__":
    main()
