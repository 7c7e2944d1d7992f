"""A job as a runner's claim returns it (running, its lease held), for unit tests of
the runner's pieces against fakes of the store."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from mongosched._core.records import JobRecord, JobStatus, LeaseInfo

__all__ = ["claimed"]


def claimed(
    task: str,
    *,
    start: datetime,
    until: datetime,
    job_id: Any = 7,
    token: str = "tok",
    **fields: Any,
) -> JobRecord:
    """Job ``job_id`` of ``task``, due and claimed at ``start`` by runner ``r1``
    (its first attempt), leased under ``token`` until ``until``; ``fields``: any other."""
    lease = LeaseInfo(owner="r1", token=token, until=until, heartbeat_at=start)
    return JobRecord(
        task=task,
        run_at=start,
        created_at=start,
        updated_at=start,
        id=job_id,
        attempts=1,
        status=JobStatus.RUNNING,
        started_at=start,
        lease=lease,
        **fields,
    )
