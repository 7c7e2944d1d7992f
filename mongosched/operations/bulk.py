"""Bulk operations by filter: retry, cancel and purge every job that matches, and the
throughput of finished jobs (:class:`BulkOperations`, which :class:`~mongosched.App`
holds).

A bulk operation never holds one giant write: it walks the matches in id order, a batch
of ids at a time (``store.admin.select_ids``, keyset pagination on an index), and writes
each batch with the job's expected state in the write itself, so a job that changed
meanwhile (retried and run again, finished, deleted) is left as it now is. Jobs that
start matching during the walk may or may not be included; jobs that stop matching are
not touched.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from mongosched._core import outcome, validate
from mongosched._core.filters import JobFilters, job_query
from mongosched._core.records import RETRYABLE_STATUSES, JobQuery, JobStatus
from mongosched.errors import ConfigurationError, OutOfBounds
from mongosched.operations.audit import checked_actor
from mongosched.operations.base import AppParts, Operations

if TYPE_CHECKING:
    # Only for the type checker: ``Unpack`` is in ``typing`` from Python 3.11.
    from typing_extensions import Unpack

__all__ = ["BATCH_SIZE", "MAX_BATCH_SIZE", "MAX_BUCKETS", "BulkOperations"]

log = logging.getLogger("mongosched")

BATCH_SIZE = 500
"""Ids per write of a bulk operation (a MongoDB ``$in`` of this many ids is one small
command; a million matches are two thousand of them)."""
MAX_BATCH_SIZE = 10_000
"""The most ids a bulk operation's ``batch_size`` takes: an ``$in`` of this many ids
(a declared schedule's id is up to 1,024 characters) stays within MongoDB's 16 MiB
command."""
MAX_BUCKETS = 10_000
"""The most buckets :meth:`BulkOperations.throughput` lists (a chart of a week by the
minute)."""

RETRYABLE = RETRYABLE_STATUSES
CANCELLABLE = tuple(s for s in JobStatus if not s.is_final)
PURGEABLE = tuple(s for s in JobStatus if s.is_final)


class BulkOperations(Operations):
    """Retry, cancel and purge by filter, for :class:`~mongosched.App` (whose methods
    of the same names call these, with these docstrings).

    :param app: the app's parts (see :class:`~mongosched.operations.base.AppParts`).
    :param wake: wakes this process's runners (jobs were made pending).
    :param release_finished: releases the dependents of jobs that finished by a time
        (a purge deletes them after).
    """

    def __init__(
        self,
        app: AppParts,
        *,
        wake: Callable[[], None],
        release_finished: Callable[[datetime], None],
    ) -> None:
        super().__init__(app)
        self.wake = wake
        self.release_finished = release_finished

    def retry_jobs(
        self,
        *,
        dry_run: bool = False,
        batch_size: int = BATCH_SIZE,
        actor: str | None = None,
        **filters: Unpack[JobFilters],
    ) -> int:
        """Run again every failed, cancelled or expired job matching the filters (as
        :meth:`retry_job` does one: back to pending, due now, attempts reset).
        ``status`` narrows to some of them (default all three). A job whose
        dedupe key another job holds now is left as it is (and logged). Returns how
        many went back to pending, or with ``dry_run`` how many match."""
        query = self._bulk_query(
            "retry_jobs",
            RETRYABLE,
            filters,
            dry_run,
            batch_size,
            "only failed, cancelled or expired jobs can be retried",
            actor,
        )
        if dry_run:
            return self.store.jobs.count(query)

        def retry(ids: Sequence[Any]) -> int:
            done = self.writable().admin.retry_many(ids, query.statuses or RETRYABLE, self.now())
            self.wake()
            return done

        return self._walk("retry", query, retry, batch_size, actor)

    def cancel_jobs(
        self,
        *,
        dry_run: bool = False,
        batch_size: int = BATCH_SIZE,
        actor: str | None = None,
        **filters: Unpack[JobFilters],
    ) -> int:
        """Cancel every unfinished job matching the filters, as :meth:`cancel` does
        one: a waiting one at once, a running one at its next heartbeat (it ends
        ``cancelled`` when its function returns); repeating ones stop for good.
        Returns how many were cancelled or asked to cancel, or with ``dry_run`` how
        many match."""
        query = self._bulk_query(
            "cancel_jobs",
            CANCELLABLE,
            filters,
            dry_run,
            batch_size,
            "finished jobs cannot be cancelled",
            actor,
        )
        if dry_run:
            return self.store.jobs.count(query)

        def cancel(ids: Sequence[Any]) -> int:
            settlement = outcome.cancelled(self.now(), self.retention)
            ended, asked = self.writable().admin.cancel_many(ids, settlement)
            return ended + asked

        return self._walk("cancel", query, cancel, batch_size, actor)

    def purge_jobs(
        self,
        *,
        dry_run: bool = False,
        batch_size: int = BATCH_SIZE,
        actor: str | None = None,
        **filters: Unpack[JobFilters],
    ) -> int:
        """Delete every finished job (completed, failed or cancelled; ``status``
        narrows) matching the filters. Declared schedules stay (a cancelled one is the
        tombstone that keeps it off). Jobs still waiting for one of them are released
        first, as its outcome says. Returns how many were deleted, or with ``dry_run``
        how many match."""
        query = self._bulk_query(
            "purge_jobs",
            PURGEABLE,
            filters,
            dry_run,
            batch_size,
            "only finished jobs can be purged",
            actor,
        )
        if dry_run:
            return self.store.jobs.count(query)
        self.release_finished(self.now())
        final = query.statuses or PURGEABLE

        def purge(ids: Sequence[Any]) -> int:
            return self.writable().admin.purge_many(ids, final)

        return self._walk("purge", query, purge, batch_size, actor)

    def throughput(
        self, since: datetime, bucket: timedelta = timedelta(minutes=1)
    ) -> list[tuple[datetime, int, int]]:
        """Jobs completed and failed per time bucket from ``since`` to now:
        ``[(bucket start, completed, failed), ...]``, every bucket listed (zeros too).
        Runs of repeating jobs are not counted (they go back to pending)."""
        since = validate.aware_datetime(since, task="*", what="throughput: since")
        seconds = validate.seconds(bucket, what="throughput: bucket", strict=True)
        now = self.now()
        if since > now:
            return []
        buckets = max(1, math.ceil((now - since).total_seconds() / seconds))
        if buckets > MAX_BUCKETS:
            raise OutOfBounds(
                f"throughput: since {since.isoformat()} by buckets of {seconds:g} s makes "
                f"{buckets:,} buckets; at most {MAX_BUCKETS:,} (give a larger bucket)"
            )
        counts = self.store.admin.finished_counts(since, seconds)
        step = timedelta(seconds=seconds)
        return [
            (
                since + step * n,
                counts.get((n, JobStatus.COMPLETED), 0),
                counts.get((n, JobStatus.FAILED), 0),
            )
            for n in range(buckets)
        ]

    # Internals -------------------------------------------------------------------------------
    def _bulk_query(
        self,
        what: str,
        allowed: tuple[JobStatus, ...],
        filters: Mapping[str, Any],
        dry_run: bool,
        batch_size: int,
        why: str,
        actor: str | None,
    ) -> JobQuery:
        """The query of a bulk operation: the filters given, its status narrowed to the
        statuses it acts on (refusing others, with ``why``)."""
        validate.whole(batch_size, what=f"{what}: batch_size", maximum=MAX_BATCH_SIZE)
        checked_actor(actor, what)
        if not isinstance(dry_run, bool):
            raise ConfigurationError(f"{what}: dry_run must be True or False")
        query = job_query(what, filters)
        if query.statuses is None:
            return replace(query, statuses=allowed)
        bad = [s.value for s in query.statuses if s not in allowed]
        if bad:
            raise ConfigurationError(f"{what}: {why}, not {', '.join(bad)}")
        return query

    def _walk(
        self,
        action: str,
        query: JobQuery,
        write: Callable[[Sequence[Any]], int],
        size: int,
        actor: str | None,
    ) -> int:
        """Walk the matches of ``query`` a batch of ids at a time, ``write`` each batch;
        the total ``write`` reported (and kept in the audit trail)."""
        total = batches = 0
        after = None
        stopped: BaseException | None = None
        try:
            while True:
                ids = self.store.admin.select_ids(query, after=after, limit=size)
                if not ids:
                    break
                total += write(ids)
                batches += 1
                if len(ids) < size:
                    break
                after = ids[-1]
        except BaseException as exc:
            stopped = exc
            raise
        finally:
            # What was done is kept whatever ends the walk: a walk that stops half-way
            # (the store fails, the process is interrupted) has still changed the jobs
            # of the batches before, and the trail says how many and why it stopped.
            described = _describe(query)
            done = {"retry": "retried", "cancel": "cancelled", "purge": "purged"}[action]
            detail = None
            if stopped is not None:
                detail = f"stopped after {batches} batch(es): {type(stopped).__name__}: {stopped}"
                log.warning("%s %d job(s), then %s (%s)", done, total, detail, described)
            else:
                log.info("%s %d job(s) in %d batch(es) (%s)", done, total, batches, described)
            self.audit.record(action, described, count=total, detail=detail, actor=actor)
        return total


def _describe(query: JobQuery) -> str:
    parts = []
    for name, value in query.__dict__.items():
        if value is None:
            continue
        if name == "statuses":
            value = "/".join(s.value for s in value)
        parts.append(f"{name}={value}")
    return ", ".join(parts) or "every job"
