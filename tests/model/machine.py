"""The stateful property test's machine: every rule is a public operation (or a
runner's step) applied to the model (tests/model/model.py) and to each store side by
side, ``memory://`` and, when :data:`SERVER` names one, the MongoDB store on a real
server; after every step each store's jobs must equal the model's, and the invariants
hold.

A failing sequence is printed by Hypothesis as a program (``state = Machine()``, then
one call a step): run it as printed, from this module, to replay it (with
``MONGOSCHED_MODEL_SERVER=mongodb://host:port`` for the server side).
"""

from __future__ import annotations

import logging
import os
import uuid
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from mongosched import App, current_job
from mongosched.errors import MongoschedError
from mongosched.runner.claim import Claim
from mongosched.runner.runner import Runner
from mongosched.testing import FakeClock
from tests.model.model import FINAL, Model, Options, Refused, TaskSpec

__all__ = ["Machine", "Options", "SERVER"]

SERVER: str | None = os.environ.get("MONGOSCHED_MODEL_SERVER")

OPEN = frozenset(n for n in os.environ.get("MONGOSCHED_MODEL_OPEN", "").split(",") if n)
"""Items of issue 32 (by number) and findings of this machine no issue named (N1...)
not fixed on this branch yet: the machine steps around each (see
``open_item``), and tests/model/test_found.py replays what it found for each as a
strict xfail. The lead removes an item here when its fix is merged."""


def open_item(n: int | str) -> bool:
    """Whether issue 32's item ``n`` (or finding ``N1``...) is still open (its check is
    stepped around)."""
    return str(n) in OPEN


"""A MongoDB URI (no database) for the server side; None: ``memory://`` alone."""

LEASE = 30.0
KEEP_COMPLETED = 10.0
KEEP_FAILED = 20.0
TASKS = {
    spec.name: spec
    for spec in (
        TaskSpec("t.plain", retries=1),
        TaskSpec("t.once", retries=0, priority=3),
        TaskSpec("t.aging", retries=0, priority=9, aging=60.0),
        TaskSpec("t.fair", retries=1, fair=True, weights=(("b", 2.0),)),
    )
}
RUNNERS = ("r0", "r1")
PAUSABLE = (("queue", "q2"), ("task", "t.plain"), ("task", "L"))

OUTCOME = {"ok": True}
RAN: list[Any] = []  # ids of the jobs run, in order (both sides, one at a time)

SIDES: Counter[str] = Counter()  # the sides the machines made (a test checks both ran)


def body(tenant: str, n: int) -> int:
    job = current_job()
    assert job is not None
    RAN.append(job.id)
    if not OUTCOME["ok"]:
        raise RuntimeError("the step's outcome: fail")
    return n


@dataclass
class Side:
    """One store under test: its app, its runners, the ids of the model's jobs."""

    name: str
    app: App
    ids: dict[int, Any] = field(default_factory=dict)
    runners: dict[str, Runner] = field(default_factory=dict)
    dead: list[Claim] = field(default_factory=list)  # claims of runners that died
    drop: Any = None

    def runner(self, name: str) -> Runner:
        if name not in self.runners:
            # A long poll interval: the runner keeps the pauses it read until it restarts.
            self.runners[name] = self.app.runner(workers=1, name=name, poll_interval=3600)
        return self.runners[name]

    def handle_of(self, job_id: Any) -> int:
        return next(h for h, i in self.ids.items() if i == job_id)


def make_side(name: str, clock: FakeClock) -> Side:
    options: dict[str, Any] = dict(
        clock=clock,
        lease_duration=LEASE,
        keep_completed=KEEP_COMPLETED,
        keep_failed=KEEP_FAILED,
    )
    drop = None
    if name == "memory":
        app = App("memory://", **options)
    else:
        import pymongo

        assert SERVER is not None
        client: Any = pymongo.MongoClient(SERVER, tz_aware=True)
        db_name = f"model_{uuid.uuid4().hex[:12]}"
        app = App(database=client.get_database(db_name), **options)

        def drop() -> None:
            client.drop_database(db_name)
            client.close()

    for spec in TASKS.values():
        extra: dict[str, Any] = {}
        if spec.aging is not None:
            extra["aging"] = spec.aging
        if spec.fair:
            extra["fair_key"] = "tenant"
            extra["fair_weights"] = dict(spec.weights)
        app.task(name=spec.name, retry=spec.retries, priority=spec.priority, **extra)(body)
    return Side(name, app, drop=drop)


