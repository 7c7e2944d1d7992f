"""Tests specific to the in-memory store (``memory://``): naming, records that never
alias what is stored, its ordered indexes and fork safety. What every store must do is
in tests/contract, which runs on this store too."""

from __future__ import annotations

import os
import threading
import uuid
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

from mongosched._core.records import (
    JobQuery,
    JobRecord,
    JobStatus,
    Pause,
    PendingChanges,
    Settlement,
)
from mongosched.store import Store
from mongosched.store.memory import MemoryStore
from mongosched.store.memory.stored import StoredJob
from tests.support.waiting import wait_child

T0 = datetime(2024, 3, 1, 12, 0, 0, tzinfo=timezone.utc)
LATER = T0 + timedelta(minutes=1)


def sec(n: float) -> timedelta:
    return timedelta(seconds=n)


def job(task: str = "t", *, at: datetime = T0, **fields: Any) -> JobRecord:
    return JobRecord(task=task, run_at=at, created_at=T0, updated_at=T0, **fields)


def add(store: MemoryStore, *records: JobRecord) -> list[JobRecord]:
    return [stored for stored, _ in store.jobs.insert(records)]


def claim(
    store: MemoryStore, tasks: tuple[str, ...] = ("t",), now: datetime = LATER
) -> JobRecord | None:
    return store.claims.claim(owner="me", tasks=tasks, queues=None, now=now, lease_duration=30)


def done(now: datetime = LATER, **fields: Any) -> Settlement:
    return Settlement(status=JobStatus.COMPLETED, now=now, attempts=1, **fields)


@pytest.fixture
def store() -> MemoryStore:
    return MemoryStore()


@pytest.fixture
def name() -> Iterator[str]:
    name = f"test-{uuid.uuid4().hex[:8]}"
    yield name
    MemoryStore.forget(name)


# Naming -------------------------------------------------------------------------------------
def test_named_stores_are_shared_and_unnamed_ones_private(name: str) -> None:
    shared = MemoryStore.named(f"memory://{name}")
    assert MemoryStore.named(f"memory://{name}/") is shared
    assert MemoryStore.named(f"memory://{name}/whatever") is shared
    add(shared, job())
    assert MemoryStore.named(f"memory://{name}").jobs.count(JobQuery()) == 1

    first, second = MemoryStore.named("memory://"), MemoryStore.named("memory://")
    assert first is not second and first is not shared
    add(first, job())
    assert second.jobs.count(JobQuery()) == 0
    assert MemoryStore().jobs.count(JobQuery()) == 0
    assert isinstance(shared, Store)

    MemoryStore.forget(name)
    assert MemoryStore.named(f"memory://{name}") is not shared
    assert MemoryStore.named(f"memory://{name}").jobs.count(JobQuery()) == 0


# Values as MongoDB keeps them ---------------------------------------------------------------------
def test_records_never_alias_what_is_stored(store: MemoryStore) -> None:
    nested: list[Any] = [1, [2, 3]]
    stored = add(store, job(args=(nested, [4, 5]), kwargs={"d": {"k": [6]}}))[0]
    nested[1].append("from the caller")
    assert stored.args == ([1, [2, 3]], [4, 5])
    reader: Any = stored
    reader.args[0][1].append("from a reader")
    reader.kwargs["d"]["k"].append(7)
    again_read = store.jobs.get(stored.id)
    assert again_read is not None
    assert again_read.args == ([1, [2, 3]], [4, 5]) and again_read.kwargs == {"d": {"k": [6]}}
    running = claim(store)
    assert running is not None
    settled = store.leases.settle(running, done(result={"rows": [1, (2, 3)]}))
    assert settled is not None and settled.result == {"rows": [1, [2, 3]]}
    settled.result["rows"].append("mine")
    final = store.jobs.get(stored.id)
    assert final is not None and final.result == {"rows": [1, [2, 3]]}


