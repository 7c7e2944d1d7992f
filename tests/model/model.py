"""A reference model of a job's life, written from the documentation (docs/*.rst), not
from the stores: what each public operation does to the set of jobs, given the time.

Pure: no store, no threads, no clock of its own (every operation is given ``now``).
The stateful test (tests/model/test_machine.py) holds both stores to it after every
step. Where the docs are silent, the model decides, and says so in a comment marked
``DECIDED``; docs/contributing.rst lists those decisions.

Jobs are known by a *handle*, their order of creation (the stores' ids differ).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any

from mongosched import Cron, Every

CRON = Cron("*/2 * * * *", timezone="Asia/Kolkata")
"""The cron rule of the machine's ``Options(cron=True)``: every even minute of a zone
whose offset (+05:30) is a whole number of its periods, so that its slots are the
multiples of :data:`CRON_PERIOD` seconds since the epoch (an interval's count from
its first slot)."""
CRON_PERIOD = 120.0

FINAL = frozenset({"completed", "failed", "cancelled", "expired"})
UNFINISHED = frozenset({"pending", "running", "paused", "waiting"})
ENDINGS = ("ok", "error", "fail", "overrun")
"""How a run ends: returns; raises (retried while attempts remain); raises ``Fail``
(never retried); overruns (interrupted by ``JobTimeout`` when it has a timeout,
else it returns late)."""


class Refused(Exception):
    """The operation is refused (a store raises a MongoschedError)."""


@dataclass(frozen=True)
class TaskSpec:
    """What the model needs of a task's declaration."""

    name: str
    retries: int = 1  # attempts = retries + 1; retried at once (retry=int: no delay)
    priority: float = 5
    aging: float | None = None  # seconds per level
    fair: bool = False  # fair_key: the job's first argument
    weights: tuple[tuple[str, float], ...] = ()
    backoff: str = "fixed"  # a RetryPolicy's (retry=int: "fixed", no delay)
    delay: float = 0.0
    max_delay: float | None = None
    timeout: float | None = None  # the task's own (a job's configure() wins)
    pause_after: int | None = None  # a repeating job of it pauses after so many failures
    misfire: str = "coalesce"  # cron.rst "Missed slots": coalesce, skip or all
    grace: float | None = None  # misfire_grace
    catchup: int = 100  # max_catchup
    jitter: float | None = None  # cron.rst "Jitter"
    overlap: str = "skip"  # cron.rst "Overlapping runs"
    declared: float | None = None  # its own schedule's period (every=, or CRON's if cron)
    cron: bool = False  # its declared rule is CRON

    def delay_for(self, attempt: int) -> float:
        """retry.py ``RetryPolicy.delay_for`` (no jitter): after attempt ``attempt``."""
        if self.backoff == "linear":
            seconds = self.delay * attempt
        elif self.backoff == "exponential":
            seconds = self.delay * 2.0 ** (attempt - 1)
        else:
            seconds = self.delay
        return seconds if self.max_delay is None else min(seconds, self.max_delay)

    @property
    def ranked(self) -> bool:
        return self.aging is not None or self.fair

    def weight(self, key: str) -> float:
        return dict(self.weights).get(key, 1.0)


@dataclass(frozen=True)
class Slots:
    """How a repeating job's slots run (cron.rst), beyond its rule: its task's misfire
    policy, jitter and overlap policy, and a backfill lane's last slot."""

    misfire: str = "coalesce"
    grace: float | None = None
    catchup: int = 100
    jitter: float | None = None
    overlap: str = "skip"
    pause_after: int | None = None
    until: datetime | None = None  # a backfill lane: it ends after this slot
    key: str | None = None  # what its jitter is drawn from (with the slot)

    @property
    def spawns(self) -> bool:
        """``allow`` and ``cancel_running``: each slot runs as a job of its own."""
        return self.overlap in ("allow", "cancel_running")

    @property
    def tolerance(self) -> float | None:
        """How late a slot may start: the grace; ``skip``'s default is 60 s."""
        if self.grace is not None:
            return self.grace
        return 60.0 if self.misfire == "skip" else None


@dataclass
class MJob:
    handle: int
    task: str
    args: list[Any]
    queue: str
    priority: float
    run_at: datetime
    created_at: datetime
    max_attempts: int
    status: str = "pending"
    attempts: int = 0
    label: str | None = None
    dedupe_key: str | None = None
    scope: str | None = None  # "active" or "pending" while the key is held
    made_scope: str | None = None  # the scope it was made with (taken again on retry)
    window_until: datetime | None = None  # a throttle window holds the key till then
    expires_at: datetime | None = None
    finished_at: datetime | None = None
    delete_at: datetime | None = None
    rank: float | None = None  # aging: due + (priority - 1) intervals; fair: the fair start
    fair_key: str | None = None
    holder: str | None = None  # the runner holding its lease
    until: datetime | None = None
    cancel_requested: bool = False
    timeout: float | None = None  # its own (what runs it: its own, else its task's)
    waiting_for: list[int] = field(default_factory=list)  # handles of its dependencies
    run_anyway: bool = False  # on_dependency_failure="run"
    every: float | None = None  # a repeating job's interval (a cron rule's period)
    aligned: bool = False  # a cron rule's: its slots are multiples of the period
    scheduled_for: datetime | None = None  # its slot (a trigger's run: the trigger's time)
    started_at: datetime | None = None
    failures: int = 0  # a repeating job's failed runs in a row
    slots: Slots | None = None  # a repeating job's (see Slots)
    run_of: int | None = None  # a slot's run of its own: the schedule's handle


