"""Operations beyond one job: select_ids (walks by filter), retry_many, cancel_many,
purge_many, finished_counts; pauses, pending_queues, hold/release of schedules,
update_schedule; the runner registry."""

from __future__ import annotations

from dataclasses import replace

from mongosched._core.records import (
    AuditEntry,
    JobQuery,
    JobStatus,
    Pause,
    QueueBacklog,
    RunnerInfo,
    ScheduleChanges,
    ScheduleEdit,
)
from mongosched.errors import JobStateError
from mongosched.store import Store, schedule_id

from .helpers import (
    LATER,
    T0,
    add,
    cancelled,
    claim,
    claimed,
    given_back,
    ids,
    job,
    lapsed,
    raised,
    sec,
    succeeded,
)

PENDING, RUNNING, PAUSED = JobStatus.PENDING, JobStatus.RUNNING, JobStatus.PAUSED
CANCELLED, COMPLETED, FAILED = JobStatus.CANCELLED, JobStatus.COMPLETED, JobStatus.FAILED
EVERY = {"every": 60.0, "misfire": {"policy": "coalesce", "grace": None, "max_catchup": 100}}


def failed(store: Store, task: str = "t", n: int = 1, error: Exception | None = None) -> list:
    """``n`` jobs of ``task`` that ran once and failed."""
    add(store, *(job(task) for _ in range(n)))
    out = []
    for _ in range(n):
        running = claimed(store, tasks=(task,))
        ended = store.leases.settle(running, raised(running, error=error))
        assert ended is not None and ended.status is FAILED
        out.append(ended)
    return out


def walk(store: Store, query: JobQuery, page: int) -> list:
    found, after = [], None
    while True:
        batch = store.admin.select_ids(query, after=after, limit=page)
        assert len(batch) <= page
        found.extend(batch)
        if len(batch) < page:
            return found
        after = batch[-1]


# select_ids -----------------------------------------------------------------------------------
def test_select_ids_walks_every_match_in_id_order_in_pages(store: Store) -> None:
    jobs = add(store, *(job("a" if i % 3 else "b", queue=f"q{i % 2}") for i in range(23)))
    declared = add(store, job("a", id=schedule_id("a"), repeat=EVERY, scheduled_for=T0))[0]
    everything = walk(store, JobQuery(), page=5)
    assert sorted(map(str, everything)) == sorted(map(str, ids([*jobs, declared])))
    assert everything[0] == declared.id  # string ids sort before ObjectIds, as in MongoDB
    assert everything[1:] == sorted(everything[1:])
    of_a = walk(store, JobQuery(task="a", queue="q1"), page=4)
    expected = [j.id for j in jobs if j.task == "a" and j.queue == "q1"]
    assert of_a == sorted(expected)
    assert store.jobs.count(JobQuery(task="a", queue="q1")) == len(expected)
    assert walk(store, JobQuery(task="a"), page=1)[0] == declared.id
    assert store.admin.select_ids(JobQuery(task="nothing")) == []


def test_select_ids_and_counts_filter_by_error_type_and_time_ranges(store: Store) -> None:
    value_errors = failed(store, "t", 2, ValueError("v"))
    key_error = failed(store, "t", 1, KeyError("k"))[0]
    query = JobQuery(statuses=(FAILED,), error_type="ValueError")
    assert sorted(walk(store, query, 10)) == sorted(ids(value_errors))
    assert store.jobs.count(query) == 2
    assert store.jobs.count(JobQuery(error_type="KeyError")) == 1
    assert ids(store.jobs.find(JobQuery(error_type="KeyError"))) == [key_error.id]
    assert store.jobs.count(JobQuery(finished_after=LATER)) == 3  # after: inclusive
    assert store.jobs.count(JobQuery(finished_before=LATER)) == 0  # before: exclusive
    assert store.jobs.count(JobQuery(finished_before=LATER + sec(1))) == 3
    add(store, replace(job("t"), created_at=T0 + sec(10)))
    assert store.jobs.count(JobQuery(created_after=T0 + sec(10))) == 1
    assert store.jobs.count(JobQuery(created_before=T0 + sec(10))) == 3
    assert store.jobs.count(JobQuery(statuses=(PENDING,), finished_before=LATER)) == 0


