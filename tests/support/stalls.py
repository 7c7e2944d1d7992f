"""A store whose heartbeats never reach the database: a holder cut off (a long GC
pause, a partition) that still believes it holds its leases."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from mongosched._core.records import Renewal


class LostHeartbeats:
    """Wraps a store's renewing parts: renewals report success and write nothing;
    all else passes."""

    def __init__(self, store: Any) -> None:
        self.leases = _Leases(store.leases)
        self.permits = _Permits(store.permits)
        self.limits = store.limits


class _Passing:
    def __init__(self, part: Any) -> None:
        self._part = part

    def __getattr__(self, name: str) -> Any:
        return getattr(self._part, name)


class _Leases(_Passing):
    def renew(
        self, job_id: Any, token: str, now: datetime, until: datetime, deadline: Any = None
    ) -> Renewal:
        return Renewal(held=True)


class _Permits(_Passing):
    def renew_permit(self, task: str, token: str, until: datetime, deadline: Any = None) -> bool:
        return True
