"""An app's durable workflows (:class:`Workflows`): registering workflows and steps,
what a workflow calls (sleep, wait for an event, gather), its events, and what
operators do to it (cancel, retry, fork); the app's methods of the same names are its.
A run's replay is :mod:`mongosched.workflow.replay`, a step's run
:mod:`mongosched.workflow.step`.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable, Iterable, Mapping
from contextlib import AbstractContextManager
from dataclasses import replace
from datetime import timedelta
from typing import Any, ParamSpec, Protocol, TypeVar

from mongosched._core.records import JobRecord, JobStatus, PendingChanges
from mongosched._core.steps import StepKind, StepRecord
from mongosched.errors import ConfigurationError, JobNotFound, StepFailed, WorkflowError
from mongosched.events import Event
from mongosched.job import Job, current_job
from mongosched.operations.audit import AuditTrail, checked_actor
from mongosched.operations.jobs import Cancellation
from mongosched.retry import RetryPolicy
from mongosched.task import JobSpec, Task
from mongosched.transaction import Transaction
from mongosched.workflow.replay import Replay, ReplayHost, current_replay
from mongosched.workflow.step import Step

__all__ = ["WorkflowHost", "Workflows"]

log = logging.getLogger("mongosched")

P = ParamSpec("P")
R = TypeVar("R")

FOREVER = timedelta(days=365 * 100)
"""How far off a wait without a timeout is due (a send makes it due at once)."""
GATHER_POLL = timedelta(seconds=30)
"""When a gather looks again at its jobs if no job's end woke it (a crash between a
job's end and its wake-up)."""
WAKERS = ("job:success", "job:fail", "job:cancel", "job:expired")
"""Events of a gathered job's end that wake its workflow."""
CRASH_RETRIES = 5
"""A workflow's default ``retry``: how many times a crashed run (its lease expired) is
replayed. Its own errors (a step's recorded failure, a changed history) fail it at
once (:class:`~mongosched.errors.WorkflowError` is a :class:`~mongosched.errors.Fail`)."""
CHILD_PREFIX = "workflow:"
"""The dedupe key of a job a gather scheduled starts so (then the workflow's id)."""


class WorkflowHost(ReplayHost, Protocol):
    """What :class:`Workflows` needs of its app (what its replays need, and more)."""

    @property
    def task(self) -> Callable[..., Any]: ...

    def schedule_bulk(self, specs: Iterable[JobSpec], *, session: Any = None) -> list[Job[Any]]: ...

    def on(self, event: str, listener: Any = None) -> Any: ...

    @property
    def tasks(self) -> Mapping[str, Task[Any, Any]]: ...

    @property
    def audit(self) -> AuditTrail: ...

    def cancel(self, job_id: Any, *, actor: str | None = None) -> Cancellation: ...

    def retry_job(self, job_id: Any, *, actor: str | None = None) -> Job[Any]: ...