# retry_many ---------------------------------------------------------------------------------------
def test_retry_many_takes_back_only_jobs_still_in_those_statuses(store: Store) -> None:
    first, second, third = failed(store, "t", 3)
    keyed = add(store, job("t", dedupe_key="k"))[0]
    running = claimed(store)
    assert running.id == keyed.id
    store.leases.settle(running, raised(running))
    # meanwhile the second was retried and runs again: the bulk write leaves it alone
    assert store.jobs.retry_finished(second.id, FAILED, LATER) is not None
    rerun = claimed(store)
    assert rerun.id == second.id
    pending = add(store, job("t"))[0]
    all_ids = [first.id, second.id, third.id, keyed.id, pending.id]
    assert store.admin.retry_many(all_ids, [FAILED], LATER + sec(5)) == 3
    for record in (store.jobs.get(first.id), store.jobs.get(third.id), store.jobs.get(keyed.id)):
        assert record is not None and record.status is PENDING and record.attempts == 0
        assert record.run_at == LATER + sec(5) and record.finished_at is None
        assert record.delete_at is None
    now_running = store.jobs.get(second.id)
    assert now_running is not None and now_running.status is RUNNING
    assert store.jobs.insert([job("t", dedupe_key="k")])[0][1] is False  # its key is held again
    assert store.admin.retry_many([], [FAILED], LATER) == 0


def test_retry_many_leaves_a_job_whose_key_another_job_holds(store: Store) -> None:
    add(store, job("t", dedupe_key="k"))
    running = claimed(store)
    store.leases.settle(running, raised(running))
    holder = add(store, job("t", dedupe_key="k"))[0]
    plain = failed(store, "u", 1)[0]
    try:
        retried = store.admin.retry_many([running.id, plain.id], [FAILED], LATER)
    except JobStateError:  # pragma: no cover - the contract: it is skipped, not raised
        raise AssertionError("retry_many must skip the job, not raise") from None
    assert retried == 1
    still = store.jobs.get(running.id)
    assert still is not None and still.status is FAILED
    assert store.jobs.get(holder.id) is not None


def test_retry_many_restarts_a_cancelled_declared_schedule_at_now(store: Store) -> None:
    sched = add(store, job("a", id=schedule_id("a"), repeat=EVERY, scheduled_for=T0))[0]
    assert store.admin.cancel_many([sched.id], cancelled(LATER)) == (1, 0)
    assert store.admin.retry_many([sched.id], [CANCELLED], LATER + sec(1)) == 1
    back = store.jobs.get(sched.id)
    assert back is not None and back.status is PENDING
    assert back.scheduled_for == back.run_at == LATER + sec(1)


# cancel_many / purge_many -------------------------------------------------------------------------
def test_cancel_many_ends_waiting_jobs_and_marks_running_ones(store: Store) -> None:
    waiting, other = add(store, job("t", dedupe_key="k", priority=9), job("t", priority=1))
    running = claimed(store)
    assert running.id == other.id
    done = failed(store, "u", 1)[0]
    result = store.admin.cancel_many([waiting.id, running.id, done.id], cancelled(LATER + sec(1)))
    assert result == (1, 1)
    ended = store.jobs.get(waiting.id)
    assert ended is not None and ended.status is CANCELLED and ended.finished_at is not None
    assert ended.delete_at is not None
    marked = store.jobs.get(running.id)
    assert marked is not None and marked.status is RUNNING and marked.cancel_requested
    untouched = store.jobs.get(done.id)
    assert untouched == done
    assert store.jobs.insert([job("t", dedupe_key="k")])[0][1] is True  # its key is free
    assert store.admin.cancel_many([running.id], cancelled(LATER + sec(2))) == (0, 0)  # once


