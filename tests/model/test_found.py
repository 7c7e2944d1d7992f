"""What the model's machine found, each as the shrunk sequence it printed, replayed
on ``memory://`` and the server side by side with the item's check switched on.

Each is a strict xfail while its item is open (listed in ``machine.OPEN``): when a fix
lands, its test passes, the strict xfail fails, and the lead removes the item from
``machine.OPEN`` (and the mark here). Items of issue 32 by number; ``N1``... are
findings no issue named (see docs/contributing.rst, "The model").
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from tests.model import machine
from tests.model.machine import Machine, Options
from tests.model.test_machine import server_uri  # noqa: F401  (a fixture)

Steps = Callable[[Machine], None]
PLAIN = Options()


def found(item: str, why: str) -> pytest.MarkDecorator:
    """A strict xfail while ``item`` is open."""
    return pytest.mark.xfail(machine.open_item(item), strict=True, reason=f"{item}: {why}")


@pytest.fixture
def replay(server_uri: str) -> Iterator[Callable[[str, Steps], None]]:  # noqa: F811
    opened = machine.OPEN

    def run(item: str, steps: Steps) -> None:
        machine.OPEN = opened - {item}  # the item's check on
        state = Machine()
        try:
            state.stores_equal_the_model()
            steps(state)
            state.stores_equal_the_model()
        finally:
            state.teardown()

    yield run
    machine.OPEN = opened


@found("1", "resume() while a runner runs leaves the jobs paused for good")
def test_item1_resume_race(replay: Callable[[str, Steps], None]) -> None:
    def steps(state: Machine) -> None:
        state.pause(what=("task", "L"))
        state.run(limit=1, ok=False, runner="r0")
        state.schedule(n=0, o=Options(label="L"), task="t.aging", tenant="a")
        state.resume(what=("task", "L"))
        state.run(limit=1, ok=False, runner="r0")

    replay("1", steps)


@found("2", "a debounced job keeps the first call's expiry")
def test_item2_debounce_keeps_expiry(replay: Callable[[str, Steps], None]) -> None:
    def steps(state: Machine) -> None:
        state.schedule(n=0, o=Options(dedupe_key="k1", replace=True), task="t.once", tenant="a")
        o = Options(dedupe_key="k1", replace=True, expires=60.0)
        state.schedule(n=1, o=o, task="t.once", tenant="a")

    replay("2", steps)


@found("3", "debouncing a held (paused-label) job")
def test_item3_debounce_of_a_held_job(replay: Callable[[str, Steps], None]) -> None:
    def steps(state: Machine) -> None:
        o = Options(label="L", dedupe_key="k1", replace=True)
        state.schedule(n=0, o=o, task="t.plain", tenant="a")
        state.pause(what=("task", "L"))
        state.schedule(n=1, o=o, task="t.plain", tenant="a")

    replay("3", steps)


@found("5", "the retention ends a throttle window")
def test_item5_retention_ends_a_window(replay: Callable[[str, Steps], None]) -> None:
    def steps(state: Machine) -> None:
        o = Options(dedupe_key="k1", dedupe_window=120.0)
        state.schedule(n=0, o=o, task="t.aging", tenant="a")
        state.cancel(i=0)

    replay("5", steps)


@found("8", "app.cancel() of a held job is refused")
def test_item8_cancel_of_a_held_job(replay: Callable[[str, Steps], None]) -> None:
    def steps(state: Machine) -> None:
        state.schedule(n=0, o=Options(label="L"), task="t.aging", tenant="a")
        state.pause(what=("task", "L"))
        state.cancel(i=0)

    replay("8", steps)


@found("11", "the stores merge ranked claims differently")
def test_item11_ranked_merge(replay: Callable[[str, Steps], None]) -> None:
    def steps(state: Machine) -> None:
        state.schedule(n=0, o=PLAIN, task="t.aging", tenant="a")  # priority 9, ages
        state.advance(seconds=200)
        state.schedule(n=1, o=Options(priority=1.0), task="t.fair", tenant="a")
        state.advance(seconds=600)  # the aged job's effective priority: about -4
        state.run(limit=1, ok=True, runner="r0")

    replay("11", steps)


def test_n1_debounce_with_a_window(replay: Callable[[str, Steps], None]) -> None:
    def steps(state: Machine) -> None:
        state.schedule(
            n=0, o=Options(dedupe_key="k1", dedupe_window=120.0), task="t.aging", tenant="a"
        )
        state.schedule(n=0, o=Options(dedupe_key="k1", replace=True), task="t.aging", tenant="a")
        o = Options(dedupe_key="k1", dedupe_window=120.0, replace=True)
        state.schedule(n=0, o=o, task="t.aging", tenant="a")

    replay("N1", steps)


def test_n2_equal_ranks_by_due_time(replay: Callable[[str, Steps], None]) -> None:
    def steps(state: Machine) -> None:
        state.schedule(n=0, o=PLAIN, task="t.aging", tenant="a")
        state.cancel(i=0)
        state.schedule(n=0, o=PLAIN, task="t.aging", tenant="a")
        state.advance(seconds=1)
        state.retry_job(i=0)  # keeps its rank, now due after job 1
        state.die(count=1, runner="r0")

    replay("N2", steps)


@found("N3", "a priority edit moves a ranked job against other tasks' jobs")
def test_n3_priority_edit_of_a_ranked_job(replay: Callable[[str, Steps], None]) -> None:
    def steps(state: Machine) -> None:
        state.schedule(n=0, o=PLAIN, task="t.aging", tenant="a")
        state.schedule(n=0, o=PLAIN, task="t.fair", tenant="a")
        state.update_job(delay=None, i=0, priority=1.0)
        state.run(limit=1, ok=False, runner="r0")

    replay("N3", steps)


@found("N4", "a held job past its expiry stays paused: the sweep skips it")
def test_n4_sweep_of_a_held_job(replay: Callable[[str, Steps], None]) -> None:
    def steps(state: Machine) -> None:
        o = Options(label="L", expires=60.0)
        state.schedule(n=0, o=o, task="t.aging", tenant="a")
        state.advance(seconds=61)
        state.pause(what=("task", "L"))
        state.reap(runner="r0")

    replay("N4", steps)


def test_m1_a_label_paused_since_a_runner_read_its_pauses(
    replay: Callable[[str, Steps], None],
) -> None:
    """Where the model was wrong: it held a label's job by the stored pause, while a
    runner goes by the pauses it read (``App.pause``: "within one poll interval").
    A runner that read them before the pause runs the job; one that starts afresh
    holds it. The soak found it (it failed 2 runs of 3)."""

    def steps(state: Machine) -> None:
        state.run(limit=1, ok=True, runner="r0")  # r0 reads the pauses: none
        state.pause(what=("task", "L"))
        state.schedule(n=0, o=Options(label="L"), task="t.aging", tenant="a")
        state.schedule(n=1, o=Options(label="L"), task="t.aging", tenant="a")
        state.run(limit=1, ok=True, runner="r0")  # has not read the pause: runs one
        state.run(limit=1, ok=True, runner="r1")  # reads it: holds the other

    replay("M1", steps)


@found("N5", "memory:// transactions refuse a debounce of a held key")
def test_n5_debounce_in_a_transaction(replay: Callable[[str, Steps], None]) -> None:
    def steps(state: Machine) -> None:
        o = Options(dedupe_key="k1", replace=True)
        state.schedule(n=0, o=o, task="t.plain", tenant="a")
        state.transaction(calls=[("t.plain", "a", 1, o)], commit=True)

    replay("N5", steps)


def test_n6_a_window_in_a_transaction(replay: Callable[[str, Steps], None]) -> None:
    """A call with a window, in a transaction: the window of a job made in the same
    transaction holds it, whatever scope each call gives (memory:// made a second job)."""

    def steps(state: Machine) -> None:
        o = Options(dedupe_key="k1", dedupe_window=120.0)
        pending = Options(dedupe_key="k1", dedupe_window=120.0, dedupe_scope="pending")
        state.transaction(calls=[("t.aging", "a", 0, o), ("t.aging", "a", 0, pending)], commit=True)

    replay("N6", steps)


@found("N7", "a debounce that changes a held job's label leaves it paused for good")
def test_n7_debounce_moves_a_held_job_off_its_label(replay: Callable[[str, Steps], None]) -> None:
    def steps(state: Machine) -> None:
        state.schedule(
            n=0, o=Options(label="L", dedupe_key="k1", replace=True), task="t.plain", tenant="a"
        )
        state.pause(what=("task", "L"))
        state.schedule(n=1, o=Options(dedupe_key="k1", replace=True), task="t.plain", tenant="a")

    replay("N7", steps)


def test_n8_a_tie_of_an_ordinary_and_a_fair_job(replay: Callable[[str, Steps], None]) -> None:
    """Equal priority, and the ordinary job due when the fair one starts: memory://
    claimed the ordinary job first, the server the fair one."""

    def steps(state: Machine) -> None:
        state.schedule(n=0, o=PLAIN, task="t.backoff", tenant="a")
        state.die(count=1, runner="r1")
        state.advance(seconds=600)
        state.reap(runner="r1")  # due again now
        state.schedule(n=3, o=PLAIN, task="t.fair", tenant="a")  # starts now
        state.die(count=1, runner="r1")

    replay("N8", steps)


def test_n9_priority_edit_of_a_fair_job(replay: Callable[[str, Steps], None]) -> None:
    """Model soak, seed 1111: a priority edit of a placed fair job left its rank (made
    from its old priority), so its task's claims went on taking the jobs in the old
    order; priority decides first among a fair task's jobs (flow-control.rst)."""

    def steps(state: Machine) -> None:
        state.schedule(n=0, o=PLAIN, task="t.fair", tenant="a")
        state.advance(seconds=1)
        state.schedule(n=0, o=PLAIN, task="t.fair", tenant="b")
        state.update_job(delay=None, i=0, priority=9.0)
        state.update_job(delay=None, i=1, priority=1.0)
        state.run(limit=2, ok=True, runner="r0")

    replay("N9", steps)


def test_m2_a_job_back_from_a_run_whose_key_was_taken_holds_none(
    replay: Callable[[str, Steps], None],
) -> None:
    """Where the model was wrong: a repeating job with a ``pending``-scope key was
    reaped back to pending after another job took its key while it ran; the model gave
    it the key back (two holders), as the machine's own check then counted it. The
    stores keep the key with the job that took it (``Store.leases.settle``: "unless another
    job took it meanwhile"). mutants.py's control run found it (seed 11)."""

    def steps(state: Machine) -> None:
        keyed = Options(dedupe_key="k1", replace=True)
        state.schedule(n=0, o=keyed, task="t.every", tenant="a")
        state.die(count=1, runner="r0")
        state.schedule(
            n=1, o=Options(dedupe_key="k1", dedupe_scope="pending"), task="t.every", tenant="a"
        )
        state.advance(seconds=61)
        state.reap(runner="r0")
        state.schedule(n=2, o=keyed, task="t.every", tenant="a")  # replaces the key's holder

    replay("M2", steps)


@found("S1", "a slot whose jittered start has not come runs early; the one before is missed")
def test_s1_a_slot_not_started_yet_is_not_missed(replay: Callable[[str, Steps], None]) -> None:
    """s.jitter (every 30 s, jitter 20 s, misfire="skip") waits for 00:00:30; picked
    up at 00:01, before 00:01's jittered start, the stores ran 00:01 early and
    counted 00:00:30, still within its grace, missed (cron.rst, "Jitter": each slot
    starts at its offset; "Missed slots")."""

    def steps(state: Machine) -> None:
        state.advance(seconds=60)  # 00:01: 00:00:30 is due, 00:01 not yet
        state.run(limit=1, ok=True, runner="r0")

    replay("S1", steps)


@found("S2", "a backfill lane that ends failed forgets its failed runs in a row")
def test_s2_a_lane_keeps_its_failures(replay: Callable[[str, Steps], None]) -> None:
    """A lane of s.jitter (no retries) whose four runs fail ends failed with
    ``last_run.failures`` 0; cron.rst ("Failures"): how many runs failed in a row."""

    def steps(state: Machine) -> None:
        state.backfill(at_once=1, back=(150, 60), i=0)  # 23:57:30 to 23:59, one lane
        state.run(limit=4, ok=False, ending="error", runner="r0")

    replay("S2", steps)


def test_n10_a_debounce_that_changes_a_fair_job_s_priority(
    replay: Callable[[str, Steps], None],
) -> None:
    """As N9, by a debounce: ``dedupe="replace"`` gave a placed fair job its new
    priority but left its rank (made from the old one), so its task's claims took the
    jobs in the old order."""

    def steps(state: Machine) -> None:
        keyed = Options(dedupe_key="k1", replace=True)
        state.schedule(n=0, o=keyed, task="t.fair", tenant="a")
        state.advance(seconds=1)
        state.schedule(n=0, o=PLAIN, task="t.fair", tenant="b")
        state.schedule_again(i=0, n=1, delay=0.0, expires=None, label=None, priority=9.0)
        state.run(limit=2, ok=True, runner="r0")

    replay("N10", steps)


def test_n11_a_debounce_that_makes_an_unplaced_fair_job_due_sooner(
    replay: Callable[[str, Steps], None],
) -> None:
    """Found with N10: a fair job due later has no start yet; a debounce (or an edit)
    that made it due now left its rank at the old due time, so it was not placed when
    due and came after its task's backlog."""

    def steps(state: Machine) -> None:
        state.schedule(n=0, o=PLAIN, task="t.fair", tenant="a")
        state.schedule(n=1, o=PLAIN, task="t.fair", tenant="a")
        state.schedule(
            n=0, o=Options(delay=90.0, dedupe_key="k1", replace=True), task="t.fair", tenant="c"
        )
        state.schedule_again(i=2, n=1, delay=0.0, expires=None, label=None, priority=None)
        state.run(limit=3, ok=True, runner="r0")

    replay("N11", steps)


def test_cancel_running_requests_the_cancel_of_the_earlier_run(
    replay: Callable[[str, Steps], None],
) -> None:
    """The sequence random generation did not reach for the ``cancel-running-nothing``
    mutant (tests/model/mutants.py): a t.cancel slot's own run is held by a runner that
    died, the next slot comes due, and its claim (overlap="cancel_running") must ask
    the earlier run to cancel (cron.rst, "Overlapping runs")."""

    def steps(state: Machine) -> None:
        state.schedule(n=0, o=PLAIN, task="t.cancel", tenant="a")
        state.run(limit=1, ok=True, runner="r0")  # the schedule spawns its slot's run
        state.die(runner="r1", count=1)  # which a runner claims, and dies holding
        state.advance(seconds=150)  # the next slot
        state.run(limit=1, ok=True, runner="r0")  # spawns again: cancels the first

    replay("cancel_running", steps)
