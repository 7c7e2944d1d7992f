"""Does the machine find what it should? Re-introduce defects it was built to catch, one
at a time, in a copy of the package, and run the machine against each.

    python -m tests.model.mutants [--examples 200] [--seed 1] [--only NAME,...]
        [--server mongodb://host:port]

Each mutant undoes the fix of one item of the issue the machine was built for (issue 32)
as a small change to the source, in a scratch copy of ``mongosched/`` and ``tests/``
(the working tree is never touched). The machine then runs on it with a fixed seed until
it fails or the examples run out. A mutant the machine finds is *killed*: its shrunk
sequence is printed. A mutant that survives means a gap in the model or in the rules.
The unchanged copy runs first with the same seed and must pass, so a kill is the
mutant's doing.

Mutants marked "server" disagree between the stores only: they need the differential
run (``--server``, or the SecantusDB the test support starts when none is given).
``make soak`` does not run this; it is the evidence asked for in docs/contributing.rst
("The model and the machine").
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import textwrap
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Mutant:
    name: str
    item: str
    """The item of issue 32 whose fix it undoes."""
    what: str
    path: str
    old: str
    new: str
    server: bool = False


MUTANTS = [
    Mutant(
        "resume-race",
        "1",
        "a hold lands whether or not its pause is still stored, and the reaper's sweep "
        "releases nothing",
        "mongosched/store/memory/admin.py",
        'if ("task", label) not in self._pauses:  # resumed meanwhile',
        "if False:  # mutant: the hold no longer checks its pause",
    ),
    Mutant(
        "resume-race-sweep",
        "1",
        "(with resume-race) the reaper's sweep of held jobs with no pause does nothing",
        "mongosched/store/memory/admin.py",
        "                if (job.record.label is not None or job.repeat is not None)",
        "                if False",
    ),
    Mutant(
        "debounce-expiry",
        "2",
        "a debounce keeps the first call's expiry",
        "mongosched/_core/transitions.py",
        '    "expires_at",\n    "timeout",',
        '    "timeout",',
    ),
    Mutant(
        "debounce-expiry-memory",
        "2",
        "(with debounce-expiry) memory:// keeps the first call's expiry too",
        "mongosched/_core/transitions.py",
        "        expires_at=opt_ms(later.expires_at),\n",
        "",
    ),
    Mutant(
        "debounce-held",
        "3",
        "a debounce no longer replaces a held (paused) job",
        "mongosched/_core/records.py",
        "REPLACEABLE_STATUSES = (JobStatus.PENDING, JobStatus.PAUSED)",
        "REPLACEABLE_STATUSES = (JobStatus.PENDING,)",
    ),
    Mutant(
        "retention-window",
        "5",
        "retention ends a throttle window early",
        "mongosched/_core/transitions.py",
        "    return delete_at if until is None or until <= delete_at else until",
        "    return delete_at",
    ),
    Mutant(
        "cancel-held",
        "8",
        "a held job counts as started: a cancel or an expiry refuses it",
        "mongosched/_core/records.py",
        "UNSTARTED_STATUSES = (JobStatus.PENDING, JobStatus.WAITING, JobStatus.PAUSED)",
        "UNSTARTED_STATUSES = (JobStatus.PENDING, JobStatus.WAITING)",
    ),
    Mutant(
        "raw-rank-merge",
        "11",
        "MongoDB merges ranked claims by raw priority, memory:// by effective priority",
        "mongosched/store/mongo/claims.py",
        '            doc["priority"], aware(doc["run_at"]), doc.get("rank"), doc.get("aging"), now',
        '            doc["priority"], aware(doc["run_at"]), None, None, now',
        server=True,
    ),
    # The slot options (issue 33): jitter, overlap and misfire policies, backfill.
    Mutant(
        "jitter-early",
        "S1",
        "a slot whose jittered start has not come runs early; the one before is missed",
        "mongosched/_core/runs.py",
        "        return (s for s in rule.slots_back(anchor, now) if s == anchor or start(s) <= now)",
        "        return rule.slots_back(anchor, now)",
    ),
    Mutant(
        "lane-failures",
        "S2",
        "a backfill lane's last run forgets the failures in a row before it",
        "mongosched/_core/outcome.py",
        "        return Decision(event, evolved(ended, last_run=last_run), error)",
        "        return Decision(event, evolved(ended, last_run=evolved(last_run, failures=0)),"
        " error)",
    ),
    Mutant(
        "buffer-one-skips",
        "overlap",
        "overlap='buffer_one' skips the slots that came due during a run",
        "mongosched/_core/outcome.py",
        '        if runs.overlap == "buffer_one":',
        "        if False:",
    ),
    Mutant(
        "jitter-overlap",
        "overlap",
        "the overlap rule takes a slot as due at its nominal time, not its jittered start",
        "mongosched/_core/outcome.py",
        "        return runs.start(jitter_key(job), slot)",
        "        return slot",
    ),
    Mutant(
        "allow-runs-inline",
        "overlap",
        "overlap='allow' runs the slot in the schedule itself",
        "mongosched/runner/slots.py",
        "        if Runs.from_document(claim.record.repeat or {}).spawns:",
        "        if False:",
    ),
    Mutant(
        "cancel-running-nothing",
        "overlap",
        "overlap='cancel_running' cancels no earlier run",
        "mongosched/runner/slots.py",
        '        if Runs.from_document(record.repeat or {}).overlap == "cancel_running":',
        "        if False:",
    ),
    Mutant(
        "misfire-all-coalesces",
        "misfire",
        "misfire='all' runs the latest missed slot only",
        "mongosched/_core/runs.py",
        '    if misfire.policy == "all":',
        "    if False:",
    ),
    Mutant(
        "skip-no-grace",
        "misfire",
        "misfire='skip' without a grace runs any late slot",
        "mongosched/schedule.py",
        '        return SKIP_GRACE if self.policy == "skip" else None',
        "        return None",
    ),
    Mutant(
        "backfill-doubles",
        "backfill",
        "a backfill of a range that lanes still run doubles them",
        "mongosched/operations/triggers.py",
        "    running = [lane for lane in unfinished if spawn.is_lane_of(lane, schedule)]",
        "    running: list[JobRecord] = []",
    ),
    Mutant(
        "batch-short",
        "batch",
        "a batched claim takes one job fewer than the free places it was asked for",
        "mongosched/runner/claimer.py",
        "                limit=limit - single,",
        "                limit=max(limit - single - 1, 1),",
    ),
    Mutant(
        "batch-unmerged",
        "batch",
        "a batched claim over ranked and plain tasks takes their candidates unmerged",
        "mongosched/store/mongo/claims.py",
        "            if heads[n] < len(docs) and (key is None or keys[n][heads[n]] < key):",
        "            if heads[n] < len(docs) and key is None:  # mutant: one find after another",
        server=True,
    ),
]

GROUPS = {
    "resume-race": ("resume-race", "resume-race-sweep"),
    "debounce-expiry": ("debounce-expiry", "debounce-expiry-memory"),
}
"""Mutants applied together (the defect needed both mechanisms gone)."""

RUN = """
import sys
from hypothesis import HealthCheck, Phase, settings
from hypothesis.stateful import run_state_machine_as_test
import hypothesis.core
from tests.model import machine
hypothesis.core.global_force_seed = {seed}
machine.SERVER = {server!r}
run_state_machine_as_test(machine.Machine, settings=settings(
    max_examples={examples}, stateful_step_count=30, derandomize=False, database=None,
    deadline=None, phases=[Phase.generate, Phase.shrink],
    suppress_health_check=list(HealthCheck)))