def test_cancel_many_keeps_a_declared_schedule_as_its_tombstone(store: Store) -> None:
    sched = add(store, job("a", id=schedule_id("a"), repeat=EVERY, scheduled_for=T0))[0]
    assert store.admin.cancel_many([sched.id], cancelled(LATER)) == (1, 0)
    tomb = store.jobs.get(sched.id)
    assert tomb is not None and tomb.status is CANCELLED and tomb.delete_at is None
    assert store.admin.purge_many([sched.id], [CANCELLED]) == 0
    assert store.jobs.get(sched.id) is not None


def test_purge_many_deletes_only_jobs_in_final_statuses(store: Store) -> None:
    gone = failed(store, "t", 2)
    add(store, job("u"))
    running = claimed(store, tasks=("u",))
    done = store.leases.settle(running, succeeded(running))
    assert done is not None and done.status is COMPLETED
    waiting = add(store, job("v"))[0]
    doomed = [*ids(gone), done.id, waiting.id]
    assert store.admin.purge_many(doomed, [FAILED]) == 2
    assert [store.jobs.get(i) for i in ids(gone)] == [None, None]
    assert store.jobs.get(done.id) is not None and store.jobs.get(waiting.id) is not None
    assert store.admin.purge_many([done.id, waiting.id], [COMPLETED, PENDING]) == 1
    assert store.jobs.get(waiting.id) is not None


def test_finished_counts_buckets_completed_and_failed_jobs(store: Store) -> None:
    failed(store, "t", 2)  # finished at LATER
    add(store, job("u"))
    running = claimed(store, tasks=("u",))
    store.leases.settle(running, succeeded(running, now=LATER + sec(70)))
    counts = store.admin.finished_counts(LATER - sec(30), 60.0)
    assert counts == {(0, FAILED): 2, (1, COMPLETED): 1}
    assert store.admin.finished_counts(LATER + sec(71), 60.0) == {}


# Pauses and schedules ------------------------------------------------------------------------------
def test_pauses_are_stored_once_and_removed(store: Store) -> None:
    assert store.admin.pauses() == []
    assert store.admin.add_pause(Pause("queue", "mail", T0)) is True
    assert store.admin.add_pause(Pause("queue", "mail", LATER)) is False  # since is kept
    assert store.admin.add_pause(Pause("task", "t", LATER)) is True
    assert store.admin.pauses() == [Pause("queue", "mail", T0), Pause("task", "t", LATER)]
    assert store.admin.remove_pause("queue", "mail") is True
    assert store.admin.remove_pause("queue", "mail") is False
    assert store.admin.pauses() == [Pause("task", "t", LATER)]
    why = "paused after 3 failed runs in a row (pause_after=3)"
    assert store.admin.add_pause(Pause("schedule", "schedule:t", LATER, why)) is True
    assert Pause("schedule", "schedule:t", LATER, why) in store.admin.pauses()


def test_pending_queues_lists_queues_holding_pending_jobs(store: Store) -> None:
    add(store, job("t", queue="a"), job("t", queue="b"), job("u", queue="c"))
    assert store.admin.pending_queues() == ["a", "b", "c"]
    running = claimed(store, queues=("c",), tasks=("u",))
    store.leases.settle(running, succeeded(running))
    assert store.admin.pending_queues() == ["a", "b"]


def test_task_names_lists_the_tasks_with_stored_jobs(store: Store) -> None:
    assert store.admin.task_names() == []
    add(store, job("t", queue="a"), job("u", queue="b"), job("t", queue="c"))
    running = claimed(store, queues=("b",), tasks=("u",))
    store.leases.settle(running, succeeded(running))
    assert store.admin.task_names() == ["t", "u"]  # finished jobs count too


