"""Durable workflows in the in-memory store (as :mod:`mongosched.store.mongo.workflows`
keeps them in MongoDB): each workflow's recorded positions and the events sent to it,
values kept as BSON and decoded afresh for each read, each operation one step under the
store's lock."""

from __future__ import annotations

import itertools
from dataclasses import replace
from datetime import datetime
from typing import Any

from mongosched._core.records import JobStatus
from mongosched._core.steps import StepRecord
from mongosched._core.transitions import ms
from mongosched.store import codec
from mongosched.store.memory.table import MemoryTable

__all__ = ["MemoryWorkflows"]


def _kept(value: Any) -> bytes:
    return codec.encode_value("workflow", "value", value, codec.MAX_PAYLOAD_BYTES)


def _read(data: bytes) -> Any:
    return codec.decode(data)["v"]


class MemoryWorkflows:
    """The workflow operations of :class:`~mongosched.store.memory.MemoryStore`."""

    def __init__(self, table: MemoryTable) -> None:
        self.table = table
        self._steps: dict[Any, dict[int, tuple[StepRecord, bytes]]] = {}
        self._events: dict[tuple[Any, str], list[tuple[Any, bytes]]] = {}
        self._ids = itertools.count(1)

    def prepare_workflows(self) -> None:
        """Nothing to prepare in memory."""

    def steps(self, workflow_id: Any) -> list[StepRecord]:
        with self.table.lock:
            held = sorted(self._steps.get(workflow_id, {}).items())
        return [replace(step, value=_read(value)) for _, (step, value) in held]

    def record_step(self, step: StepRecord, token: str | None) -> StepRecord:
        value = _kept(step.value)
        step = replace(
            step,
            started_at=None if step.started_at is None else ms(step.started_at),
            finished_at=None if step.finished_at is None else ms(step.finished_at),
            until=None if step.until is None else ms(step.until),
        )
        with self.table.lock:
            held = self._steps.setdefault(step.workflow, {})
            if step.position in held:  # another holder recorded it first: its record wins
                step, value = held[step.position]
            else:
                held[step.position] = (replace(step, value=None), value)
        return replace(step, value=_read(value))

    def fence_workflow(self, job_id: Any, token: str, now: datetime) -> bool:
        with self.table.lock:
            stored = self.table.jobs.get(job_id)
            if stored is None:
                return False
            record = stored.record
            lease = record.lease
            return record.status is JobStatus.RUNNING and lease is not None and lease.token == token

    def forget_steps(self, workflow_id: Any, from_position: int) -> int:
        with self.table.lock:
            held = self._steps.get(workflow_id, {})
            gone = [p for p in held if p >= from_position]
            for position in gone:
                del held[position]
        return len(gone)

    def send_event(self, workflow_id: Any, topic: str, value: Any, now: datetime) -> Any:
        data = _kept(value)
        with self.table.lock:
            event_id = next(self._ids)
            self._events.setdefault((workflow_id, topic), []).append((event_id, data))
        return event_id

    def events(self, workflow_id: Any, topic: str) -> list[tuple[Any, Any]]:
        with self.table.lock:
            held = list(self._events.get((workflow_id, topic), ()))
        return [(event_id, _read(data)) for event_id, data in held]