class Workflows:
    """An app's durable workflows: what :meth:`App.workflow <mongosched.App.workflow>`,
    :meth:`App.step <mongosched.App.step>`, :meth:`App.sleep <mongosched.App.sleep>`,
    :meth:`App.wait_for <mongosched.App.wait_for>`, :meth:`App.send
    <mongosched.App.send>`, :meth:`App.gather <mongosched.App.gather>` and the event
    methods are."""

    def __init__(
        self,
        app: WorkflowHost,
        wake_runners: Callable[[], None],
        bind_transaction: Callable[[Transaction], AbstractContextManager[Any]],
    ) -> None:
        self.app = app
        self.wake_runners = wake_runners
        """Wakes this process's runners (a workflow made due claims at once)."""
        self.bind_transaction = bind_transaction
        """Makes the frameworks' own writes join a transactional step's transaction."""
        self.names: set[str] = set()
        self._listening = False

    # Registering ---------------------------------------------------------------------------
    def workflow(self, /, **options: Any) -> Callable[[Callable[P, R]], Task[P, R]]:
        """Register a function as a durable workflow: a task (``@app.task``'s options
        apply; ``retry`` defaults to :data:`CRASH_RETRIES`) whose job runs the function against its
        history (see :doc:`/workflows`)."""
        options.setdefault("retry", CRASH_RETRIES)
        if options.get("transactional"):
            raise ConfigurationError("a workflow cannot be transactional; its steps can")

        def register(fn: Callable[P, R]) -> Task[P, R]:
            name = options.get("name") or f"{fn.__module__}.{fn.__qualname__}"

            @functools.wraps(fn)
            def run(*args: Any, **kwargs: Any) -> Any:
                return self._run(name, fn, args, kwargs)

            task: Task[P, R] = self.app.task(**{**options, "name": name})(run)
            self.names.add(name)
            self._listen()
            return task

        return register

    def step(
        self,
        *,
        name: str | None = None,
        retry: RetryPolicy | int | None = 0,
        transactional: bool = False,
    ) -> Callable[[Callable[P, R]], Step[P, R]]:
        """Register a function as a workflow's step: in a workflow it runs once (its
        attempts by ``retry``, in the worker's thread) and its result, or its final
        error, is recorded; ``transactional=True`` records it in the same
        transaction as its MongoDB writes (``current_job().session``)."""

        def register(fn: Callable[P, R]) -> Step[P, R]:
            step_name = name or f"{fn.__module__}.{fn.__qualname__}"
            policy = RetryPolicy.coerce(retry, task=step_name)
            step: Step[P, R] = Step(fn, step_name, policy, transactional)
            functools.update_wrapper(step, fn)
            return step

        return register

    def _run(
        self, name: str, fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> Any:
        ctx, nested = current_job(), current_replay() is not None
        if ctx is None or ctx.task != name or ctx.lease_record is None or nested:
            return fn(*args, **kwargs)  # inline: outside a runner, or nested
        replay = Replay(self.app, ctx, name, self.wake, self.bind_transaction)
        return replay.run(fn, args, kwargs)

    def is_workflow(self, task: str) -> bool:
        """Whether ``task`` (a registered task's name, as a job's ``task``) is a
        workflow of this app."""
        return task in self.names

    # Inside a workflow -----------------------------------------------------------------------
    def sleep(self, duration: timedelta | float) -> None:
        """Sleep durably: the worker is freed and the workflow runs on after
        ``duration`` (seconds or a timedelta), whatever restarts meanwhile."""
        seconds = _seconds(duration, "sleep")
        replay = current_replay()
        if replay is None:
            time.sleep(seconds)
            return
        position, recorded = replay.next(StepKind.SLEEP, "sleep")
        if recorded is None:
            until = self.app.now() + timedelta(seconds=seconds)
            recorded = replay.record(
                StepRecord(replay.id, position, "sleep", StepKind.SLEEP, until=until)
            )
        assert recorded.until is not None
        if self.app.now() < recorded.until:
            replay.wait_until(recorded.until)

    def wait_for(self, topic: str, timeout: timedelta | float | None = None) -> Any:
        """Wait durably for an event on ``topic`` sent to this workflow with
        :meth:`send` (one sent before the wait is kept for it; each event is received
        once). Returns its value, or None after ``timeout``."""
        replay = current_replay()
        if replay is None:
            raise WorkflowError(f"wait_for({topic!r}) is for a workflow run by a runner")
        position, waited = replay.next(StepKind.WAIT, topic)
        if waited is None:
            span = FOREVER if timeout is None else timedelta(seconds=_seconds(timeout, "timeout"))
            deadline = self.app.now() + span
            waited = replay.record(
                StepRecord(replay.id, position, topic, StepKind.WAIT, until=deadline)
            )
        position, received = replay.next(StepKind.EVENT, topic)
        if received is None:
            fresh = replay.fresh_events(topic)
            assert waited.until is not None
            if not fresh and self.app.now() < waited.until:
                replay.wait_until(waited.until, topic)
            event, value = fresh[0] if fresh else (None, None)
            step = StepRecord(replay.id, position, topic, StepKind.EVENT, value=value, event=event)
            received = replay.record(replay.sized(step, f"the event {topic!r}"))
        return received.value

    def gather(self, specs: Iterable[JobSpec]) -> list[Any]:
        """Schedule ``specs`` (``task.job(...)``) and wait durably for every one to end;
        returns their results in order. A job that did not complete raises
        :class:`~mongosched.errors.StepFailed`. Outside a workflow, they are scheduled
        and waited for in the thread."""
        replay = current_replay()
        if replay is None:
            jobs = self.app.schedule_bulk(list(specs))
            return [_result(job.wait()) for job in jobs]
        position, scheduled = replay.next(StepKind.GATHER, "gather")
        if scheduled is None:
            key = f"{CHILD_PREFIX}{replay.id}:{position}"
            keyed = [  # a key per job: scheduled again after a crash, it is the same job
                replace(spec, options=spec.options.merged({"dedupe_key": f"{key}:{n}"}))
                for n, spec in enumerate(specs)
            ]
            jobs = self.app.schedule_bulk(keyed)
            step = StepRecord(
                replay.id, position, "gather", StepKind.GATHER, children=tuple(j.id for j in jobs)
            )
            scheduled = replay.record(step)
        position, gathered = replay.next(StepKind.GATHERED, "gather")
        if gathered is None:
            ended = []
            for child in scheduled.children:  # read up to the first that has not ended
                record = self._get(child)
                if not record.status.is_final:
                    replay.wait_until(self.app.now() + GATHER_POLL)
                ended.append(record)
            results = [{"status": str(job.status), "result": job.result} for job in ended]
            step = StepRecord(replay.id, position, "gather", StepKind.GATHERED, value=results)
            gathered = replay.record(replay.sized(step, "the gathered results"))
        return [_outcome(item) for item in gathered.value]

    def _get(self, job_id: Any) -> JobRecord:
        record = self.app.store.jobs.get(job_id)
        if record is None:
            raise JobNotFound(f"gathered job {job_id} no longer exists")
        return record

    # Events ----------------------------------------------------------------------------------
    def send(self, workflow_id: Any, topic: str, value: Any = None) -> None:
        """Send an event (``topic``, ``value``) to a workflow, from anywhere: kept for
        its :meth:`wait_for`, and the workflow woken if it waits for ``topic``."""
        store = self.app.store
        workflow_id = store.parse_id(workflow_id)
        store.workflows.send_event(workflow_id, topic, value, self.app.now())
        steps = store.workflows.steps(workflow_id)
        if any(s.kind is StepKind.WAIT and s.name == topic for s in steps):
            self.wake(workflow_id)

    def set_event(self, key: str, value: Any) -> None:
        """Publish ``value`` under ``key`` for callers of :meth:`get_event` (the
        latest published value wins)."""
        ctx, replay = current_job(), current_replay()
        if ctx is None:
            raise WorkflowError(f"set_event({key!r}) is for a running workflow")
        if replay is None:
            self.app.store.workflows.send_event(ctx.id, f"published:{key}", value, self.app.now())
            return
        position, recorded = replay.next(StepKind.PUBLISH, key)
        if recorded is None:  # published first: a crash before the record publishes again
            self.app.store.workflows.send_event(ctx.id, f"published:{key}", value, self.app.now())
            replay.record(StepRecord(replay.id, position, key, StepKind.PUBLISH))

    def get_event(self, workflow_id: Any, key: str, default: Any = None) -> Any:
        """The value a workflow last published under ``key`` (``default``: none yet)."""
        store = self.app.store
        published = store.workflows.events(store.parse_id(workflow_id), f"published:{key}")
        return published[-1][1] if published else default

    def steps(self, workflow_id: Any) -> list[StepRecord]:
        """A workflow's recorded history, in order (for its timeline)."""
        store = self.app.store
        return store.workflows.steps(store.parse_id(workflow_id))

    # Operators -------------------------------------------------------------------------------
    def cancel_workflow(self, workflow_id: Any, *, actor: str | None = None) -> Cancellation:
        """Cancel a workflow as :meth:`App.cancel <mongosched.App.cancel>` does, and
        the jobs it gathered that have not ended (each cancel in the audit trail).
        ``actor``: who did it."""
        store = self.app.store
        workflow_id = self._require(workflow_id, "cancel_workflow", actor).id
        done = self.app.cancel(workflow_id, actor=actor)
        for step in store.workflows.steps(workflow_id):
            for child in step.children if step.kind is StepKind.GATHER else ():
                record = store.jobs.get(child)
                if record is not None and not record.status.is_final:
                    self.app.cancel(child, actor=actor)
        return done

    def retry_workflow(self, workflow_id: Any, *, actor: str | None = None) -> Job[Any]:
        """Run a failed (or cancelled) workflow again from its failed step: the records
        from that step on are forgotten (all of them when none failed), the earlier
        ones kept. Audited as :meth:`App.retry_job <mongosched.App.retry_job>` is."""
        store = self.app.store
        workflow_id = self._require(workflow_id, "retry_workflow", actor).id
        failed = [s.position for s in store.workflows.steps(workflow_id) if s.error is not None]
        if failed:
            store.workflows.forget_steps(workflow_id, failed[0])
        return self.app.retry_job(workflow_id, actor=actor)

    def fork_workflow(
        self, workflow_id: Any, position: int, *, actor: str | None = None
    ) -> Job[Any]:
        """A new run of a workflow, with the same arguments, whose history is a copy of
        the original's before ``position``: those steps are not run again. Kept in the
        audit trail (action ``fork``, on the original). ``actor``: who did it."""
        record = self._require(workflow_id, "fork_workflow", actor)
        if isinstance(position, bool) or not isinstance(position, int) or position < 0:
            raise ConfigurationError(
                f"fork_workflow of workflow {record.id} ({record.task}): position must be "
                f"a step's position (an int of 0 or more), not {position!r}"
            )
        store = self.app.store
        task = self.app.tasks[record.task]
        job: Job[Any] = task.configure(queue=record.queue, priority=record.priority).schedule(
            *record.args, **record.kwargs
        )
        for step in store.workflows.steps(record.id):
            if step.position < position:
                store.workflows.record_step(replace(step, workflow=job.id), None)
        self.app.audit.record(
            "fork",
            f"workflow {record.id} ({record.task})",
            count=1,
            detail=f"from position {position}: job {job.id}",
            actor=actor,
            job=record.id,
        )
        return job

    def _require(self, workflow_id: Any, what: str, actor: str | None) -> JobRecord:
        """The job record of workflow ``workflow_id``, the actor checked; raises
        :class:`~mongosched.errors.JobNotFound` when no workflow of this app has it."""
        checked_actor(actor, what)
        store = self.app.store
        record = store.jobs.get(store.parse_id(workflow_id))
        if record is None or not self.is_workflow(record.task):
            raise JobNotFound(f"{what}: workflow {workflow_id} does not exist in this app")
        return record

    # Waking ----------------------------------------------------------------------------------
    def wake(self, workflow_id: Any) -> bool:
        """Make a waiting workflow due now; False when it is not pending."""
        store, now = self.app.store, self.app.now()
        record = store.jobs.get(workflow_id)
        if record is None or record.status is not JobStatus.PENDING or record.run_at <= now:
            return False
        if store.jobs.update_pending(record, PendingChanges(run_at=now), now) is None:
            return False
        self.wake_runners()
        return True

    def _listen(self) -> None:
        if not self._listening:
            self._listening = True
            for name in WAKERS:
                self.app.on(name, self._child_ended)

    def _child_ended(self, event: Event) -> None:
        job = event.job
        key = None if job is None else job.dedupe_key
        if key is None or not key.startswith(CHILD_PREFIX):
            return
        parent = key[len(CHILD_PREFIX) :].rsplit(":", 2)[0]
        try:
            self.wake(self.app.store.parse_id(parent))
        except Exception as exc:  # its poll wakes it later
            log.warning("workflow %s: could not wake it: %s", parent, exc)


def _seconds(value: timedelta | float, what: str) -> float:
    seconds = value.total_seconds() if isinstance(value, timedelta) else float(value)
    if seconds < 0:
        raise ConfigurationError(f"{what}: a duration may not be negative, not {value!r}")
    return seconds


def _outcome(item: dict[str, Any]) -> Any:
    if item["status"] != str(JobStatus.COMPLETED):
        raise StepFailed(f"a gathered job ended {item['status']}", item["status"])
    return item["result"]


def _result(job: Job[Any]) -> Any:
    return _outcome({"status": str(job.status), "result": job.result})