def test_hold_and_release_a_schedule(store: Store) -> None:
    sched = add(store, job("a", id=schedule_id("a"), repeat=EVERY, scheduled_for=T0))[0]
    plain = add(store, job("a"))[0]
    for paused in (sched, plain):
        store.admin.add_pause(Pause("schedule", str(paused.id), LATER))
    assert store.admin.pause_schedules([sched.id, plain.id], LATER) == 1
    held = store.jobs.get(sched.id)
    assert held is not None and held.status is PAUSED and held.run_at == T0
    assert claim(store, tasks=("a",)).id == plain.id  # type: ignore[union-attr]
    assert claim(store, tasks=("a",)) is None  # the paused schedule is never claimed
    assert store.admin.pause_schedules([sched.id], LATER) == 0
    released = store.admin.resume_schedule(sched.id, LATER + sec(1))
    assert released is not None and released.status is PENDING and released.run_at == T0
    assert store.admin.resume_schedule(sched.id, LATER) is None
    again = claim(store, tasks=("a",))
    assert again is not None and again.id == sched.id


def test_labelled_jobs_are_found_listed_paused_and_resumed_by_label(store: Store) -> None:
    """A label (a Django task's path) is a job's own field: found and counted by it,
    listed by labels(); pause_label moves the label's pending jobs (of ``ids``, if given)
    to paused, never claimed; resume_label makes them pending again, due as they were."""
    assert store.admin.labels() == []
    mail, mail2, other = add(
        store,
        job("run", label="app.mail", dedupe_key="m"),
        job("run", label="app.mail", at=T0 + sec(1)),
        job("run", label="app.other", at=T0 + sec(2)),
    )
    plain = add(store, job("run", at=T0 + sec(3)))[0]
    assert mail.label == "app.mail" and plain.label is None
    assert sorted(ids(store.jobs.find(JobQuery(label="app.mail")))) == sorted(ids([mail, mail2]))
    assert store.jobs.count(JobQuery(label="app.mail", statuses=(PENDING,))) == 2
    assert store.admin.labels() == ["app.mail", "app.other"]
    store.admin.add_pause(Pause("task", "app.mail", LATER))
    assert store.admin.pause_label("app.mail", LATER, ids=[mail2.id, other.id]) == 1
    assert store.admin.pause_label("app.mail", LATER) == 1  # the other one of the label
    paused = store.jobs.get(mail.id)
    assert paused is not None and paused.status is PAUSED and paused.run_at == T0
    assert paused.label == "app.mail" and paused.dedupe_key == "m"
    assert ids([claim(store, tasks=("run",)), claim(store, tasks=("run",))]) == ids([other, plain])
    assert claim(store, tasks=("run",)) is None  # the label's jobs are never claimed
    assert store.jobs.insert([job("run", dedupe_key="m")])[0][1] is False  # still holds its key
    assert store.admin.resume_label("app.mail", LATER + sec(1)) == 2
    assert store.admin.resume_label("app.mail", LATER + sec(1)) == 0
    back = [claim(store, tasks=("run",)), claim(store, tasks=("run",))]
    assert ids(back) == ids([mail, mail2])  # due as they were, in their order


def test_a_pause_s_write_lands_only_while_its_pause_is_stored(store: Store) -> None:
    """A runner pauses what its pause set (read a moment ago) says is paused; when the
    pause was removed since (resumed), the write changes nothing: the job stays pending,
    never paused for good with no pause behind it."""
    sched = add(store, job("a", id=schedule_id("a"), repeat=EVERY, scheduled_for=T0))[0]
    mail = add(store, job("run", label="app.mail"))[0]
    assert store.admin.pause_label("app.mail", LATER, ids=[mail.id]) == 0
    assert store.admin.pause_schedules([sched.id], LATER) == 0
    assert [store.jobs.get(j.id).status for j in (sched, mail)] == [PENDING, PENDING]  # type: ignore[union-attr]
    store.admin.add_pause(Pause("task", "app.mail", LATER))
    store.admin.add_pause(Pause("schedule", str(sched.id), LATER))
    assert store.admin.pause_label("app.mail", LATER) == 1
    assert store.admin.pause_schedules([sched.id], LATER) == 1
    store.admin.remove_pause("task", "app.mail")
    assert store.admin.pause_label("app.mail", LATER) == 0  # nothing pending to pause