DELAYS = st.sampled_from([0.0, 30.0, 90.0])
OPTIONS = st.builds(
    Options,
    delay=DELAYS,
    priority=st.sampled_from([None, 1.0, 5.0, 9.0]),
    queue=st.sampled_from(["default", "q2"]),
    label=st.sampled_from([None, "L"]),
    dedupe_key=st.sampled_from([None, None, "k1", "k2"]),
    dedupe_scope=st.sampled_from(["active", "pending"]),
    dedupe_window=st.sampled_from([None, None, 120.0]),
    replace=st.booleans(),
    expires=st.sampled_from([None, None, 60.0, 200.0]),
)


class Machine(RuleBasedStateMachine):
    """The model and the stores, stepped together (see the module)."""

    def __init__(self) -> None:
        super().__init__()
        self.clock = FakeClock()
        self.model = Model(
            dict(TASKS),
            lease=LEASE,
            keep_completed=KEEP_COMPLETED,
            keep_failed=KEEP_FAILED,
            replace_carries_options=not open_item(2),
            rank_ties_by_due=not open_item("N2"),
            sweep_held=not open_item("N4"),
        )
        self.sides = [make_side("memory", self.clock)]
        if SERVER is not None:
            self.sides.append(make_side("server", self.clock))
        self.stats: Counter[str] = Counter()
        SIDES.update(side.name for side in self.sides)
        self._quiet = logging.getLogger("mongosched")
        self._level = self._quiet.level
        self._quiet.setLevel(logging.CRITICAL)

    def teardown(self) -> None:
        self._quiet.setLevel(self._level)
        for side in self.sides:
            side.app.close()
            if side.drop is not None:
                side.drop()

    def _handle(self, i: int) -> int | None:
        handles = sorted(self.model.jobs)
        return handles[i % len(handles)] if handles else None

    # Rules ---------------------------------------------------------------------------
    @rule(
        task=st.sampled_from(sorted(TASKS)),
        tenant=st.sampled_from(["a", "b", "c"]),
        n=st.integers(0, 3),
        o=OPTIONS,
    )
    def schedule(self, task: str, tenant: str, n: int, o: Options) -> None:
        now = self.clock()
        if open_item("N1") and o.dedupe_key is not None and o.dedupe_window is not None:
            # Finding N1: a call with a window returns its scope's holder, not the
            # window's, when they differ (and a debounce call replaces the former).
            scope = "pending" if o.replace else o.dedupe_scope
            windowed = self.model.window_holder(task, o.dedupe_key, now)
            held = self.model.key_holder(task, o.dedupe_key, scope, now, False)
            if o.replace or (windowed is not None and held not in (None, windowed)):
                return
        if open_item(3) and o.replace and o.dedupe_key is not None:
            held = self.model.key_holder(task, o.dedupe_key, "pending", now, False)
            if held is not None and held.status == "paused":
                return  # issue 32 item 3: debouncing a held job raises or drops
        try:
            handle = self.model.schedule(task, [tenant, n], o, now)
        except Refused:
            for side in self.sides:
                with pytest.raises(MongoschedError):
                    side.app.get_task(task).configure(**o.configure()).schedule(tenant, n)
            return
        for side in self.sides:
            job = side.app.get_task(task).configure(**o.configure()).schedule(tenant, n)
            if handle in side.ids:
                known = {i: h for h, i in side.ids.items()}
                assert job.id == side.ids[handle], (
                    f"{side.name}: schedule returned job {known.get(job.id, 'new')}, "
                    f"the model job {handle}"
                )
            else:
                assert job.id not in side.ids.values(), (
                    f"{side.name}: schedule returned the existing job "
                    f"{side.handle_of(job.id)}; the model makes a new one ({handle})"
                )
                side.ids[handle] = job.id
        self.stats["schedule"] += 1

    @rule(runner=st.sampled_from(RUNNERS), limit=st.integers(1, 4), ok=st.booleans())
    def run(self, runner: str, limit: int, ok: bool) -> None:
        """A runner claims and runs up to ``limit`` due jobs, each ending ``ok``."""
        now = self.clock()
        expected = self.model.run(runner, limit, ok, now)
        OUTCOME["ok"] = ok
        for side in self.sides:
            RAN.clear()
            side.runner(runner).run_until_idle(limit=limit)
            got = [side.handle_of(i) for i in RAN]
            assert got == expected, f"{side.name}: ran jobs {got}, the model runs {expected}"
        self.stats["runs"] += len(expected)

    @rule(runner=st.sampled_from(RUNNERS), count=st.integers(1, 2))
    def die(self, runner: str, count: int) -> None:
        """A runner claims ``count`` jobs and dies holding them (its leases run out)."""
        now = self.clock()
        expected = self.model.claim_only(runner, count, now)
        self.model.restart(runner)
        for side in self.sides:
            got = []
            r = side.runner(runner)
            while len(got) < count:
                claim, claimed = r.claimer.take()  # as run_until_idle claims
                if not claimed:
                    break
                if claim is not None:
                    side.dead.append(claim)
                    got.append(side.handle_of(claim.job_id))
            del side.runners[runner]  # the next one of that name starts afresh
            assert got == expected, f"{side.name}: claimed {got}, the model {expected}"
        self.stats["died holding"] += len(expected)

    @rule(seconds=st.sampled_from([1, 30, 61, 200, 600]))
    def advance(self, seconds: int) -> None:
        self.clock.advance(seconds=seconds)

    @rule(runner=st.sampled_from(RUNNERS))
    def reap(self, runner: str) -> None:
        """The reaper passes: expired leases, then the expiry sweep."""
        now = self.clock()
        self.model.reap(now)
        self.model.sweep(now)
        for side in self.sides:
            r = side.runner(runner)
            r.reap()
            r.sweep()

    @rule(runner=st.sampled_from(RUNNERS))
    def restart(self, runner: str) -> None:
        """A runner starts again (it reads the pauses afresh)."""
        self.model.restart(runner)
        for side in self.sides:
            side.runners.pop(runner, None)

    @rule(i=st.integers(0, 50))
    def cancel(self, i: int) -> None:
        handle = self._handle(i)
        if handle is None:
            return
        if open_item(8) and self.model.jobs[handle].status == "paused":
            return  # issue 32 item 8: app.cancel() of a held job is refused
        expected = self.model.cancel(handle, self.clock())
        for side in self.sides:
            try:
                got = side.app.cancel(side.ids[handle]).value
            except MongoschedError as exc:
                got = f"refused: {exc}"
            assert got == expected, f"{side.name}: cancel {handle}: {got}, model {expected}"

    @rule(i=st.integers(0, 50))
    def retry_job(self, i: int) -> None:
        handle = self._handle(i)
        if handle is None:
            return
        try:
            self.model.retry(handle, self.clock())
            expected = "retried"
        except Refused as exc:
            expected = f"refused ({exc})"
        for side in self.sides:
            try:
                side.app.retry_job(side.ids[handle])
                got = "retried"
            except MongoschedError as exc:
                got = f"refused ({exc})"
            assert got.split()[0] == expected.split()[0], (
                f"{side.name}: retry_job {handle}: {got}; model {expected}"
            )

    @rule(
        i=st.integers(0, 50),
        priority=st.sampled_from([None, 1.0, 9.0]),
        delay=st.sampled_from([None, 0.0, 60.0]),
    )
    def update_job(self, i: int, priority: float | None, delay: float | None) -> None:
        handle = self._handle(i)
        if handle is None or (priority is None and delay is None):
            return
        if open_item("N3") and priority is not None and TASKS[self.model.jobs[handle].task].ranked:
            return  # finding N3: a priority edit moves a ranked job against other tasks
        now = self.clock()
        try:
            self.model.update(handle, priority, delay, now)
            expected = "updated"
        except Refused as exc:
            expected = f"refused ({exc})"
        changes: dict[str, Any] = {}
        if priority is not None:
            changes["priority"] = priority
        if delay is not None:
            changes["delay"] = delay
        for side in self.sides:
            try:
                side.app.update_job(side.ids[handle], **changes)
                got = "updated"
            except MongoschedError as exc:
                got = f"refused ({exc})"
            assert got.split()[0] == expected.split()[0], (
                f"{side.name}: update_job {handle}: {got}; model {expected}"
            )

    @rule(status=st.sampled_from(sorted(FINAL)))
    def purge(self, status: str) -> None:
        expected = self.model.purge(frozenset({status}), self.clock())
        for side in self.sides:
            got = side.app.purge(status=status)
            assert got == expected, f"{side.name}: purge {status}: {got}, model {expected}"
            for handle in [h for h in side.ids if h not in self.model.jobs]:
                del side.ids[handle]

    @rule(what=st.sampled_from(PAUSABLE))
    def pause(self, what: tuple[str, str]) -> None:
        kind, name = what
        self.model.pause(kind, name)
        for side in self.sides:
            side.app.pause(**{kind: name})

    @rule(what=st.sampled_from(PAUSABLE))
    def resume(self, what: tuple[str, str]) -> None:
        kind, name = what
        self.model.resume(kind, name)
        for side in self.sides:
            side.app.resume(**{kind: name})
        if open_item(1) and kind == "task":  # issue 32 item 1: no runner keeps the pause
            for runner in RUNNERS:
                self.restart(runner)

    # Checks --------------------------------------------------------------------------------
    @invariant()
    def stores_equal_the_model(self) -> None:
        self.model.check()
        expected = self.model.jobs
        for side in self.sides:
            jobs = {j.id: j for j in side.app.get_jobs(limit=10_000)}
            known = {side.ids[h]: h for h in expected}
            extra = set(jobs) - set(known)
            assert not extra, f"{side.name}: jobs the model does not have: {extra}"
            for job_id, handle in known.items():
                assert job_id in jobs, f"{side.name}: job {handle} lost"
                want, got = expected[handle], jobs[job_id]
                seen = {
                    "status": got.status.value,
                    "attempts": got.attempts,
                    "run_at": got.run_at,
                    "args": got.args,
                    "priority": got.priority,
                    "expires_at": got.expires_at,
                    "delete_at": got.delete_at,
                    "label": got.label,
                }
                model = {
                    "status": want.status,
                    "attempts": want.attempts,
                    "run_at": want.run_at,
                    "args": want.args,
                    "priority": want.priority,
                    "expires_at": want.expires_at,
                    "delete_at": want.delete_at,
                    "label": want.label,
                }
                if open_item(5) and want.window_until is not None:  # issue 32 item 5
                    del seen["delete_at"], model["delete_at"]
                if want.status in FINAL:  # a final job's due time says nothing
                    del seen["run_at"], model["run_at"]
                differ = {k: (seen[k], model[k]) for k in model if seen[k] != model[k]}
                assert not differ, f"{side.name}: job {handle} (store, model): {differ}"
            self._invariants(side, jobs)

    def _invariants(self, side: Side, jobs: dict[Any, Any]) -> None:
        """No two live holders; one job per dedupe key and scope; a paused job has a
        pause behind it (its label's)."""
        paused = {(p.kind, p.name) for p in side.app.pauses()}
        keys: Counter[Any] = Counter()
        now = self.clock()
        for job in jobs.values():
            if job.status.value == "paused":
                assert ("task", job.label) in paused, (
                    f"{side.name}: job {side.handle_of(job.id)} is paused with no pause "
                    f"of its label {job.label!r} stored"
                )
            if job.status.value == "running":
                lease = job.lease
                assert lease is not None
            if job.dedupe_key is not None and job.status.value in ("pending", "paused"):
                scope = self.model.jobs[side.handle_of(job.id)].made_scope
                keys[(job.task, job.dedupe_key, scope)] += 1
        assert all(n <= 1 for n in keys.values()), f"{side.name}: a key held twice: {keys}"
        del now
