"""What operators do to the running system rather than to single jobs: pause and resume
a queue, a task or a repeating schedule; put the schedules declared in code in place;
edit a schedule at runtime; list schedules and live runners (:class:`AdminOperations`,
which :class:`~mongosched.App` holds).

Pauses are stored, so they hold cluster-wide: every runner reads the pause set once per
poll interval (:mod:`mongosched.runner.pauses`) and leaves paused tasks and queues out of what
it claims. A paused repeating schedule is also moved out of the claimable status
(``paused``) so that no claim has to look at it; resuming makes it pending again, due
at the slot it was waiting for, and the misfire policy decides what runs for the slots
missed meanwhile.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from dataclasses import replace
from datetime import timedelta
from typing import Any, NoReturn

from mongosched._core import validate
from mongosched._core.records import (
    IDLE_SCHEDULE_STATUSES,
    PAUSE_KINDS,
    JobRecord,
    Pause,
    RunnerInfo,
    ScheduleChanges,
    ScheduleEdit,
)
from mongosched.errors import (
    ConfigurationError,
    InvalidJobId,
    JobNotFound,
    JobStateError,
    ScheduleFinished,
)
from mongosched.job import Job
from mongosched.operations import triggers
from mongosched.operations.audit import checked_actor
from mongosched.operations.base import Operations
from mongosched.schedule import Cron, Every, rule_from_document
from mongosched.store import schedule_id
from mongosched.task import Task

__all__ = ["STALE_AFTER", "AdminOperations", "declaration", "schedule_row"]

log = logging.getLogger("mongosched")

STALE_AFTER = timedelta(seconds=15)
"""A runner whose entry was not refreshed for this long is shown ``stale`` (runners
refresh theirs every few seconds; see :mod:`mongosched.runner.registration`)."""


def declaration(
    repeat: Mapping[str, Any] | None, queue: str, priority: float, max_attempts: int
) -> str:
    """A fingerprint of what declares a schedule (rule, queue, priority, attempts): the
    same declaration gives the same string, whichever process computes it."""
    data = {
        "repeat": dict(repeat or {}),
        "queue": queue,
        "priority": priority,
        "max_attempts": max_attempts,
    }
    return json.dumps(data, sort_keys=True, default=str)


def schedule_row(record: JobRecord, pause: Pause | bool | None) -> dict[str, Any]:
    """A repeating job as :meth:`App.schedules` lists it (``pause``: its pause, if
    it is paused)."""
    repeat = record.repeat or {}
    last = record.last_run
    missed = record.missed
    waiting = record.status in IDLE_SCHEDULE_STATUSES
    return {
        "id": record.id,
        "task": record.task,
        "rule": repeat.get("cron") or f"every {repeat.get('every')}s",
        "timezone": repeat.get("timezone"),
        "queue": record.queue,
        "priority": record.priority,
        "status": record.status.value,
        "paused": bool(pause),
        "paused_reason": pause.reason if isinstance(pause, Pause) else None,
        "next_run": record.run_at if waiting else None,
        "last_run": last.finished_at if last else None,
        "last_status": last.status.value if last else None,
        "last_error": last.error if last else None,
        "failures": last.failures if last else 0,
        "missed": missed.count if missed else 0,
        "missed_last": missed.last_slot if missed else None,
        "missed_reason": missed.reason if missed else None,
        "edited_at": record.edit.at if record.edit else None,
        "backfill_until": repeat.get("until"),
    }


class AdminOperations(Operations):
    """Pauses, schedules (declared, edited, listed) and live runners, for
    :class:`~mongosched.App` (whose methods of the same names call these, with these
    docstrings), on the app's parts (see
    :class:`~mongosched.operations.base.AppParts`; its tasks declare schedules).
    """

    # Pause and resume --------------------------------------------------------------------------
    def pause(
        self,
        *,
        queue: str | None = None,
        task: str | None = None,
        schedule: Any = None,
        reason: str | None = None,
        actor: str | None = None,
    ) -> None:
        """Stop every runner, cluster-wide, from starting jobs of a ``queue``, a
        ``task`` or a repeating ``schedule`` (its id, or its task's name) within one
        poll interval. Jobs already running finish; nothing is lost: the jobs wait,
        pending (a paused schedule: ``paused``), until :meth:`resume`. Pausing what is
        paused changes nothing. ``task`` also names a label (a Django task's path): the
        jobs labelled so wait ``paused``, the other jobs of their task run on.
        ``reason`` is kept with the pause (the dashboard and :meth:`pauses` show it).
        ``actor``: who did it, for the audit trail."""
        checked_actor(actor, "pause")
        kind, name, record = self._pause_target("pause", queue, task, schedule)
        if reason is not None:
            reason = validate.text(reason, what="pause: reason", maximum=1024)
        now = self.now()
        pause = Pause(kind, name, now, reason)
        added = self.writable().admin.add_pause(pause)
        if record is not None:
            try:  # stored first, checked after: a schedule that finished meanwhile
                self.unfinished(record, "pause")
            except ScheduleFinished:
                if added:
                    self.writable().admin.remove_pause(kind, name)
                raise
            self.store.admin.pause_schedules([record.id], now)
        if kind == "task":  # jobs labelled with the name (claimed by no task's name)
            self.store.admin.pause_label(name, now)
        if added:
            log.info("%s %s paused", kind, name)
            self.events.emit("control:pause", pause=pause)
        self.audit.record(
            "pause", f"{kind} {name}", detail=None if added else "already paused", actor=actor
        )

    def resume(
        self,
        *,
        queue: str | None = None,
        task: str | None = None,
        schedule: Any = None,
        actor: str | None = None,
    ) -> None:
        """Undo :meth:`pause`: runners claim the queue's, task's or schedule's jobs again
        within one poll interval, those due first. A resumed schedule is due at the slot
        it was waiting for; its misfire policy decides what runs for slots missed while
        it was paused (``coalesce``: one run; ``skip``: none; ``all``: each)."""
        checked_actor(actor, "resume")
        try:
            kind, name, record = self._pause_target("resume", queue, task, schedule)
        except ScheduleFinished as exc:  # a pause stored before it ended is not left behind
            removed = self.writable().admin.remove_pause("schedule", str(exc.schedule))
            self._finished_resume(exc, removed, actor)
        removed = self.writable().admin.remove_pause(kind, name)
        if record is not None and self.store.admin.resume_schedule(record.id, self.now()) is None:
            try:  # not paused: maybe it finished since it was read
                self.unfinished(record, "resume")
            except ScheduleFinished as exc:
                self._finished_resume(exc, removed, actor)
        if kind == "task":
            self.store.admin.resume_label(name, self.now())
        if removed:
            log.info("%s %s resumed", kind, name)
            self.events.emit("control:resume", pause=Pause(kind, name, self.now()))
        self.audit.record(
            "resume", f"{kind} {name}", detail=None if removed else "was not paused", actor=actor
        )

    def _finished_resume(self, exc: ScheduleFinished, removed: bool, actor: str | None) -> NoReturn:
        """Refuse to resume a finished schedule, saying whether its pause, stored
        before it ended, was removed (``removed``)."""
        if not removed:
            raise exc
        log.info("schedule %s: finished; its pause removed", exc.schedule)
        self.audit.record(
            "resume", f"schedule {exc.schedule}", detail="finished: pause removed", actor=actor
        )
        raise ScheduleFinished(f"{exc} (its pause is removed)", exc.schedule) from None

    def pauses(self) -> list[Pause]:
        """What is paused, by kind (``queue``, ``task``, ``schedule``) and name."""
        return self.store.admin.pauses()

    def _pause_target(
        self, what: str, queue: Any, task: Any, schedule: Any
    ) -> tuple[str, str, JobRecord | None]:
        values = (queue, task, schedule)
        given = [(k, v) for k, v in zip(PAUSE_KINDS, values, strict=True) if v is not None]
        if len(given) != 1:
            raise ConfigurationError(f"{what}: give exactly one of queue, task or schedule")
        kind, value = given[0]
        if kind == "queue":
            return kind, validate.queue(value, task="*"), None
        if kind == "task":
            return kind, validate.text(value, what=f"{what}: task", expected="a task name"), None
        record = self.named(value, what)
        return kind, str(record.id), record

    # Schedules ---------------------------------------------------------------------------------
    def schedules(self) -> list[dict[str, Any]]:
        """Every repeating job: id, task, rule, timezone, queue, priority, status,
        ``paused`` (and ``paused_reason`` when it paused itself), next run, last run
        (when, status, error), ``failures`` (failed runs in a row), ``missed`` (slots
        that never ran: how many, ``missed_last``, ``missed_reason``),
        ``edited_at`` (when an operator last edited it, if ever) and, for the jobs of
        a :meth:`backfill`, ``backfill_until`` (the last slot they run)."""
        paused = {p.name: p for p in self.store.admin.pauses() if p.kind == "schedule"}
        return [schedule_row(r, paused.get(str(r.id))) for r in self.store.jobs.schedules()]

    def ensure_schedules(self, *, queues: Sequence[str] | None = None) -> list[str]:
        """Put the repeating schedules declared with ``@app.task(cron=...)`` or
        ``every=...`` in place: each is one job, created once however many processes do
        this at the same time, and updated (next slot recomputed) when its rule, queue,
        priority or attempts changed in code.

        Every runner does this when it starts, for the queues it serves (``queues``;
        None: every queue). Call it from a deploy step to have the schedules before any
        runner starts. Returns the names of the tasks whose schedule was created.

        A schedule an operator edited (:meth:`update_schedule`) keeps the edit as long
        as the code declares it as it did before the edit; once the declaration in code
        changes, the code wins and the edit is dropped. Both cases are logged.
        """
        store = self.writable()
        now = self.now()
        created = []
        for task in self.tasks.values():
            if task.rule is None or (queues is not None and task.queue not in queues):
                continue
            record = task.schedule_record(now)
            if not self._code_wins(record):
                continue
            if store.jobs.upsert_schedule(record, now):
                log.info("schedule for %s created (%s)", task.name, task.rule)
                created.append(task.name)
        return created

    def _code_wins(self, declared: JobRecord) -> bool:
        """Whether a schedule's declaration in code is to be applied (see
        :meth:`ensure_schedules`): not over an operator's edit made since the code last
        changed it."""
        current = self.store.jobs.get(declared.id)
        if current is None or current.edit is None:
            return True
        code = declaration(
            declared.repeat, declared.queue, declared.priority, declared.max_attempts
        )
        if code == current.edit.declared:
            log.info(
                "schedule %s keeps the operator's edit of %s (%s, queue %s, priority %s) "
                "over its declaration in code, which has not changed since",
                declared.task,
                current.edit.at,
                *_declared(current),
            )
            return False
        log.warning(
            "schedule %s: its declaration in code changed since an operator edited it at %s; "
            "the code's (%s, queue %s, priority %s) replaces the edit",
            declared.task,
            current.edit.at,
            *_declared(declared),
        )
        return True

    def update_schedule(
        self,
        schedule: Any,
        *,
        cron: str | None = None,
        every: float | timedelta | None = None,
        timezone: str | None = None,
        priority: float | None = None,
        queue: str | None = None,
        actor: str | None = None,
    ) -> dict[str, Any]:
        """Change a repeating schedule at runtime (``schedule``: its id, or its task's
        name): its rule (``cron``, or ``every``; a new ``timezone`` alone keeps the cron
        expression), ``priority`` or ``queue``. The change is one atomic write, fenced
        on the schedule as read: it lands while the schedule waits (pending or paused),
        never under a run in progress (:class:`~mongosched.errors.JobStateError`: try
        again when the run ends). A new rule recomputes the next slot from now.

        A declared schedule (``@app.task(cron=...)``) keeps the edit across deploys
        until its declaration in code changes: then the new code wins, and
        :meth:`ensure_schedules` logs that it replaced the edit. Returns the schedule's
        row as :meth:`schedules` lists it. ``actor``: who did it, for the audit trail."""
        checked_actor(actor, "update_schedule")
        record = self.named(schedule, "update_schedule")
        if all(v is None for v in (cron, every, timezone, priority, queue)):
            raise ConfigurationError(
                f"update_schedule: schedule {record.id} ({record.task}): give at least one "
                "of cron, every, timezone, priority or queue"
            )
        for _ in range(5):  # re-read and recompute if it changed between read and write
            changes = self._changes(record, cron, every, timezone, priority, queue)
            updated = self.writable().admin.update_schedule(record, changes, self.now())
            if updated is not None:
                log.info(
                    "schedule %s (%s) edited: %s", updated.id, updated.task, _describe(changes)
                )
                self.events.emit("schedule:update", job=Job(updated, self.store.jobs))
                target = f"schedule {updated.id} ({updated.task})"
                self.audit.record("schedule_edit", target, detail=_describe(changes), actor=actor)
                pause = next(
                    (
                        p
                        for p in self.pauses()
                        if p.kind == "schedule" and p.name == str(updated.id)
                    ),
                    None,
                )
                return schedule_row(updated, pause)
            current = self.unfinished(record, "update_schedule")
            if current.status not in IDLE_SCHEDULE_STATUSES:
                raise JobStateError(
                    f"schedule {record.id} ({record.task}) is {current.status}; it can be "
                    "edited while it waits (pending or paused), so try again when the run ends"
                )
            record = current
        raise JobStateError(f"schedule {record.id} ({record.task}) keeps changing; not edited")

    def _changes(
        self,
        record: JobRecord,
        cron: str | None,
        every: float | timedelta | None,
        timezone: str | None,
        priority: float | None,
        queue: str | None,
    ) -> ScheduleChanges:
        name, now = record.task, self.now()
        repeat = dict(record.repeat or {})
        new_repeat: dict[str, Any] | None = None
        run_at = None
        if cron is not None or every is not None or timezone is not None:
            rule: Cron | Every
            if cron is not None and every is not None:
                raise ConfigurationError(f"task {name!r}: give either cron or every, not both")
            if every is not None:
                if timezone is not None:
                    raise ConfigurationError(
                        f"task {name!r}: timezone applies only with cron, not every"
                    )
                rule = Every(every, task=name)
            else:
                expression = cron if cron is not None else repeat.get("cron")
                if expression is None:
                    raise ConfigurationError(
                        f"task {name!r}: timezone applies only with cron; this schedule runs "
                        f"{rule_from_document(repeat)} (give cron too)"
                    )
                zone = timezone or repeat.get("timezone") or "UTC"
                rule = Cron(expression, zone, task=name)
            new_repeat = {**rule.to_document()}
            if "misfire" in repeat:
                new_repeat["misfire"] = repeat["misfire"]
            run_at = rule.next_after(now)
        edit = None
        if record.id == schedule_id(record.task):  # a declared schedule: mark the edit
            declared = (
                record.edit.declared
                if record.edit is not None
                else declaration(record.repeat, record.queue, record.priority, record.max_attempts)
            )
            edit = ScheduleEdit(at=now, declared=declared)
        return ScheduleChanges(
            repeat=new_repeat,
            run_at=run_at,
            priority=None if priority is None else validate.priority(priority, task=name),
            queue=None if queue is None else validate.queue(queue, task=name),
            edit=edit,
        )

    def named(self, schedule: Any, what: str) -> JobRecord:
        """The repeating job ``schedule`` names, as stored: a :class:`Job`, its id, or
        a task or its name (its declared schedule, or its only repeating job), for the
        operation ``what``, which a finished schedule refuses
        (:class:`~mongosched.errors.ScheduleFinished`, saying why)."""
        if isinstance(schedule, Job):
            schedule = schedule.id
        elif isinstance(schedule, Task):
            schedule = schedule.name
        record = None
        try:
            record = self.store.jobs.get(self.store.parse_id(schedule))
        except InvalidJobId:
            if not isinstance(schedule, str) or not schedule:
                raise
            validate.text(schedule, what="schedule")
        if record is None and isinstance(schedule, str):
            record = self.store.jobs.get(schedule_id(schedule))
            if record is None:
                found = [r for r in self.store.jobs.schedules() if r.task == schedule]
                if len(found) > 1:
                    listed = ", ".join(str(r.id) for r in found)
                    raise ConfigurationError(
                        f"task {schedule!r} has {len(found)} repeating jobs ({listed}): "
                        "name one by its id"
                    )
                record = found[0] if found else None
        if record is None:
            raise JobNotFound(f"no repeating schedule {schedule!r} (an id or a task name)")
        if record.repeat is None:
            raise ConfigurationError(f"job {record.id} ({record.task}) is not a repeating job")
        if record.status.is_final:
            raise triggers.refusal(what, record)
        return record

    def unfinished(self, record: JobRecord, what: str) -> JobRecord:
        """The repeating job ``record`` as stored now, read again after a write of the
        operation ``what`` that it fenced off (or before which it may have finished):
        :class:`~mongosched.errors.ScheduleFinished` if it finished meanwhile,
        :class:`~mongosched.errors.JobNotFound` if it is gone."""
        return triggers.unfinished(self.store, record, what)

    # Live runners ------------------------------------------------------------------------------
    def live_runners(self) -> list[RunnerInfo]:
        """The runners registered in this store (every process, every host), by name,
        each ``stale`` when it has not refreshed its entry for :data:`STALE_AFTER` (it
        may have died without stopping; the store forgets it after a longer while).
        :attr:`App.runners <mongosched.App.runners>` are this process's own
        :class:`~mongosched.Runner` objects instead."""
        now = self.now()
        return [
            replace(info, stale=info.last_seen < now - STALE_AFTER)
            for info in self.store.admin.runners(now)
        ]


def _declared(record: JobRecord) -> tuple[Any, str, float]:
    """A schedule's rule, queue and priority, as the declaration log lines name them."""
    return schedule_row(record, False)["rule"], record.queue, record.priority


def _describe(changes: ScheduleChanges) -> str:
    parts = []
    if changes.repeat is not None:
        parts.append(f"rule {rule_from_document(changes.repeat)}, next run {changes.run_at}")
    if changes.priority is not None:
        parts.append(f"priority {changes.priority}")
    if changes.queue is not None:
        parts.append(f"queue {changes.queue}")
    return "; ".join(parts)