def test_resume_unpaused_frees_paused_jobs_whose_pause_is_gone(store: Store) -> None:
    """The reaper's sweep: a job ``paused`` with neither its label's nor its
    schedule's pause stored goes back to pending, due as it was; paused jobs with a
    pause behind them stay paused."""
    sched = add(store, job("a", id=schedule_id("a"), repeat=EVERY, scheduled_for=T0))[0]
    other = add(store, job("b", id=schedule_id("b"), repeat=EVERY, scheduled_for=T0))[0]
    mail, kept = add(store, job("run", label="app.mail"), job("run", label="app.kept"))
    labelled = add(
        store, job("c", id=schedule_id("c"), repeat=EVERY, scheduled_for=T0, label="app.kept")
    )[0]
    for kind, name in [
        ("schedule", str(sched.id)),
        ("schedule", str(other.id)),
        ("task", "app.mail"),
        ("task", "app.kept"),
    ]:
        store.admin.add_pause(Pause(kind, name, LATER))
    assert store.admin.pause_schedules([sched.id, other.id], LATER) == 2
    assert store.admin.pause_label("app.mail", LATER) == 1
    assert store.admin.pause_label("app.kept", LATER) == 2
    assert store.admin.resume_unpaused(LATER) == 0  # each has its pause (labelled: its label)
    store.admin.remove_pause("schedule", str(sched.id))
    store.admin.remove_pause("task", "app.mail")
    assert store.admin.resume_unpaused(LATER + sec(1)) == 2
    status = {j.id: store.jobs.get(j.id).status for j in (sched, other, mail, kept, labelled)}  # type: ignore[union-attr]
    assert status == {
        sched.id: PENDING,
        other.id: PAUSED,
        mail.id: PENDING,
        kept.id: PAUSED,
        labelled.id: PAUSED,
    }
    assert store.jobs.get(mail.id).run_at == T0  # type: ignore[union-attr]


def test_counts_by_due_time(store: Store) -> None:
    add(store, job("t"), job("t", at=T0 + sec(10)), job("t", at=T0 + sec(20)))
    assert store.jobs.count(JobQuery(statuses=(PENDING,), due_after=T0 + sec(10))) == 2
    assert store.jobs.count(JobQuery(due_before=T0 + sec(10))) == 1  # before: exclusive
    assert store.jobs.count(JobQuery(due_after=T0 + sec(1), due_before=T0 + sec(20))) == 1


def test_update_schedule_is_fenced_on_the_job_as_read(store: Store) -> None:
    sched = add(store, job("a", id=schedule_id("a"), repeat=EVERY, scheduled_for=T0))[0]
    rule = {**EVERY, "every": 30.0}
    edit = ScheduleEdit(at=LATER, declared="code")
    changes = ScheduleChanges(repeat=rule, run_at=LATER, priority=2, queue="q", edit=edit)
    edited = store.admin.update_schedule(sched, changes, LATER)
    assert edited is not None and edited.repeat == rule and edited.edit == edit
    assert edited.run_at == edited.scheduled_for == LATER
    assert (edited.priority, edited.queue, edited.updated_at) == (2, "q", LATER)
    assert store.admin.update_schedule(sched, ScheduleChanges(priority=3), LATER) is None  # stale
    running = claimed(store, tasks=("a",), queues=("q",), now=LATER + sec(1))
    assert store.admin.update_schedule(running, ScheduleChanges(priority=3), LATER) is None
    store.leases.settle(running, succeeded(running, now=LATER + sec(2)))
    after = store.jobs.get(sched.id)
    assert after is not None and after.edit == edit and after.priority == 2
    # A declaration upserted with other values replaces the edit, and clears its mark.
    store.jobs.upsert_schedule(replace(sched, priority=4), LATER + sec(3))
    redeclared = store.jobs.get(sched.id)
    assert redeclared is not None and redeclared.edit is None and redeclared.priority == 4