@dataclass
class Options:
    """The options of one ``configure(...)`` call the machine makes."""

    delay: float = 0.0
    priority: float | None = None
    queue: str = "default"
    label: str | None = None
    dedupe_key: str | None = None
    dedupe_scope: str = "active"
    dedupe_window: float | None = None
    replace: bool = False
    expires: float | None = None
    timeout: float | None = None
    after: tuple[int, ...] = ()  # depends_on: the machine's picks (handles, for the model)
    run_anyway: bool = False  # on_dependency_failure="run"
    every: float | None = None  # repeat=Every(seconds=every)
    cron: bool = False  # repeat=CRON (instead of every)

    @property
    def repeats(self) -> bool:
        return self.cron or self.every is not None

    def configure(self, depends_on: list[Any] | None = None) -> dict[str, Any]:
        """The keyword arguments of ``Task.configure`` these stand for (``depends_on``:
        the store's ids of the jobs :attr:`after` names)."""
        out: dict[str, Any] = {"delay": self.delay, "queue": self.queue}
        if self.timeout is not None:
            out["timeout"] = self.timeout
        if depends_on:
            out["depends_on"] = depends_on
            if self.run_anyway:
                out["on_dependency_failure"] = "run"
        if self.cron:
            out["repeat"] = CRON
        elif self.every is not None:
            out["repeat"] = Every(seconds=self.every)
        if self.priority is not None:
            out["priority"] = self.priority
        if self.label is not None:
            out["label"] = self.label
        if self.dedupe_key is not None:
            out["dedupe_key"] = self.dedupe_key
            if self.replace:
                out["dedupe"] = "replace"
            else:
                out["dedupe_scope"] = self.dedupe_scope
            if self.dedupe_window is not None:
                out["dedupe_window"] = self.dedupe_window
        if self.expires is not None:
            out["expires"] = timedelta(seconds=self.expires)
        return out


