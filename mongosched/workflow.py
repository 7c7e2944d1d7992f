"""Durable workflows: functions whose steps run once, whose sleeps and waits free the
worker, and which a crash only delays (see :doc:`/workflows`).

A workflow is a job of a task registered with :meth:`App.workflow
<mongosched.App.workflow>`. At every wake-up its function runs from the top; each call
that must not happen twice (a step, a sleep's wake-up time, an event received, the jobs
a gather scheduled) takes the next position of the workflow's history, recorded in the
store's steps collection the first time and returned from it afterwards. The history
is read once per run (one query).

A sleep, a wait for an event or a gather that cannot return yet writes the workflow's
job back ``pending``, due when it is to wake up (its lease released, fenced on it as
every holder's write is), and frees the worker's thread. :meth:`send
<Workflows.send>` and the end of a gathered job make it due at once.

Outside a runner (a workflow called as a plain function, or in eager mode), a workflow
runs inline: its steps are plain calls, a sleep sleeps in the thread, a gather waits
for its jobs, and a wait for an event raises :class:`~mongosched.errors.WorkflowError`.
A workflow called inside another runs inline in it: its steps are the caller's. A step
called outside a workflow is a plain call.
"""

from __future__ import annotations

import contextvars
import functools
import logging
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any, Generic, ParamSpec, Protocol, TypeVar

from mongosched._core.outcome import Retention, cancelled, error_info, given_back
from mongosched._core.records import JobRecord, JobStatus, PendingChanges
from mongosched._core.steps import StepKind, StepRecord, check_bound, check_replay
from mongosched.errors import (
    ConfigurationError,
    JobNotFound,
    SerializationError,
    StepFailed,
    WorkflowError,
)
from mongosched.events import Event
from mongosched.job import Job, JobContext, Suspended, current_job
from mongosched.operations.audit import AuditTrail, checked_actor
from mongosched.operations.jobs import Cancellation
from mongosched.retry import RetryPolicy
from mongosched.store import Staged, Store, codec
from mongosched.task import JobSpec, Task
from mongosched.transaction import Transaction, as_current

__all__ = ["Step", "Workflows", "patched"]

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
TRANSACTION_LEASE = 60.0
"""Seconds a transactional step's lease is renewed for while its heartbeat pauses."""
CRASH_RETRIES = 5
"""A workflow's default ``retry``: how many times a crashed run (its lease expired) is
replayed. Its own errors (a step's recorded failure, a changed history) fail it at
once (:class:`~mongosched.errors.WorkflowError` is a :class:`~mongosched.errors.Fail`)."""
CHILD_PREFIX = "workflow:"
"""The dedupe key of a job a gather scheduled starts so (then the workflow's id)."""


class WorkflowHost(Protocol):
    """What :class:`Workflows` needs of its app."""

    @property
    def store(self) -> Store: ...

    @property
    def retention(self) -> Retention: ...

    def now(self) -> datetime: ...

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


class _Suspend(BaseException):
    """Raised inside a workflow's function to stop its run until ``until``
    (``topic``: or until an event on it is sent)."""

    def __init__(self, until: datetime, topic: str | None = None) -> None:
        super().__init__(until)
        self.until = until
        self.topic = topic


class Replay:
    """One run of a workflow's function against its history."""

    def __init__(self, owner: Workflows, ctx: JobContext, name: str) -> None:
        self.owner = owner
        self.ctx = ctx
        self.name = name
        self.id = ctx.id
        record = ctx.lease_record
        assert record is not None and record.lease is not None, "a workflow runs leased"
        self.job = record
        self.token = record.lease.token
        store = owner.app.store
        self.store = store
        self.history = {step.position: step for step in store.steps(self.id)}
        self.bytes = sum(step.size for step in self.history.values())
        self.position = 0

    def next(self, kind: StepKind, name: str) -> tuple[int, StepRecord | None]:
        """Take the next position for ``kind`` ``name``: it and its record, if any."""
        position = self.position
        self.position += 1
        return position, check_replay(self.history.get(position), kind, name, self.name)

    def record(self, step: StepRecord, *, store: Staged | None = None) -> StepRecord:
        """Record ``step`` (within a transaction's ``store``, when given); the record
        kept (another holder's, if it recorded the position first)."""
        check_bound(step.position, self.bytes + step.size, self.name)
        stored = (store or self.store).record_step(step, self.token)
        self.history[step.position] = stored
        self.bytes += stored.size
        return stored

    def sized(self, step: StepRecord, what: str) -> StepRecord:
        """``step`` with its value's size; a clear error when the value is not BSON."""
        try:
            data = codec.encode_value(self.name, what, step.value, codec.MAX_VALUE_BYTES)
        except SerializationError as exc:  # fails the workflow at once: it would again
            raise WorkflowError(f"workflow {exc}") from exc
        return replace(step, size=len(data))

    def fresh_events(self, topic: str) -> list[tuple[Any, Any]]:
        """The events on ``topic`` that no recorded wait received yet, oldest first."""
        taken = {s.event for s in self.history.values() if s.kind is StepKind.EVENT}
        return [e for e in self.store.events(self.id, topic) if e[0] not in taken]

    def suspend(self, suspend: _Suspend) -> None:
        """Write the workflow's job back pending until it is to wake up, fenced on its
        lease, and free the thread; a cancel asked meanwhile ends it cancelled."""
        ctx, store, now = self.ctx, self.store, self.owner.app.now()
        ctx.finish_lease()
        record = self.job
        back = replace(given_back(record, now), run_at=max(suspend.until, now))
        back = replace(back, on_cancel=cancelled(now, self.owner.app.retention))
        stored = store.settle(record, back)
        if stored is None:
            log.warning("workflow %s (%s): its lease was lost before it slept", self.id, self.name)
        elif suspend.topic is not None and self.fresh_events(suspend.topic):
            # An event sent while it was writing: its sender may have found it running.
            self.owner.wake(self.id)
        raise Suspended(f"workflow {self.id} waits until {suspend.until.isoformat()}")