def test_insert_runs_stores_the_runs_of_a_schedule_only_while_it_is_unfinished(
    store: Store,
) -> None:
    """A triggered run or a backfill's lanes are stored in a write that a finished
    schedule refuses: None, and none of them left stored (a dedupe key's holder
    found meanwhile is not removed)."""
    sched = add(store, job("a", id=schedule_id("a"), repeat=EVERY, scheduled_for=T0))[0]
    held = add(store, job("a", dedupe_key="lane"))[0]
    [(run, created)] = store.admin.insert_runs(sched.id, [job("a", scheduled_for=T0)]) or []
    assert created and store.jobs.get(run.id) is not None
    assert store.jobs.cancel_pending(sched.id, cancelled()) is not None
    lanes = [job("a", scheduled_for=LATER), job("a", dedupe_key="lane")]
    assert store.admin.insert_runs(sched.id, lanes) is None
    assert store.admin.insert_runs("schedule:gone", lanes) is None
    assert {str(i) for i in ids(store.jobs.find(JobQuery(task="a"), limit=0))} == {
        str(i) for i in ids([sched, held, run])
    }


# Workers ---------------------------------------------------------------------------------------------
def runner(name: str, seen: int = 0) -> RunnerInfo:
    return RunnerInfo(
        id=f"id-{name}",
        name=name,
        host="h",
        pid=7,
        queues=None if name == "a" else ("q",),
        tasks=("t", "u"),
        workers=4,
        in_flight=1,
        started_at=T0,
        last_seen=T0 + sec(seen),
        version="1",
    )


def test_runners_register_refresh_expire_and_leave(store: Store) -> None:
    store.admin.save_runner(runner("b"), T0 + sec(60))
    store.admin.save_runner(runner("a"), T0 + sec(60))
    assert store.admin.runners(T0) == [runner("a"), runner("b")]
    store.admin.save_runner(runner("b", seen=50), T0 + sec(110))
    assert store.admin.runners(T0 + sec(61)) == [runner("b", seen=50)]  # a expired
    store.admin.remove_runner("id-b")
    assert store.admin.runners(T0 + sec(61)) == []
    store.admin.save_runner(runner("c"), T0 + sec(200))
    store.admin.remove_runner("id-nothing")
    assert store.admin.runners(T0 + sec(61)) == [runner("c")]


def test_open_counts_counts_unfinished_jobs_by_queue_task_and_status(store: Store) -> None:
    add(store, job("t", queue="a"), job("t", queue="a"), job("t", queue="b"), job("u"))
    running = claimed(store, tasks=("u",))
    failed(store, "v", 1)
    assert store.admin.open_counts() == {
        ("a", "t", PENDING): 2,
        ("b", "t", PENDING): 1,
        ("default", "u", RUNNING): 1,
    }
    store.leases.settle(running, succeeded(running))
    assert store.admin.open_counts() == {("a", "t", PENDING): 2, ("b", "t", PENDING): 1}


def test_counts_count_a_labelled_job_under_its_label(store: Store) -> None:
    """The counts by task (stats, the dashboard's tasks table) name a labelled job (a
    Django task's) by its label, as the dashboard and the CLI show it."""
    add(store, job("run", label="app.mail"), job("run", label="app.mail"), job("run"))
    assert store.jobs.counts() == {("app.mail", PENDING): 2, ("run", PENDING): 1}