@dataclass
class Model:
    tasks: dict[str, TaskSpec]
    lease: float
    keep_completed: float | None
    keep_failed: float | None
    replace_carries_options: bool = True  # issue 32 item 2 (False: as before its fix)
    rank_ties_by_due: bool = True  # finding N2 (False: ties in the order jobs were made)
    sweep_held: bool = True  # finding N4 (False: the sweep leaves held jobs paused)
    offset: Callable[[str, datetime, float], float] | None = None
    """A jittered slot's offset in seconds (key, slot, jitter): cron.rst says only
    that it is drawn from a hash of the schedule and the slot, between 0 and the
    jitter; the test gives the draw (the model checks the bound)."""
    missed_by_start: bool = True  # finding S1 (False: a slot not started yet is missed)
    lane_failures: bool = True  # finding S2 (False: a lane's end forgets its failures)
    made: int = 0
    jobs: dict[int, MJob] = field(default_factory=dict)
    pauses: set[tuple[str, str]] = field(default_factory=set)  # (kind, name)
    views: dict[str, frozenset[tuple[str, str]] | None] = field(default_factory=dict)
    listed: dict[str, frozenset[str]] = field(default_factory=dict)
    fair_last: dict[tuple[str, str], float] = field(default_factory=dict)
    fair_clock: dict[str, float] = field(default_factory=dict)  # start of the last claimed

    # Reading -----------------------------------------------------------------------------
    def live(self) -> list[MJob]:
        return list(self.jobs.values())

    def window_holder(self, task: str, key: str, now: datetime) -> MJob | None:
        """The job whose throttle window holds ``key`` now."""
        for job in self.jobs.values():
            if job.task == task and job.dedupe_key == key and job.window_until is not None:
                if job.window_until > now:
                    return job
        return None

    def key_holder(
        self, task: str, key: str, scope: str, now: datetime, window: bool
    ) -> MJob | None:
        """The job that holds ``key`` in ``scope`` for a new call (concepts.rst "Dedupe",
        flow-control.rst "Throttle windows"). DECIDED (docs silent; the stores agree):
        the two scopes of one key are independent, as their fields and indexes are."""
        for job in self.jobs.values():
            if job.task != task or job.dedupe_key != key:
                continue
            if window and job.window_until is not None and job.window_until > now:
                return job  # "a call within the window returns the job that holds it"
            if job.scope == scope and _holds(job):
                return job
        return None

    # Scheduling --------------------------------------------------------------------------
    def refusal(self, task: str, o: Options, now: datetime) -> str | None:
        """Why scheduling ``task`` with ``o`` is refused now (None: it is not):
        flow-control.rst ("Expiry", "Dependencies"), cron.rst (a repeating job)."""
        spec = self.tasks[task]
        run_at = now + timedelta(seconds=o.delay)
        if o.expires is not None and now + timedelta(seconds=o.expires) <= run_at:
            return "expires must be after the job is due"
        if o.repeats:
            if spec.ranked:
                return "a repeating task neither ages nor shares"
            if o.expires is not None or o.after:
                return "a repeating job takes neither expires nor depends_on"
            if o.label is not None:
                return "a repeating job takes no label"
        if o.after and o.dedupe_key is not None:
            return "depends_on and dedupe_key cannot be combined"
        return None

    def schedule(self, task: str, args: list[Any], o: Options, now: datetime) -> int:
        why = self.refusal(task, o, now)
        if why is not None:
            raise Refused(why)
        spec = self.tasks[task]
        run_at = now + timedelta(seconds=o.delay)
        if o.cron:  # cron.rst: a cron rule's first slot is its first at or after the start
            run_at = _aligned(run_at, CRON_PERIOD)
        priority = spec.priority if o.priority is None else o.priority
        expires_at = None if o.expires is None else now + timedelta(seconds=o.expires)
        scope = "pending" if o.replace else o.dedupe_scope
        if o.dedupe_key is not None:
            held = self.key_holder(task, o.dedupe_key, scope, now, o.dedupe_window is not None)
            if held is not None:
                in_window = (
                    o.dedupe_window is not None
                    and held.window_until is not None
                    and held.window_until > now
                )  # only calls that give a window are held by one
                if o.replace and held.status in ("pending", "paused") and not in_window:
                    # Debounce: the last call wins. Issue 32 item 2: a replacement
                    # carries every option of the new call that describes the job
                    # (arguments, due time, expiry, priority, label, timeout); the rank
                    # stays (flow-control.rst: "a debounce does not move it").
                    held.args, held.run_at = list(args), run_at
                    if self.replace_carries_options:
                        held.expires_at, held.priority = expires_at, priority
                        if held.status == "paused" and held.every is None:
                            # DECIDED (N7): a label's hold ends with the label; a
                            # runner holds it again at its claim if the new one is
                            # paused (flow-control.rst, "Debounce")
                            held.status = "pending" if held.label != o.label else "paused"
                        held.label, held.timeout = o.label, o.timeout
                    return held.handle
                if in_window or not o.replace or held.status != "running":
                    return held.handle  # "a call within the window returns" its holder
                # a running job is not touched: the new job waits behind it
        handle = self.made
        self.made += 1
        job = MJob(
            handle=handle,
            task=task,
            args=list(args),
            queue=o.queue,
            priority=priority,
            run_at=run_at,
            created_at=now,
            max_attempts=spec.retries + 1,
            label=o.label,
            dedupe_key=o.dedupe_key,
            scope=None if o.dedupe_key is None else scope,
            made_scope=None if o.dedupe_key is None else scope,
            window_until=None
            if o.dedupe_window is None or o.dedupe_key is None
            else now + timedelta(seconds=o.dedupe_window),
            expires_at=expires_at,
            timeout=o.timeout,
            waiting_for=list(dict.fromkeys(o.after)),
            run_anyway=o.run_anyway,
            every=CRON_PERIOD if o.cron else o.every,
            aligned=o.cron,
        )
        if o.repeats:
            # cron.rst: an explicit start (a delay given) is an interval's first slot.
            job.scheduled_for = run_at
            job.slots = self._slots_of(spec, None)
            assert job.slots.jitter is None, "the model draws no jitter of a job's own"
        if spec.aging is not None:
            job.rank = _ms(run_at) + (priority - 1) * spec.aging * 1000
        elif spec.fair:
            job.fair_key = str(args[0])
            if run_at <= now:  # else unplaced until due (see _place)
                job.rank = self._fair_start(spec, job.fair_key, now)
        self.jobs[handle] = job
        if job.waiting_for:
            # flow-control.rst "Dependencies": stored waiting; dependencies already
            # final are resolved at once.
            job.status = "waiting"
            for parent in list(job.waiting_for):
                if self.jobs[parent].status in FINAL:
                    self._release(job, self.jobs[parent], now)
        return handle

    def _slots_of(self, spec: TaskSpec, key: str | None) -> Slots:
        return Slots(
            misfire=spec.misfire,
            grace=spec.grace,
            catchup=spec.catchup,
            jitter=spec.jitter if key is not None else None,
            overlap=spec.overlap,
            pause_after=spec.pause_after,
            key=key,
        )

    def declare(self, now: datetime) -> list[int]:
        """``app.ensure_schedules()`` (cron.rst "Declaring them"): each task declared
        with a rule has one schedule, made once, first due at its first slot after
        now (jittered: its key is the schedule's stable id). Returns the new handles."""
        made = []
        for spec in self.tasks.values():
            if spec.declared is None or any(
                j.slots is not None and j.slots.key == f"schedule:{spec.name}"
                for j in self.jobs.values()
            ):
                continue
            handle = self.made
            self.made += 1
            job = MJob(
                handle=handle,
                task=spec.name,
                args=[],
                queue="default",
                priority=spec.priority,
                run_at=now,
                created_at=now,
                max_attempts=spec.retries + 1,
                every=spec.declared,
                aligned=spec.cron,
                slots=self._slots_of(spec, f"schedule:{spec.name}"),
            )
            job.scheduled_for = _next_after(job, now)
            job.run_at = self._start(job, job.scheduled_for)
            self.jobs[handle] = job
            made.append(handle)
        return made

    def _start(self, job: MJob, slot: datetime) -> datetime:
        """cron.rst "Jitter": when the run of ``slot`` is due: the slot plus an offset
        in [0, jitter)."""
        jitter = None if job.slots is None else job.slots.jitter
        if not jitter:
            return slot
        assert self.offset is not None and job.slots is not None and job.slots.key
        offset = self.offset(job.slots.key, slot, jitter)
        assert 0 <= offset < jitter, f"a jitter offset of {offset} s is out of [0, {jitter})"
        return slot + timedelta(seconds=offset)

    def backfill(
        self, handle: int, start: datetime, end: datetime, at_once: int, now: datetime
    ) -> list[int]:
        """cron.rst "Run now, and backfill": the slots of ``start``..``end`` run on
        ``at_once`` lanes (repeating jobs of consecutive parts of the range, each
        running its slots one after another and ending after its last); slots that
        an unfinished lane of the schedule still has to run are left out, and asking
        again for a range whose every slot is on a lane returns those lanes. A finished
        schedule is refused. DECIDED (docs: "near-equal"): a part cut off by running
        lanes gets lanes in proportion to its slots, at least one."""
        schedule = self.jobs[handle]
        if schedule.status in FINAL:
            raise Refused(f"backfill of a {schedule.status} schedule")
        assert schedule.every is not None and schedule.slots is not None
        lanes = [
            j
            for j in self.jobs.values()
            if j.slots is not None
            and j.slots.until is not None
            and j.run_of == handle
            and j.status in ("pending", "running", "paused")
        ]
        spans = [(j.scheduled_for, j.slots.until) for j in lanes if j.slots is not None]
        slots = _slots_between(schedule, start, end)
        parts: list[list[datetime]] = [[]]
        for slot in slots:
            if any(a is not None and a <= slot <= b for a, b in spans):
                parts.append([])
            else:
                parts[-1].append(slot)
        parts = [p for p in parts if p]
        total = sum(map(len, parts))
        made = []
        for part in parts:
            n = max(1, min(len(part), round(at_once * len(part) / total)))
            for i in range(n):
                cut = part[len(part) * i // n : len(part) * (i + 1) // n]
                lane = self._run_job(schedule, cut[0], now, f"backfill@{cut[0]}..{cut[-1]}")
                lane.every, lane.aligned = schedule.every, schedule.aligned
                lane.slots = Slots(misfire="all", catchup=len(cut), until=cut[-1])
                made.append(lane.handle)
        if made:
            return made
        meeting = [
            j
            for j in lanes
            if j.scheduled_for is not None
            and j.slots is not None
            and j.slots.until is not None
            and j.scheduled_for <= end
            and j.slots.until >= start
        ]
        return [j.handle for j in sorted(meeting, key=lambda j: j.scheduled_for or now)]

    def _run_job(self, schedule: MJob, slot: datetime, now: datetime, key: str | None) -> MJob:
        """A job of its own that runs ``schedule``'s ``slot``, due now, with its
        payload, queue, priority and attempts (cron.rst); ``key``: held ``active``."""
        made = self.made
        self.made += 1
        job = self.jobs[made] = MJob(
            handle=made,
            task=schedule.task,
            args=list(schedule.args),
            queue=schedule.queue,
            priority=schedule.priority,
            run_at=now,
            created_at=now,
            max_attempts=schedule.max_attempts,
            timeout=schedule.timeout,
            scheduled_for=slot,
            run_of=schedule.handle,
        )
        if key is not None:
            job.dedupe_key = f"{schedule.handle}:{key}"
            job.scope = job.made_scope = "active"
        return job

    def trigger(self, handle: int, now: datetime) -> int:
        """cron.rst "Run now": a job of its own, due now, with the schedule's payload,
        queue, priority and attempts, for the slot "now"; the schedule does not move.
        A schedule that ended (cancelled: "stops it for good") is refused."""
        schedule = self.jobs[handle]
        if schedule.status in FINAL:
            raise Refused(f"trigger of a {schedule.status} schedule")
        return self._run_job(schedule, now, now, None).handle

    def _fair_start(self, spec: TaskSpec, key: str, now: datetime) -> float:
        """Start-time fair queueing (flow-control.rst, "Fair shares across keys"): a
        key's jobs follow one another a step apart (1 ms / weight); a new key starts at
        the task's fair clock: the later of the start of its first due pending job and
        the latest start claimed (when nothing is due, the time now)."""
        due = [
            j.rank
            for j in self.jobs.values()
            if j.task == spec.name and j.status == "pending" and j.run_at <= now
            if j.rank is not None
        ]
        claimed = self.fair_clock.get(spec.name)
        if due:
            clock = min(due) if claimed is None else max(min(due), claimed)
        else:
            clock = _ms(now)
        last = self.fair_last.get((spec.name, key))
        start = clock if last is None else max(clock, last + 1.0 / spec.weight(key))
        self.fair_last[(spec.name, key)] = start
        return start

    def _place(self, now: datetime) -> None:
        """A fair job due later than it was made waits unplaced; the first claim that
        finds it due gives it its start from the fair clock of then (in due order)."""
        unplaced = [
            j
            for j in self.jobs.values()
            if j.fair_key is not None and j.rank is None and j.status == "pending"
        ]
        for job in sorted(unplaced, key=lambda j: (j.run_at, j.handle)):
            if job.run_at <= now:
                job.rank = self._fair_start(self.tasks[job.task], job.fair_key, now)

    # Claims and runs -------------------------------------------------------------------
    def _claim_order(self, job: MJob, now: datetime) -> tuple[float, float, bool, int, int]:
        """How claims compare jobs (concepts.rst; flow-control.rst, "Priority aging"):
        by effective priority, then due time (a fair job's: its fair start, kept
        across its retries, as _core/ranks.py merges them), then (DECIDED, docs
        silent, as the stores do) an unranked job before a ranked one, ranked jobs of
        different tasks in the order the tasks were registered, then the order they
        were made."""
        spec = self.tasks[job.task]
        effective, due = job.priority, _ms(job.run_at)
        if spec.aging is not None and job.rank is not None:
            # The rank is when the effective priority reaches 1, fixed when the job is
            # made (an edit of its priority or a retry's delay does not move it).
            effective = 1 + (job.rank - _ms(now)) / (spec.aging * 1000)
        elif spec.fair and job.rank is not None:
            due = job.rank
        ranked = job.rank is not None
        order = list(self.tasks).index(job.task) if ranked else 0
        return (effective, due, ranked, order, job.handle)

    def next_claim(
        self, runner: str, now: datetime, taken: frozenset[int] = frozenset()
    ) -> MJob | None:
        """The job a runner's claim takes now, given the pauses it last read (``taken``:
        jobs a batched claim took already)."""
        self._place(now)
        view = self.views.get(runner)
        if view is None:
            view = self._read_pauses(runner)
        queue_paused = any(kind == "queue" for kind, _ in view)
        listed = self.listed.get(runner, frozenset())
        due = [
            j
            for j in self.jobs.values()
            if j.status == "pending"
            and j.handle not in taken
            and j.run_at <= now
            and ("task", j.task) not in view
            and ("queue", j.queue) not in view
            and (not queue_paused or j.queue in listed)
        ]
        heads = []
        for name in {j.task for j in due}:
            of_task = [j for j in due if j.task == name]
            spec = self.tasks[name]
            if spec.fair:  # priority first, then the fair start
                # (its start is kept; an edit of its priority counts)
                heads.append(min(of_task, key=lambda j: (j.priority, j.rank or 0, j.handle)))
            elif spec.aging is not None and not self.rank_ties_by_due:
                heads.append(min(of_task, key=lambda j: (j.rank or 0, j.handle)))
            else:  # aging: the rank's order (then the due time); others by priority
                heads.append(min(of_task, key=lambda j: self._claim_order(j, now)))
        return min(heads, key=lambda j: self._claim_order(j, now)) if heads else None

    def _read_pauses(self, runner: str) -> frozenset[tuple[str, str]]:
        """A runner reads the pauses (at its first claim, and again when a hold finds
        its pause gone)."""
        view = self.views[runner] = frozenset(self.pauses)
        # operations.rst: while a queue is paused, a runner serving every queue
        # claims from the queues that held pending jobs when it read the pauses.
        self.listed[runner] = frozenset(
            j.queue for j in self.jobs.values() if j.status == "pending"
        )
        return view

    def sweep(self, now: datetime) -> None:
        """The reaper's sweep: pending, waiting (and, DECIDED, label-held ``paused``)
        jobs past their expiry end ``expired``."""
        swept = ("pending", "waiting", "paused") if self.sweep_held else ("pending", "waiting")
        for job in self.jobs.values():
            if job.status in swept and _expired(job, now):
                self._finish(job, "expired", now)

    def run(
        self, runner: str, limit: int, ending: str, now: datetime, takes: float = 0.0
    ) -> list[int]:
        """``drain``-like steps of one runner (testing.rst): the sweep, then claim and
        run due jobs one at a time, each ending as ``ending`` says (see
        :data:`ENDINGS`) ``takes`` seconds after it started, until ``limit`` claims
        ran or none is due (a repeating job's claim that runs nothing counts). Returns
        the handles run, in order."""
        self.sweep(now)
        ran: list[int] = []
        claims = 0
        while claims < limit:
            job = self._claim(runner, now)
            if job is None:
                break
            if job.status != "running":
                continue
            claims += 1
            now = self._run_one(job, ending, now, takes, ran)
        return ran

    def run_batch(self, runner: str, limit: int, ending: str, now: datetime) -> list[int]:
        """A runner's dispatcher with a backlog (runner.rst): the sweep, then one
        batched claim of up to ``limit`` due jobs, all taken at once in claim order
        with the pauses as the runner last read them; then each is admitted in turn
        (past its expiry it ends; its label's pause holds it) and the jobs admitted run
        one after another. Returns the handles run, in order."""
        self.sweep(now)
        taken: list[MJob] = []
        while len(taken) < limit:
            job = self.next_claim(runner, now, frozenset(j.handle for j in taken))
            if job is None:
                break
            taken.append(job)
        admitted = [job for job in taken if self._admit(job, runner, now) == "running"]
        ran: list[int] = []
        for job in admitted:
            now = self._run_one(job, ending, now, 0.0, ran)
        return ran

    def _run_one(
        self, job: MJob, ending: str, now: datetime, takes: float, ran: list[int]
    ) -> datetime:
        """A claimed job runs (a repeating job's slot first), ending as ``ending`` says
        ``takes`` seconds later (when it runs at all); returns the time after."""
        if job.every is not None and job.attempts == 1:
            slot = self._misfire(job, now)
            if slot is None:
                return now  # moved on to a later slot without running
            job.scheduled_for = slot
            assert job.slots is not None
            if job.slots.spawns:
                self._spawn(job, slot, now)
                return now
        ran.append(job.handle)
        now += timedelta(seconds=takes)
        self.settle(job, ending, now)
        return now

    def _misfire(self, job: MJob, now: datetime) -> datetime | None:
        """cron.rst "Missed slots": a repeating job's first attempt at a slot runs for
        the slot its misfire policy picks among the slots that came due (at their
        jittered start) by now (a backfill lane: up to its last): ``coalesce`` the
        latest, ``skip`` the latest if it started within the grace (60 s unless
        given), ``all`` the earliest of the latest ``max_catchup``; the grace drops
        any that would start later than that after its start. None: nothing runs; the
        job waits for the slot after the latest (at its jittered start)."""
        assert job.scheduled_for is not None and job.slots is not None
        slots, anchor = job.slots, job.scheduled_for
        horizon = now if slots.until is None else min(now, slots.until)
        due = [anchor]
        nxt = _next_after(job, anchor)
        while nxt <= horizon and (not self.missed_by_start or self._start(job, nxt) <= now):
            due.append(nxt)
            nxt = _next_after(job, nxt)

        def on_time(slot: datetime) -> bool:
            start = self._start(job, slot)
            if slot == anchor:  # a slot it waits for from a later time: from then
                start = max(start, job.run_at)
            tolerance = slots.tolerance
            return tolerance is None or (now - start).total_seconds() <= tolerance

        if slots.misfire == "all":
            runnable = []
            for slot in reversed(due[-slots.catchup :]):
                if not on_time(slot):
                    break
                runnable.append(slot)
            if runnable:
                return runnable[-1]
        elif on_time(due[-1]):
            return due[-1]
        job.holder = job.until = None
        job.attempts = 0
        job.status, job.scheduled_for = "pending", _next_after(job, due[-1])
        job.run_at = self._start(job, job.scheduled_for)
        self._back_in_scope(job)
        return None

    def _spawn(self, job: MJob, slot: datetime, now: datetime) -> None:
        """cron.rst "Overlapping runs", ``allow`` and ``cancel_running``: the slot
        runs as a job of its own, keyed by the slot (stored once), after the runs of
        earlier slots still running were asked to stop (``cancel_running``); the
        schedule waits for its next slot, without running."""
        assert job.slots is not None
        key = f"slot@{slot.isoformat()}"
        if job.slots.overlap == "cancel_running":
            for other in self.jobs.values():
                if other.run_of == job.handle and other.status == "running":
                    if other.dedupe_key is not None and ":slot@" in other.dedupe_key:
                        other.cancel_requested = True
        if self.key_holder(job.task, f"{job.handle}:{key}", "active", now, False) is None:
            self._run_job(job, slot, now, key)
        job.holder = job.until = None
        job.status, job.attempts = "pending", 0
        job.scheduled_for = _next_after(job, slot)
        job.run_at = self._start(job, job.scheduled_for)
        self._back_in_scope(job)

    def claim_only(self, runner: str, count: int, now: datetime) -> list[int]:
        """A runner claims and then dies holding its claims (no run, no write)."""
        taken: list[int] = []
        while len(taken) < count:
            job = self._claim(runner, now)
            if job is None:
                break
            if job.status == "running":
                taken.append(job.handle)
        return taken

    def _claim(self, runner: str, now: datetime) -> MJob | None:
        """One claim: the job it took, running, or ended or held at once; None when
        nothing is due."""
        job = self.next_claim(runner, now)
        if job is not None:
            self._admit(job, runner, now)
        return job

    def _admit(self, job: MJob, runner: str, now: datetime) -> str:
        """A job claimed: running, or ended or held at once (its status after)."""
        label = None if job.label is None else ("task", job.label)
        if _expired(job, now):  # found at claim (flow-control.rst, "Expiry")
            self._finish(job, "expired", now)
        elif label is not None and label in self.views[runner]:
            # operations.rst: a label's job scheduled since its pause is held when
            # claimed, by a runner that has read the pause (App.pause: "within one poll
            # interval"; one that has not runs it). Issue 32 item 1: held only by a
            # pause that is stored; if it is gone, the job stays pending and the runner
            # reads the pauses again.
            if label in self.pauses:
                job.status = "paused"
            else:
                self._read_pauses(runner)
        else:
            self._claimed(job, runner, now)
        return job.status

    def _claimed(self, job: MJob, runner: str, now: datetime) -> None:
        job.status, job.holder, job.started_at = "running", runner, now
        job.until = now + timedelta(seconds=self.lease)
        job.attempts += 1
        if job.fair_key is not None and job.rank is not None:
            self.fair_clock[job.task] = max(self.fair_clock.get(job.task, job.rank), job.rank)

    def settle(self, job: MJob, ending: str, now: datetime) -> None:
        """concepts.rst "Retries", flow-control.rst "Timeouts": a failed attempt with
        attempts left is due again after the policy's delay (retry=int: none); ``Fail``
        is never retried; an overrun past the job's timeout is a failed attempt,
        retried whatever the policy retries on; the rank stays. A repeating job
        goes on to its next slot (cron.rst "Failures")."""
        job.holder = job.until = None
        if ending == "overrun":  # nothing interrupts a run without a timeout
            ending = "ok" if self.timeout_of(job) is None else "timeout"
        again = ending != "fail" and job.attempts < job.max_attempts
        if job.cancel_requested:
            self._finish(job, "cancelled", now)
        elif ending == "ok":
            if job.every is None:
                self._finish(job, "completed", now)
            else:
                self._next_slot(job, True, now)
        elif again:
            delay = self.tasks[job.task].delay_for(job.attempts)
            job.status, job.run_at = "pending", now + timedelta(seconds=delay)
            self._back_in_scope(job)
        elif job.every is not None:
            self._next_slot(job, False, now)
        else:
            self._finish(job, "failed", now)

    def timeout_of(self, job: MJob) -> float | None:
        """flow-control.rst "Timeouts": the job's own, else its task's."""
        return self.tasks[job.task].timeout if job.timeout is None else job.timeout

    def _next_slot(self, job: MJob, ok: bool, now: datetime) -> None:
        """cron.rst: a repeating job's run ended: the slot after the one it ran for
        (no drift); slots that came due (at their jittered start) while it ran are the
        overlap policy's: ``skip`` none of them runs, ``buffer_one`` one run at once
        for the latest (DECIDED: a spawning schedule whose own run ended, as a reaped
        claim does, skips them); ``pause_after`` failed runs in a row pause it. A
        backfill lane ends after its last slot, as its last run ended."""
        assert job.scheduled_for is not None and job.slots is not None
        ran_for = job.scheduled_for
        nxt = _next_after(job, ran_for)
        job.failures = 0 if ok else job.failures + 1  # cron.rst "Failures": in a row
        if job.slots.until is not None and nxt > job.slots.until:
            self._finish(job, "completed" if ok else "failed", now)
            if not self.lane_failures:
                job.failures = 0
            return
        run_at = self._start(job, nxt)
        if (job.started_at or ran_for) < run_at <= now:
            latest = nxt
            while self._start(job, _next_after(job, latest)) <= now:
                latest = _next_after(job, latest)
            if job.slots.overlap == "buffer_one":
                nxt, run_at = latest, now
            else:
                nxt = _next_after(job, latest)
                run_at = self._start(job, nxt)
        job.status, job.attempts, job.run_at, job.scheduled_for = "pending", 0, run_at, nxt
        self._back_in_scope(job)
        limit = job.slots.pause_after
        if not ok and limit is not None and job.failures >= limit:
            self.pause("schedule", str(job.handle))

    def _back_in_scope(self, job: MJob) -> None:
        """A job back to pending from a run holds its ``pending`` key again, unless
        another job took the key while it ran (the Store's settle: "unless another job
        took it meanwhile"); then it holds none."""
        if job.scope != "pending" or job.dedupe_key is None:
            return
        for other in self.jobs.values():
            if (
                other is not job
                and other.task == job.task
                and other.dedupe_key == job.dedupe_key
                and other.scope == "pending"
                and _holds(other)
            ):
                job.scope = None
                return

    def _finish(self, job: MJob, status: str, now: datetime) -> None:
        """``job`` ends ``status``; the jobs waiting for it are released."""
        job.status, job.finished_at = status, now
        job.holder = job.until = None
        if job.scope is not None:
            job.scope = None  # the key is free again (the window aside)
        keep = self.keep_completed if status == "completed" else self.keep_failed
        if job.slots is not None and job.slots.key is not None:
            keep = None  # a declared schedule cancelled is kept, not brought back (cron.rst)
        delete_at = None if keep is None else now + timedelta(seconds=keep)
        # Issue 32 item 5: the retention never ends a throttle window early.
        if delete_at is not None and job.window_until is not None:
            delete_at = max(delete_at, job.window_until)
        job.delete_at = delete_at
        for child in list(self.jobs.values()):
            self._release(child, job, now)

    def _release(self, child: MJob, parent: MJob, now: datetime) -> None:
        """flow-control.rst "Dependencies": a completed dependency is crossed off (any,
        under ``on_dependency_failure="run"``), and with none left the job is pending;
        another ends it cancelled, never run, and its own dependents in turn."""
        if child.status != "waiting" or parent.handle not in child.waiting_for:
            return
        if parent.status == "completed" or child.run_anyway:
            child.waiting_for.remove(parent.handle)
            if not child.waiting_for:
                child.status = "pending"
        else:
            self._finish(child, "cancelled", now)

    def reap(self, now: datetime) -> None:
        """concepts.rst: running jobs whose lease expired go back to pending (the
        attempt counts), or end failed when their attempts are spent. DECIDED (docs
        silent, the stores agree): due at the reap, with no backoff; a cancel requested
        meanwhile wins."""
        for job in self.jobs.values():
            if job.status == "running" and job.until is not None and job.until < now:
                job.holder = job.until = None
                if job.cancel_requested:
                    self._finish(job, "cancelled", now)
                elif job.attempts < job.max_attempts:
                    job.status, job.run_at = "pending", now
                    self._back_in_scope(job)
                elif job.every is not None:
                    self._next_slot(job, False, now)
                else:
                    self._finish(job, "failed", now)

    # Operators ---------------------------------------------------------------------------
    def cancel(self, handle: int, now: datetime) -> str:
        """concepts.rst "Timeouts and cancellation"; issue 32 item 8: a held (paused)
        job is cancelled as a pending one."""
        job = self.jobs[handle]
        if job.status in ("pending", "waiting", "paused"):
            self._finish(job, "cancelled", now)
            return "cancelled"
        if job.status == "running":
            job.cancel_requested = True
            return "requested"
        return "already_finished"

    def retry(self, handle: int, now: datetime) -> None:
        """operations.rst: a failed, cancelled or expired job: pending, due now,
        attempts reset, its expiry dropped; refused when another job holds its key."""
        job = self.jobs[handle]
        if job.status not in ("failed", "cancelled", "expired"):
            raise Refused(f"retry of a {job.status} job")
        if job.dedupe_key is not None:
            other = self.key_holder(job.task, job.dedupe_key, job.made_scope or "", now, False)
            if other is not None and other.handle != handle:
                raise Refused("its dedupe key is held")
        job.status, job.run_at, job.attempts = "pending", now, 0
        job.expires_at = job.finished_at = job.delete_at = None
        if job.every is not None:  # DECIDED (docs silent, as the stores do): its slot is now
            job.scheduled_for = now
        job.cancel_requested = False
        job.scope = job.made_scope

    def update(
        self, handle: int, priority: float | None, delay: float | None, now: datetime
    ) -> None:
        """operations.rst / App.update_job: a pending job only; the rank stays."""
        job = self.jobs[handle]
        if job.status != "pending":
            raise Refused(f"update of a {job.status} job")
        if priority is not None:
            job.priority = priority
        if delay is not None:
            job.run_at = now + timedelta(seconds=delay)

    def purge(self, statuses: frozenset[str], now: datetime) -> int:
        """App.purge: delete finished jobs of these statuses (finished by now); never a
        declared schedule (operations.rst: a cancelled one is the tombstone)."""
        gone = [
            h
            for h, j in self.jobs.items()
            if j.status in statuses and j.finished_at is not None and j.finished_at <= now
            if j.slots is None or j.slots.key is None
        ]
        for handle in gone:
            del self.jobs[handle]
        return len(gone)

    def pause(self, kind: str, name: str) -> None:
        """operations.rst "Pausing and resuming": a queue or task pause leaves their
        jobs pending (runners leave them out); a label's pending jobs wait ``paused``,
        and so does a paused schedule (``name``: its handle)."""
        self.pauses.add((kind, name))
        for job in self._named(kind, name):
            if job.status == "pending":
                job.status = "paused"

    def resume(self, kind: str, name: str) -> None:
        """The pause is lifted: held jobs are pending again, due as they were (a
        schedule: at the slot it waited for)."""
        self.pauses.discard((kind, name))
        for job in self._named(kind, name):
            if job.status == "paused":
                job.status = "pending"

    def _named(self, kind: str, name: str) -> list[MJob]:
        """The jobs a pause of ``kind`` ``name`` holds ``paused``."""
        if kind == "schedule":
            return [self.jobs[int(name)]] if int(name) in self.jobs else []
        if kind == "task":
            return [j for j in self.jobs.values() if j.label == name]
        return []

    def restart(self, runner: str) -> None:
        """A runner starts afresh: it reads the pauses at its first claim."""
        self.views[runner] = None

    # Invariants --------------------------------------------------------------------------
    def holders(self) -> dict[tuple[str, str, str], int]:
        """Who holds each dedupe key held now: ``(task, key, scope)``: its handle."""
        held: dict[tuple[str, str, str], int] = {}
        for job in self.jobs.values():
            if job.scope is not None and job.dedupe_key is not None and _holds(job):
                key = (job.task, job.dedupe_key, job.scope)
                assert key not in held, f"two jobs hold {key}"
                held[key] = job.handle
        return held

    def check(self) -> None:
        """What must hold of the model itself after every step."""
        for job in self.jobs.values():
            assert job.status != "running" or job.holder is not None
        self.holders()


def _holds(job: MJob) -> bool:
    """Whether ``job`` holds its key in its scope now: ``active`` while unfinished,
    ``pending`` while it waits (DECIDED: a label-held ``paused`` job waits)."""
    if job.scope == "active":
        return job.status in UNFINISHED
    return job.status in ("pending", "paused", "waiting")


def _expired(job: MJob, now: datetime) -> bool:
    """flow-control.rst: a job that has not started *before* its expiry never runs."""
    return job.expires_at is not None and job.expires_at <= now


def _next_after(job: MJob, slot: datetime) -> datetime:
    """A repeating job's first slot after ``slot`` (schedule.py ``next_after``)."""
    assert job.every is not None
    if job.aligned:
        return _aligned(slot + timedelta(microseconds=1), job.every)
    return slot + timedelta(seconds=job.every)


def _slots_between(job: MJob, start: datetime, end: datetime) -> list[datetime]:
    """A repeating job's slots from ``start`` to ``end``, both included: an
    interval's are its slot plus whole multiples of it; a cron rule's, the multiples
    of its period."""
    assert job.every is not None
    step = timedelta(seconds=job.every)
    if job.aligned:
        slot = _aligned(start, job.every)
    else:
        reference = job.scheduled_for or job.run_at
        slot = reference - step * ((reference - start) // step)
    out = []
    while slot <= end:
        out.append(slot)
        slot += step
    return out


def _aligned(when: datetime, period: float) -> datetime:
    """The first multiple of ``period`` seconds since the epoch at or after ``when``."""
    step = timedelta(seconds=period)
    since = when - datetime.fromtimestamp(0, when.tzinfo)
    return when + (-since) % step


def _ms(when: datetime) -> float:
    return when.timestamp() * 1000.0


def snapshot(job: MJob) -> MJob:
    return replace(job, args=list(job.args))