"""


def _copy(into: Path) -> None:
    for name in ("mongosched", "tests"):
        shutil.copytree(
            ROOT / name, into / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc")
        )
    shutil.copy(ROOT / "pyproject.toml", into / "pyproject.toml")


def _apply(into: Path, mutant: Mutant) -> None:
    path = into / mutant.path
    text = path.read_text()
    if text.count(mutant.old) != 1:
        raise SystemExit(f"{mutant.name}: its change no longer applies to {mutant.path}")
    path.write_text(text.replace(mutant.old, mutant.new))


def _run(into: Path, seed: int, examples: int, server: str | None) -> tuple[bool, str, float]:
    code = textwrap.dedent(RUN).format(seed=seed, examples=examples, server=server)
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=into,
        env={**os.environ, "PYTHONPATH": str(into), "MONGOSCHED_MODEL_OPEN": ""},
        capture_output=True,
        text=True,
        timeout=3600,
    )
    output = done.stdout + done.stderr
    if os.environ.get("MUTANTS_DEBUG"):
        print(output[-5000:])
    return done.returncode == 0, output, time.monotonic() - started


def _program(output: str) -> str:
    """The shrunk sequence Hypothesis printed, and the error it ended in (the first,
    where it found several)."""
    output = re.sub(r"(?m)^[ +|-]*\| ?", "", output)  # an exception group's margins
    found = re.search(r"state = Machine\(\)\n(?:.*\n)*?state\.teardown\(\)", output)
    error = [line for line in output.splitlines() if re.match(r"^\w*(Error|Exception)\b", line)]
    program = found.group(0) if found else "(no program printed)"
    program = "\n".join(  # the invariant, checked after every step, goes without saying
        line for line in program.splitlines() if line != "state.stores_equal_the_model()"
    )
    return program + ("\n" + error[-1] if error else "")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--examples", type=int, default=200)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--only", default="", help="names, comma-separated")
    parser.add_argument("--server", default=None, help="a MongoDB URI for 'server' mutants")
    args = parser.parse_args(argv)
    only = {n for n in args.only.split(",") if n}
    grouped = {m for names in GROUPS.values() for m in names[1:]}
    chosen = [m for m in MUTANTS if m.name not in grouped and (not only or m.name in only)]
    server = args.server
    started_server = None
    if server is None and any(m.server for m in chosen):
        from tests.support.realserver import RealServer

        started_server = RealServer()
        started_server.start()
        server = f"mongodb://127.0.0.1:{started_server.port}"
    rows = []
    try:
        with tempfile.TemporaryDirectory(prefix="mongosched-mutants-") as scratch:
            control = Path(scratch) / "control"
            _copy(control)
            passed, output, took = _run(control, args.seed, args.examples, server)
            print(
                f"unchanged code, seed {args.seed}: {'passes' if passed else 'FAILS'} "
                f"({took:.0f} s)",
                flush=True,
            )
            if not passed:
                print(_program(output))
                return 1
            for mutant in chosen:
                copy = Path(scratch) / mutant.name
                _copy(copy)
                for name in GROUPS.get(mutant.name, (mutant.name,)):
                    _apply(copy, next(m for m in MUTANTS if m.name == name))
                passed, output, took = _run(
                    copy, args.seed, args.examples, server if mutant.server else None
                )
                verdict = "survived" if passed else "killed"
                rows.append((mutant, verdict, took))
                print(
                    f"\n== {mutant.name} (item {mutant.item}): {mutant.what}: "
                    f"{verdict} in {took:.0f} s",
                    flush=True,
                )
                if not passed:
                    print(textwrap.indent(_program(output), "    "), flush=True)
                shutil.rmtree(copy, ignore_errors=True)
    finally:
        if started_server is not None:
            started_server.kill()
    killed = sum(1 for _, verdict, _ in rows if verdict == "killed")
    print(
        f"\n{killed} of {len(rows)} mutants killed (seed {args.seed}, "
        f"up to {args.examples} examples each)"
    )
    return 0 if killed == len(rows) else 1


if __name__ == "__main__":
    sys.exit(main())