def test_backlog_counts_due_pending_jobs_per_queue_and_the_oldest(store: Store) -> None:
    assert store.admin.backlog(LATER) == {}
    add(
        store,
        job("t", queue="a", at=T0 - sec(30)),
        job("u", queue="a", at=T0),
        job("t", queue="b", at=T0 - sec(5)),
        job("t", queue="b", at=LATER + sec(1)),  # not due yet
        job("t", queue="c", at=LATER + sec(1)),  # a queue with nothing due
        job("u", at=T0 - sec(60)),
    )
    running = claimed(store, tasks=("u",), queues=("default",))  # running: not waiting
    assert store.admin.backlog(LATER) == {
        "a": QueueBacklog(due=2, oldest=T0 - sec(30)),
        "b": QueueBacklog(due=1, oldest=T0 - sec(5)),
        "default": QueueBacklog(due=0, oldest=None, running=1),
    }
    assert store.admin.backlog(T0 - sec(5)) == {  # due at exactly now counts
        "a": QueueBacklog(due=1, oldest=T0 - sec(30)),
        "b": QueueBacklog(due=1, oldest=T0 - sec(5)),
        "default": QueueBacklog(due=0, oldest=None, running=1),
    }
    store.leases.settle(running, given_back(running))  # pending again, due as it was
    assert store.admin.backlog(LATER)["default"] == QueueBacklog(due=1, oldest=T0 - sec(60))


def test_backlog_counts_running_jobs_and_expired_leases_until_reaped(store: Store) -> None:
    """Issue 32 #15: a queue whose jobs run, or whose runner died holding them (an
    expired lease, waiting for a reaper), still needs a runner: an autoscaler that
    counted due jobs only scaled to zero and left such a job running for good."""
    add(store, job(queue="q", at=T0), job(queue="q", at=T0), job(queue="q", at=LATER))
    first = claimed(store, queues=("q",), now=T0, lease=10)  # its runner dies
    claimed(store, queues=("q",), now=T0 + sec(5), lease=300)
    assert store.admin.backlog(T0 + sec(9)) == {
        "q": QueueBacklog(due=0, oldest=None, running=2, expired=0)
    }
    waiting = store.admin.backlog(T0 + sec(11))["q"]
    assert waiting == QueueBacklog(due=0, oldest=None, running=2, expired=1)
    assert waiting.total == 2
    assert store.admin.backlog(LATER)["q"] == QueueBacklog(
        due=1, oldest=LATER, running=2, expired=1
    )
    assert store.admin.backlog(LATER)["q"].total == 3
    assert store.leases.reap(first, LATER, lapsed(first, LATER)) is not None  # by a live runner
    after = store.admin.backlog(LATER)["q"]
    assert (after.running, after.expired) == (1, 0)


def test_a_jobs_trace_context_is_stored_as_given(store: Store) -> None:
    header = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    traced, plain = add(store, job(trace={"traceparent": header, "tracestate": "a=1"}), job())
    assert traced.trace == {"traceparent": header, "tracestate": "a=1"}
    again = store.jobs.get(traced.id)
    assert again is not None and again.trace == traced.trace
    assert plain.trace is None and store.jobs.get(plain.id).trace is None  # type: ignore[union-attr]
    running = claimed(store)
    assert running.trace == traced.trace


def test_the_audit_trail_keeps_entries_newest_first_until_they_expire(store: Store) -> None:
    assert store.admin.audit_entries(T0) == []
    job_id = add(store, job())[0].id
    first = AuditEntry(T0, "alice@web-1", "cli", "retry", f"job {job_id} (t)", 1, job=job_id)
    second = AuditEntry(T0, "bob", "dashboard", "purge", "status=failed", 250, None)
    third = AuditEntry(
        T0 + sec(1), "ops", "api", "schedule_edit", "schedule:nightly", None, "cron 0 3 * * *"
    )
    store.admin.record_audit(first, T0 + sec(60))
    store.admin.record_audit(second, None)  # kept for good
    store.admin.record_audit(third, T0 + sec(30))
    assert store.admin.audit_entries(T0) == [third, second, first]  # the same second: last first
    assert store.admin.audit_entries(T0, limit=2) == [third, second]
    assert store.admin.audit_entries(T0 + sec(30)) == [second, first]  # expired at exactly then
    assert store.admin.audit_entries(T0 + sec(61), limit=0) == [second]
    assert store.admin.audit_entries(T0, job=job_id) == [first]  # one job's entries
    assert store.admin.audit_entries(T0, job=add(store, job())[0].id) == []
