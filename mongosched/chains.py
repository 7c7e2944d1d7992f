"""``chain`` and ``group``: workflows made of dependencies (``configure(depends_on=...)``),
nothing more: each step of a chain waits for every job of the step before it.

>>> chain(fetch.job(url), [resize.job(128), resize.job(512)], publish.job())  # doctest: +SKIP

schedules ``fetch``, then both ``resize`` jobs (in parallel, once ``fetch`` completed),
then ``publish`` (once both completed). A failure ends the rest of the chain cancelled,
as any dependency does (see :doc:`/flow-control`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from mongosched.errors import ConfigurationError
from mongosched.job import Job
from mongosched.task import JobSpec

__all__ = ["chain", "group"]

Step = JobSpec | Sequence[JobSpec]


def group(*specs: JobSpec) -> list[Job[Any]]:
    """Schedule ``specs`` together (in one round trip); they run in parallel. Returns
    their jobs in order."""
    if not specs:
        raise ConfigurationError("group: give at least one task.job(...)")
    for spec in specs:
        _check(spec, "group", free=False)
    return _schedule(specs)


def _schedule(specs: Sequence[JobSpec]) -> list[Job[Any]]:
    return specs[0].task.app.schedule_bulk(list(specs))


def chain(*steps: Step, on_dependency_failure: str = "cancel") -> list[list[Job[Any]]]:
    """Schedule ``steps`` one after another: each a ``task.job(...)`` or a list of them
    (run in parallel), each waiting for every job of the step before it (with
    ``on_dependency_failure`` for each wait). Returns the jobs of each step."""
    if not steps:
        raise ConfigurationError("chain: give at least one step")
    scheduled: list[list[Job[Any]]] = []
    previous: list[Job[Any]] = []
    for step in steps:
        given: list[Any] = list(step) if isinstance(step, (list, tuple)) else [step]
        if not given:
            raise ConfigurationError("chain: a step is an empty list")
        for spec in given:
            _check(spec, "chain")
        specs: list[JobSpec] = given
        if previous:
            specs = [
                replace(
                    spec,
                    options=replace(
                        spec.options,
                        depends_on=[job.id for job in previous],
                        on_dependency_failure=on_dependency_failure,
                    ),
                )
                for spec in specs
            ]
        previous = _schedule(specs)
        scheduled.append(previous)
    return scheduled


def _check(spec: Any, what: str, free: bool = True) -> None:
    if not isinstance(spec, JobSpec):
        raise ConfigurationError(
            f"{what} takes task.job(...) specs (or lists of them), not {type(spec).__name__}"
        )
    if free and spec.options.depends_on is not None:
        raise ConfigurationError(
            f"{what}: task {spec.task.name!r}: a step's dependencies are the step before it; "
            "give no depends_on"
        )
