"""prepare, close, clock_offset: the store's own life."""

from __future__ import annotations

from datetime import datetime, timedelta

from mongosched._core.records import JobQuery
from mongosched.store import Store

from .helpers import T0, add, claimed, job


def test_prepare_is_idempotent(store: Store) -> None:
    queued = add(store, job(dedupe_key="k"))[0]
    store.prepare()
    store.prepare()
    assert store.jobs.get(queued.id) == queued
    assert store.jobs.insert([job(dedupe_key="k")])[0][0].id == queued.id


def test_a_closed_store_can_be_used_again(store: Store) -> None:
    queued = add(store, job())[0]
    assert store.jobs.count(JobQuery()) == 1  # the listings' collection, made before the close
    store.close()
    assert store.jobs.count(JobQuery()) == 1
    assert store.jobs.get(queued.id) == queued
    running = claimed(store)
    store.close()
    store.close()
    assert store.jobs.get(queued.id) == running
    assert store.jobs.count(JobQuery()) == 1


def test_clock_offset_is_none_or_measured_against_the_local_clock(store: Store) -> None:
    calls: list[datetime] = []

    def local_now() -> datetime:
        calls.append(T0)
        return T0

    offset = store.clock_offset(local_now)
    assert offset is None or isinstance(offset, timedelta)
    if offset is not None:  # a server's clock reads today; this local one reads T0 (2099)
        assert calls and offset < -timedelta(days=365)
