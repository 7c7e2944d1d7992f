"""mongosched demo: jobs scheduled, retried, completed, deduplicated, limited, timed out,
cancelled and queried, beside a cron schedule.

Runs on the in-process store (``memory://``), or on a real MongoDB when MONGOSCHED_URI
is set (e.g. MONGOSCHED_URI=mongodb://localhost/demo make demo).
"""

from __future__ import annotations

import logging
import os
import threading
import time

from mongosched import App, Every, RetryPolicy, current_job

logging.basicConfig(level=logging.INFO, format="%(asctime)s %(threadName)-26s %(message)s")
log = logging.getLogger("demo")

app = App(os.environ.get("MONGOSCHED_URI", "memory://demo"), poll_interval=0.2, lease_duration=6)


@app.task(
    name="emails.send",
    queue="emails",
    retry=RetryPolicy(retries=3, backoff="exponential", delay=0.3),
)
def send_email(user_id: int, template: str = "welcome") -> str:
    ctx = current_job()
    assert ctx is not None
    if user_id % 2 and ctx.attempt < 3:  # odd users: the first two attempts hit a hiccup
        raise ConnectionError(f"SMTP hiccup for user {user_id} (attempt {ctx.attempt})")
    return f"sent {template} to user {user_id}"


@app.task(name="reports.build", priority=1, timeout=10)
def build_report(name: str) -> dict[str, object]:
    ctx = current_job()
    assert ctx is not None
    for step in range(1, 5):
        time.sleep(0.1)
        ctx.set_progress(step / 4, f"section {step}/4")
    return {"report": name, "pages": 12}


@app.task(name="feeds.poll")
def poll_feed(feed: str) -> None:
    log.info("polled %s", feed)


resizing = {"now": 0, "peak": 0}
resize_lock = threading.Lock()


@app.task(name="images.resize", concurrency=2)  # at most 2 at once, across every process
def resize(image: int) -> int:
    with resize_lock:
        resizing["now"] += 1
        resizing["peak"] = max(resizing["peak"], resizing["now"])
    time.sleep(0.2)
    with resize_lock:
        resizing["now"] -= 1
    return image


@app.task(name="stuck.loop", timeout=0.5, retry=0)  # interrupted after 0.5 s, no retry
def stuck_loop() -> None:
    while True:
        pass


@app.task(name="reports.nightly", cron="0 2 * * *", timezone="Europe/Berlin")
def nightly() -> None:
    log.info("nightly report")


@app.task(name="slow.export")
def slow_export() -> None:
    ctx = current_job()
    while ctx is not None and not ctx.is_cancelled():
        time.sleep(0.05)


def main() -> None:
    app.on("job:retry", lambda e: log.info("retry  %s: %s", e.job.task, e.error))
    app.on("job:success", lambda e: log.info("done   %s -> %r", e.job.task, e.job.result))

    emails = [send_email.schedule(uid, template="welcome") for uid in range(1, 7)]
    report = build_report.schedule("Q3")
    later = send_email.configure(delay=1.0).schedule(99)
    first = send_email.configure(dedupe_key="email:7").schedule(7)
    again = send_email.configure(dedupe_key="email:7").schedule(7)
    log.info("dedupe: second schedule returned the same job: %s", first.id == again.id)
    export = slow_export.schedule()
    poller = poll_feed.configure(repeat=Every(seconds=0.5)).schedule("news")
    images = [resize.schedule(n) for n in range(6)]
    stuck = stuck_loop.schedule()

    runner = app.runner(workers=4).start()
    while export.refresh().status == "pending":
        time.sleep(0.05)
    log.info("cancel running export: %s", app.cancel(export.id))
    for job in [*emails, report, later, first, export, *images, stuck]:
        job.wait(timeout=30)
    app.cancel(poller.id)
    runner.stop(graceful=True, timeout=10)

    log.info("images.resize: 6 jobs, at most %d ran at once (limit 2)", resizing["peak"])
    log.info("stuck.loop: %s (%s)", stuck.status, stuck.error)

    # This run's jobs only: on a server, jobs of earlier runs are there too.
    ours = [job.refresh() for job in [*emails, report, later, first, export, poller,
                                      *images, stuck]]  # fmt: skip
    ended = [j for j in ours if j.status in ("failed", "cancelled")]
    log.info("failed or cancelled: %s", ", ".join(f"{j.task} ({j.status})" for j in ended))
    log.info("%-14s %-10s %-8s %s", "task", "status", "attempts", "result / error")
    for job in [*emails, report, later, first, export]:
        outcome = job.result if job.error is None or job.status == "completed" else job.error
        log.info("%-14s %-10s %-8s %s", job.task, job.status, job.attempts, outcome)
    counts: dict[str, int] = {}
    for job in ours:
        counts[str(job.status)] = counts.get(str(job.status), 0) + 1
    log.info("this run: %d jobs: %s", len(ours), ", ".join(f"{k}={v}" for k, v in counts.items()))
    log.info(
        "expected: stuck.loop failed (it outran its timeout), slow.export and feeds.poll "
        "cancelled (the demo cancels them), every other job completed"
    )
    left = [row for row in app.schedules() if row["task"] == "reports.nightly"]
    for row in left:
        log.info(
            "left pending: %s, a cron schedule (%s): it waits for its next run, %s, and "
            "stays, as a schedule does",
            row["task"],
            row["rule"],
            row["next_run"],
        )
    earlier = app.count_jobs() - len(ours) - len(left)
    if earlier > 0:
        log.info("the database also holds %d jobs of earlier runs (mongosched jobs list)", earlier)
    assert all(j.status == "completed" for j in [*emails, report, later]), "demo jobs must complete"
    assert export.status == "cancelled"
    assert stuck.status == "failed" and resizing["peak"] <= 2
    assert all(j.is_finished for j in ours), "this run leaves nothing of its own behind"


if __name__ == "__main__":
    main()
