"""A store whose heartbeats never reach the database: a holder cut off (a long GC
pause, a partition) that still believes it holds its leases."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from mongosched._core.records import Renewal


class LostHeartbeats:
    """Wraps a store: renewals report success and write nothing; all else passes."""

    def __init__(self, store: Any) -> None:
        self._store = store

    def renew(
        self, job_id: Any, token: str, now: datetime, until: datetime, deadline: Any = None
    ) -> Renewal:
        return Renewal(held=True)

    def renew_permit(self, task: str, token: str, until: datetime, deadline: Any = None) -> bool:
        return True

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)
