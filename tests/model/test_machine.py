"""The model's stateful test: ``memory://`` and the server (SecantusDB, or
``MONGOSCHED_TEST_URI``) stepped side by side and held to the reference model after
every step (see tests/model/machine.py).

``make test`` runs a bounded number of examples, derandomized (the same sequences at
every run, no example database). ``make soak`` runs 500 random examples of up to 30
steps (about 15,000 steps, each one checked) from a seed it prints:
``MONGOSCHED_MODEL_SEED=N make soak PYTEST_ARGS="tests/model -k soak"`` replays it
(``MONGOSCHED_MODEL_SOAK_EXAMPLES`` sets how many examples).
"""

from __future__ import annotations

import os
import random
import time
from collections.abc import Iterator
from typing import Any

import hypothesis.core
import pytest
from hypothesis import HealthCheck, Phase, settings
from hypothesis.stateful import run_state_machine_as_test

from tests.conftest import TEST_URI
from tests.model import machine

EXAMPLES = int(os.environ.get("MONGOSCHED_MODEL_EXAMPLES", "12"))
SOAK_EXAMPLES = int(os.environ.get("MONGOSCHED_MODEL_SOAK_EXAMPLES", "500"))
STEPS = 30


def budget(examples: int, *, derandomize: bool) -> settings:
    return settings(
        max_examples=examples,
        stateful_step_count=STEPS,
        derandomize=derandomize,
        database=None,
        deadline=None,
        print_blob=True,
        # The explain phase replays every failure many times over: on the server
        # that takes minutes, and the shrunk program is what a reader needs.
        phases=[Phase.explicit, Phase.generate, Phase.shrink],
        suppress_health_check=list(HealthCheck),
    )


@pytest.fixture
def server_uri(request: pytest.FixtureRequest) -> Iterator[str]:
    """The server side's URI (MONGOSCHED_TEST_URI, else the session's SecantusDB)."""
    uri = TEST_URI or request.getfixturevalue("real_server").uri
    machine.SERVER = uri
    try:
        yield uri
    finally:
        machine.SERVER = None


def test_memory_follows_the_model() -> None:
    """``memory://`` alone: more examples, as it is fast (100 in about 30 s)."""
    machine.SERVER = None
    run_state_machine_as_test(machine.Machine, settings=budget(EXAMPLES * 5, derandomize=True))


@pytest.mark.timeout(600)
def test_both_stores_follow_the_model(server_uri: str) -> None:
    """``memory://`` and the server, side by side, and each held to the model."""
    machine.SIDES.clear()
    run_state_machine_as_test(machine.Machine, settings=budget(EXAMPLES, derandomize=True))
    assert machine.SIDES["server"] >= EXAMPLES  # the server side ran every example


@pytest.mark.soak
@pytest.mark.timeout(4 * 3600)
def test_both_stores_follow_the_model_soak(server_uri: Any) -> None:
    seed = int(os.environ.get("MONGOSCHED_MODEL_SEED", random.randrange(2**32)))
    print(f"\nmodel soak: seed {seed} (MONGOSCHED_MODEL_SEED={seed} replays it)", flush=True)
    forced = hypothesis.core.global_force_seed
    hypothesis.core.global_force_seed = seed  # what pytest's --hypothesis-seed sets
    machine.TOTALS.clear()
    started = time.monotonic()
    try:
        run_state_machine_as_test(
            machine.Machine, settings=budget(SOAK_EXAMPLES, derandomize=False)
        )
    finally:
        hypothesis.core.global_force_seed = forced
        print(
            f"model soak: seed {seed}, {time.monotonic() - started:.0f} s, "
            f"{', '.join(f'{k} {n}' for k, n in sorted(machine.TOTALS.items()))}",
            flush=True,
        )
