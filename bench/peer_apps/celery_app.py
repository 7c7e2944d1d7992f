"""Celery on Redis, results ignored."""

from __future__ import annotations

import os

from celery import Celery

app = Celery("celery_app", broker=os.environ["BENCH_REDIS_URL"])
app.conf.task_ignore_result = True
app.conf.worker_hijack_root_logger = False
app.conf.broker_connection_retry_on_startup = True


@app.task(name="noop")
def noop() -> None:
    return None
