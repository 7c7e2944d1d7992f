"""A job's outcome always fits its document: a job at the payload limit, returning a
result at the result limit, or raising an error, and logging past every cap, ends with
its outcome, its logs cut and saying so, on ``memory://`` and on the server (MongoDB
refuses a document over 16 MiB)."""

from __future__ import annotations

import logging

from mongosched import App, JobStatus
from mongosched.observe.logs import MAX_BYTES, MAX_RECORDS
from mongosched.store.codec import MAX_PAYLOAD_BYTES, MAX_VALUE_BYTES
from mongosched.testing import drain
from tests.support.transactions import store_target, tx_database, tx_uri

__all__ = ["store_target", "tx_database", "tx_uri"]

log = logging.getLogger("shop.exports")  # WARNING records are made at its default level
WIDE = "\U0001f600" * 2000
"""A log message of 2,000 characters, each four bytes in UTF-8."""
PAYLOAD = b"p" * (MAX_PAYLOAD_BYTES - 64)
"""Arguments just within the payload limit."""


def talk() -> None:
    for _ in range(MAX_RECORDS + 50):
        log.warning(WIDE)


def test_a_job_at_every_limit_keeps_its_outcome_and_its_logs_say_what_was_cut(
    app: App,
) -> None:
    @app.task(name="export", retry=0)
    def export(blob: bytes) -> bytes:
        talk()
        return b"r" * (MAX_VALUE_BYTES - 64)

    @app.task(name="refused", retry=0)
    def refused(blob: bytes) -> None:
        talk()
        raise ValueError("x" * (1 << 20))

    done, failed = export.schedule(PAYLOAD), refused.schedule(PAYLOAD)
    drain(app)
    done.refresh()
    assert done.status is JobStatus.COMPLETED and done.attempts == 1
    assert done.result == b"r" * (MAX_VALUE_BYTES - 64)
    failed.refresh()
    assert failed.status is JobStatus.FAILED and failed.attempts == 1
    assert failed.error is not None and failed.error.type == "ValueError"
    for job in (done, failed):
        assert job.logs[0].message == WIDE
        kept = sum(len(e.message.encode()) + len(e.logger) for e in job.logs[:-1])
        assert kept <= MAX_BYTES  # counted as stored, in UTF-8
        assert job.logs[-1].logger == "mongosched" and " cut" in job.logs[-1].message