_active: contextvars.ContextVar[Replay | None] = contextvars.ContextVar(
    "mongosched_workflow", default=None
)


def _replay() -> Replay | None:
    return _active.get()


@dataclass
class Step(Generic[P, R]):
    """A function registered with :meth:`App.step <mongosched.App.step>`: called in a
    workflow, it runs once and its result is recorded; called elsewhere, it is a plain
    call."""

    owner: Workflows
    fn: Callable[P, R]
    name: str
    retry: RetryPolicy
    transactional: bool = False

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R:
        replay = _replay()
        if replay is None:
            return self.fn(*args, **kwargs)
        position, recorded = replay.next(StepKind.STEP, self.name)
        if recorded is None:
            recorded = self._run(replay, position, args, kwargs)
        if recorded.error is not None:
            raise StepFailed(
                f"workflow {replay.name!r}: step {self.name!r} failed: "
                f"{recorded.error.get('type')}: {recorded.error.get('message')}",
                recorded.error.get("type", ""),
            )
        return recorded.value  # type: ignore[no-any-return]  # as stored: through BSON

    def _run(
        self, replay: Replay, position: int, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> StepRecord:
        app = self.owner.app
        started = app.now()
        attempts = 0
        while True:
            attempts += 1
            try:
                if self.transactional:
                    return self._in_transaction(replay, position, started, attempts, args, kwargs)
                result = self.fn(*args, **kwargs)
            except (WorkflowError, ConfigurationError):
                raise
            except Exception as exc:
                if self.retry.should_retry(exc, attempts):
                    time.sleep(self.retry.delay_for(attempts).total_seconds())
                    continue
                info = error_info(exc, with_traceback=False)
                failed = StepRecord(
                    replay.id,
                    position,
                    self.name,
                    error={"type": info.type, "message": info.message},
                    attempts=attempts,
                    started_at=started,
                    finished_at=app.now(),
                )
                return replay.record(failed)
            return replay.record(self._done(replay, position, result, attempts, started))

    def _done(
        self, replay: Replay, position: int, result: Any, attempts: int, started: datetime
    ) -> StepRecord:
        """The record of the step's success (its result checked: BSON, sized)."""
        step = StepRecord(
            replay.id,
            position,
            self.name,
            value=result,
            attempts=attempts,
            started_at=started,
            finished_at=self.owner.app.now(),
        )
        return replay.sized(step, f"the result of step {self.name!r} (position {position})")

    def _in_transaction(
        self,
        replay: Replay,
        position: int,
        started: datetime,
        attempts: int,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
    ) -> StepRecord:
        """Run the step in a transaction whose commit also records it, fenced on the
        workflow's lease: its MongoDB writes and its record land together or not at
        all. A transient conflict runs it again."""
        store = replay.store
        last: Exception | None = None
        for _ in range(100):
            # The heartbeat pauses: a renewal of the job's document would conflict
            # with the transaction's fenced write of it.
            if not replay.ctx.hold_lease(TRANSACTION_LEASE):
                raise WorkflowError(
                    f"workflow {replay.name!r} ({replay.id}): its lease was lost before "
                    f"step {self.name!r}"
                )
            tx = Transaction(store, store.begin(), owned=True)
            replay.ctx.transaction = tx
            try:
                with as_current(tx):
                    result = self.fn(*args, **kwargs)
                step = self._done(replay, position, result, attempts, started)
                if tx.session is None:  # memory://: no writes of its own to commit
                    tx.commit()
                    return replay.record(step)
                inside = store.within(tx.handle)
                if not inside.fence_workflow(replay.id, replay.token, self.owner.app.now()):
                    raise WorkflowError(
                        f"workflow {replay.name!r} ({replay.id}): its lease was lost "
                        f"during step {self.name!r}; nothing of it was committed"
                    )
                stored = replay.record(step, store=inside)
                tx.commit()
                return stored
            except BaseException as exc:
                tx.abort()
                if isinstance(exc, Exception) and tx.handle.retryable(exc):
                    last = exc
                    continue
                raise
            finally:
                replay.ctx.transaction = None
                replay.ctx.resume_lease()
                tx.handle.end()
        raise WorkflowError(
            f"workflow {replay.name!r}: step {self.name!r} kept conflicting (last: {last})"
        )


def patched(name: str) -> bool:
    """Whether the code after a change named ``name`` runs: True in a workflow that
    started with it (the marker is recorded), False in one recorded before the change
    (its history holds another step at this position, which is left to it). Outside a
    workflow, True."""
    replay = _replay()
    if replay is None:
        return True
    recorded = replay.history.get(replay.position)
    if recorded is not None and (recorded.kind is not StepKind.PATCH or recorded.name != name):
        return False  # recorded before the change: the old code's step is there
    replay.position += 1
    if recorded is None:
        replay.record(StepRecord(replay.id, replay.position - 1, name, kind=StepKind.PATCH))
    return True


class Workflows:
    """An app's durable workflows: what :meth:`App.workflow <mongosched.App.workflow>`,
    :meth:`App.step <mongosched.App.step>`, :meth:`App.sleep <mongosched.App.sleep>`,
    :meth:`App.wait_for <mongosched.App.wait_for>`, :meth:`App.send
    <mongosched.App.send>`, :meth:`App.gather <mongosched.App.gather>` and the event
    methods are."""

    def __init__(self, app: WorkflowHost, wake_runners: Callable[[], None]) -> None:
        self.app = app
        self.wake_runners = wake_runners
        """Wakes this process's runners (a workflow made due claims at once)."""
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
            step: Step[P, R] = Step(self, fn, step_name, policy, transactional)
            functools.update_wrapper(step, fn)
            return step

        return register

    def _run(
        self, name: str, fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> Any:
        ctx = current_job()
        if ctx is None or ctx.task != name or ctx.lease_record is None or _replay() is not None:
            return fn(*args, **kwargs)  # inline: outside a runner, or nested
        replay = Replay(self, ctx, name)
        token = _active.set(replay)
        try:
            return fn(*args, **kwargs)
        except _Suspend as suspend:
            replay.suspend(suspend)
            raise AssertionError("unreachable") from None  # suspend raises
        finally:
            _active.reset(token)

    def is_workflow(self, task: str) -> bool:
        """Whether ``task`` (a registered task's name, as a job's ``task``) is a
        workflow of this app."""
        return task in self.names

    # Inside a workflow -----------------------------------------------------------------------
    def sleep(self, duration: timedelta | float) -> None:
        """Sleep durably: the worker is freed and the workflow runs on after
        ``duration`` (seconds or a timedelta), whatever restarts meanwhile."""
        seconds = _seconds(duration, "sleep")
        replay = _replay()
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
            raise _Suspend(recorded.until)

    def wait_for(self, topic: str, timeout: timedelta | float | None = None) -> Any:
        """Wait durably for an event on ``topic`` sent to this workflow with
        :meth:`send` (one sent before the wait is kept for it; each event is received
        once). Returns its value, or None after ``timeout``."""
        replay = _replay()
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
                raise _Suspend(waited.until, topic)
            event, value = fresh[0] if fresh else (None, None)
            step = StepRecord(replay.id, position, topic, StepKind.EVENT, value=value, event=event)
            received = replay.record(replay.sized(step, f"the event {topic!r}"))
        return received.value

    def gather(self, specs: Iterable[JobSpec]) -> list[Any]:
        """Schedule ``specs`` (``task.job(...)``) and wait durably for every one to end;
        returns their results in order. A job that did not complete raises
        :class:`~mongosched.errors.StepFailed`. Outside a workflow, they are scheduled
        and waited for in the thread."""
        replay = _replay()
        if replay is None:
            jobs = self.app.schedule_bulk(list(specs))
            return [_result(job.wait(), "gather") for job in jobs]
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
            jobs = [self._get(child) for child in scheduled.children]
            if not all(job.status.is_final for job in jobs):
                raise _Suspend(self.app.now() + GATHER_POLL)
            results = [{"status": str(job.status), "result": job.result} for job in jobs]
            step = StepRecord(replay.id, position, "gather", StepKind.GATHERED, value=results)
            gathered = replay.record(replay.sized(step, "the gathered results"))
        return [_outcome(item) for item in gathered.value]

    def _get(self, job_id: Any) -> Job[Any]:
        record = self.app.store.get(job_id)
        if record is None:
            raise JobNotFound(f"gathered job {job_id} no longer exists")
        return Job(record, self.app.store)

    # Events ----------------------------------------------------------------------------------
    def send(self, workflow_id: Any, topic: str, value: Any = None) -> None:
        """Send an event (``topic``, ``value``) to a workflow, from anywhere: kept for
        its :meth:`wait_for`, and the workflow woken if it waits for ``topic``."""
        store = self.app.store
        workflow_id = store.parse_id(workflow_id)
        store.send_event(workflow_id, topic, value, self.app.now())
        waits = [s for s in store.steps(workflow_id) if s.kind is StepKind.WAIT and s.name == topic]
        if waits:
            self.wake(workflow_id)

    def set_event(self, key: str, value: Any) -> None:
        """Publish ``value`` under ``key`` for callers of :meth:`get_event` (the
        latest published value wins)."""
        ctx, replay = current_job(), _replay()
        if ctx is None:
            raise WorkflowError(f"set_event({key!r}) is for a running workflow")
        if replay is None:
            self.app.store.send_event(ctx.id, f"published:{key}", value, self.app.now())
            return
        position, recorded = replay.next(StepKind.PUBLISH, key)
        if recorded is None:  # published first: a crash before the record publishes again
            self.app.store.send_event(ctx.id, f"published:{key}", value, self.app.now())
            replay.record(StepRecord(replay.id, position, key, StepKind.PUBLISH))

    def get_event(self, workflow_id: Any, key: str, default: Any = None) -> Any:
        """The value a workflow last published under ``key`` (``default``: none yet)."""
        store = self.app.store
        published = store.events(store.parse_id(workflow_id), f"published:{key}")
        return published[-1][1] if published else default

    def steps(self, workflow_id: Any) -> list[StepRecord]:
        """A workflow's recorded history, in order (for its timeline)."""
        store = self.app.store
        return store.steps(store.parse_id(workflow_id))

    # Operators -------------------------------------------------------------------------------
    def cancel_workflow(self, workflow_id: Any, *, actor: str | None = None) -> Cancellation:
        """Cancel a workflow as :meth:`App.cancel <mongosched.App.cancel>` does, and
        the jobs it gathered that have not ended (each cancel in the audit trail).
        ``actor``: who did it."""
        store = self.app.store
        workflow_id = self._require(workflow_id, "cancel_workflow", actor).id
        done = self.app.cancel(workflow_id, actor=actor)
        for step in store.steps(workflow_id):
            for child in step.children if step.kind is StepKind.GATHER else ():
                record = store.get(child)
                if record is not None and not record.status.is_final:
                    self.app.cancel(child, actor=actor)
        return done

    def retry_workflow(self, workflow_id: Any, *, actor: str | None = None) -> Job[Any]:
        """Run a failed (or cancelled) workflow again from its failed step: the records
        from that step on are forgotten (all of them when none failed), the earlier
        ones kept. Audited as :meth:`App.retry_job <mongosched.App.retry_job>` is."""
        store = self.app.store
        workflow_id = self._require(workflow_id, "retry_workflow", actor).id
        failed = [s.position for s in store.steps(workflow_id) if s.error is not None]
        if failed:
            store.forget_steps(workflow_id, failed[0])
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
        for step in store.steps(record.id):
            if step.position < position:
                store.record_step(replace(step, workflow=job.id), None)
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
        record = store.get(store.parse_id(workflow_id))
        if record is None or not self.is_workflow(record.task):
            raise JobNotFound(f"{what}: workflow {workflow_id} does not exist in this app")
        return record

    # Waking ----------------------------------------------------------------------------------
    def wake(self, workflow_id: Any) -> bool:
        """Make a waiting workflow due now; False when it is not pending."""
        store, now = self.app.store, self.app.now()
        record = store.get(workflow_id)
        if record is None or record.status is not JobStatus.PENDING or record.run_at <= now:
            return False
        if store.update_pending(record, PendingChanges(run_at=now), now) is None:
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


def _result(job: Job[Any], what: str) -> Any:
    return _outcome({"status": str(job.status), "result": job.result})