# The claim index ------------------------------------------------------------------------------------
def test_claim_looks_at_bucket_heads_only(store: MemoryStore) -> None:
    """With 50,000 jobs of another task in front, and 20,000 of this task not yet
    due, a claim still finds the right job and looks at a handful of entries."""
    add(store, *[job("other", priority=1, at=T0 - sec(60)) for _ in range(50_000)])
    add(store, *[job(at=LATER + sec(60)) for _ in range(20_000)])
    wanted = add(store, job(at=T0))[0]
    got = claim(store)
    assert got is not None and got.id == wanted.id
    assert store.examined <= 3
    assert claim(store) is None and store.examined <= 3
    changed = [r for r in store.jobs.find(JobQuery(task="other"), limit=100)]
    for record in changed:  # stale entries are popped once, not scanned on every claim
        store.jobs.update_pending(record, PendingChanges(run_at=LATER + sec(60)), LATER)
    got = claim(store, tasks=("other",))
    assert got is not None and got.task == "other" and got.run_at == T0 - sec(60)
    assert claim(store, tasks=("other",)) is not None and store.examined <= 3


class Unscannable(dict[Any, StoredJob]):
    """A store's table of jobs that fails the test when read whole."""

    def values(self) -> Any:
        raise AssertionError("a look at every job in the store")

    items = __iter__ = values

    def __repr__(self) -> str:
        return f"<{len(self)} jobs>"


def forbid_scans(store: MemoryStore) -> None:
    table = store.table
    jobs = Unscannable(table.jobs)
    table.jobs = table.indexes._jobs = table.flow._jobs = jobs


def test_runners_holds_and_releases_of_paused_jobs_read_no_backlog(store: MemoryStore) -> None:
    """The sweep's release of held jobs whose pause is gone (every reap interval) and
    a claim's hold of a job of a paused label look at the paused jobs, or the job
    named, not at every job: a backlog of 20,000 pending jobs costs them nothing."""
    add(store, *[job("other") for _ in range(20_000)])
    mail, kept = add(store, job(label="app.mail"), job(label="app.kept", at=T0 + sec(1)))
    for label in ("app.mail", "app.kept"):
        store.admin.add_pause(Pause("task", label, LATER))
    assert store.admin.pause_label("app.mail", LATER) == 1
    late = add(store, job(label="app.kept"))[0]  # scheduled since the pause
    forbid_scans(store)
    assert store.admin.pause_label("app.kept", LATER, ids=[late.id, mail.id]) == 1
    assert store.admin.resume_unpaused(LATER) == 0  # every hold has its pause
    store.admin.remove_pause("task", "app.mail")
    assert store.admin.resume_unpaused(LATER) == 1
    assert store.admin.resume_label("app.kept", LATER) == 1
    assert claim(store) is not None  # the store's indexes still read the same jobs
    status = {j.id: store.jobs.get(j.id).status for j in (mail, kept, late)}  # type: ignore[union-attr]
    assert status == {
        mail.id: JobStatus.RUNNING,
        kept.id: JobStatus.PENDING,
        late.id: JobStatus.PENDING,
    }


# Fork -------------------------------------------------------------------------------------------
def test_a_forked_child_can_use_a_store_whose_lock_a_parent_thread_held(name: str) -> None:
    store = MemoryStore.named(f"memory://{name}")
    add(store, job())
    held, release = threading.Event(), threading.Event()

    def hold_the_lock() -> None:
        with store.table.lock:
            held.set()
            release.wait(30)

    holder = threading.Thread(target=hold_the_lock)
    holder.start()
    try:
        assert held.wait(10)
        pid = os.fork()
        if pid == 0:  # the child: never return into pytest
            code = 1
            try:
                child_store = MemoryStore.named(f"memory://{name}")
                got = claim(child_store)
                add(child_store, job())
                code = 0 if got is not None and child_store.jobs.count(JobQuery()) == 2 else 2
            finally:
                os._exit(code)
        assert wait_child(pid) == 0
    finally:
        release.set()
        holder.join()
    assert store.jobs.count(JobQuery(statuses=(JobStatus.PENDING,))) == 1  # the parent's own
