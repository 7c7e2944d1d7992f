"""Durable workflows in MongoDB: the steps history (``<prefix>_steps``: one document per
recorded position, unique on workflow and position) and the events sent to workflows
and published by them (``<prefix>_events``). ``<prefix>`` is the job collection's name
without its ``_jobs`` ending: ``mongosched_steps`` beside ``mongosched_jobs``."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pymongo import ASCENDING
from pymongo.collection import Collection
from pymongo.errors import DuplicateKeyError

from mongosched._core.steps import StepKind, StepRecord
from mongosched._core.transitions import ms
from mongosched.store import codec
from mongosched.store.mongo.connection import MongoConnection
from mongosched.store.mongo.documents import aware
from mongosched.store.mongo.indexes import Index

__all__ = ["STEP_INDEXES", "MongoWorkflows", "step_document", "step_record"]

STEP_INDEXES: list[Index] = [([("workflow", ASCENDING), ("position", ASCENDING)], {"unique": True})]
EVENT_INDEXES: list[Index] = [
    ([("workflow", ASCENDING), ("topic", ASCENDING), ("at", ASCENDING)], {})
]


def step_document(step: StepRecord, token: str | None) -> dict[str, Any]:
    """The stored form of ``step`` (its value wrapped, so any BSON value fits)."""
    return {
        "workflow": step.workflow,
        "position": step.position,
        "name": step.name,
        "kind": step.kind.value,
        "value": {"v": step.value},
        "error": step.error,
        "attempts": step.attempts,
        "started_at": None if step.started_at is None else ms(step.started_at),
        "finished_at": None if step.finished_at is None else ms(step.finished_at),
        "until": None if step.until is None else ms(step.until),
        "children": list(step.children),
        "event": step.event,
        "size": step.size,
        "token": token,
    }


def step_record(doc: dict[str, Any]) -> StepRecord:
    return StepRecord(
        workflow=doc["workflow"],
        position=int(doc["position"]),
        name=str(doc["name"]),
        kind=StepKind(doc["kind"]),
        value=(doc.get("value") or {}).get("v"),
        error=doc.get("error"),
        attempts=int(doc.get("attempts") or 1),
        started_at=aware(doc.get("started_at")),
        finished_at=aware(doc.get("finished_at")),
        until=aware(doc.get("until")),
        children=tuple(doc.get("children") or ()),
        event=doc.get("event"),
        size=int(doc.get("size") or 0),
    )


class MongoWorkflows:
    """The workflow operations of :class:`~mongosched.store.mongo.MongoStore`."""

    def __init__(self, connection: MongoConnection) -> None:
        self.connection = connection
        base = connection.collection_name
        base = base[: -len("_jobs")] if base.endswith("_jobs") else base
        self.steps_name = f"{base}_steps"
        self.events_name = f"{base}_events"

    def _bound(self, name: str) -> Collection[dict[str, Any]]:
        collection = self.connection.database.get_collection(
            name, codec_options=codec.CODEC_OPTIONS
        )
        transaction = self.connection.transaction
        return collection if transaction is None else transaction.bind(collection)  # type: ignore[no-any-return]

    def prepare_workflows(self) -> None:
        for name, indexes in ((self.steps_name, STEP_INDEXES), (self.events_name, EVENT_INDEXES)):
            for keys, options in indexes:
                collection = self._bound(name)

                def create(_: int, c: Any = collection, k: Any = keys, o: Any = options) -> str:
                    return str(c.create_index(k, **o))

                self.connection.retrying("create index", create)

    def steps(self, workflow_id: Any) -> list[StepRecord]:
        steps = self._bound(self.steps_name)
        docs = self.connection.retrying(
            "steps",
            lambda _: list(steps.find({"workflow": workflow_id}).sort("position", ASCENDING)),
        )
        return [step_record(doc) for doc in docs]

    def record_step(self, step: StepRecord, token: str | None) -> StepRecord:
        steps = self._bound(self.steps_name)
        doc = step_document(step, token)
        doc["_id"] = codec.new_id()  # made here: an insert repeated finds its own

        def insert(_: int) -> dict[str, Any]:
            try:
                steps.insert_one(dict(doc))
                return doc
            except DuplicateKeyError:  # another holder recorded it first: its record wins
                if self.connection.transaction is not None:
                    raise
                found = steps.find_one({"workflow": step.workflow, "position": step.position})
                assert found is not None, "a duplicate key names a stored step"
                return found

        return step_record(self.connection.retrying("record step", insert))

    def fence_workflow(self, job_id: Any, token: str, now: datetime) -> bool:
        """In a transaction: a write to the workflow's job fenced on its lease, so
        that the transaction commits only while the lease is this holder's."""
        jobs = self.connection.jobs
        result = self.connection.retrying(
            "fence workflow",
            lambda _: jobs.update_one(
                {"_id": job_id, "lease.token": token, "status": "running"},
                {"$set": {"updated_at": ms(now)}},
            ),
        )
        return bool(result.matched_count)

    def forget_steps(self, workflow_id: Any, from_position: int) -> int:
        steps = self._bound(self.steps_name)
        result = self.connection.retrying(
            "forget steps",
            lambda _: steps.delete_many(
                {"workflow": workflow_id, "position": {"$gte": from_position}}
            ),
        )
        return int(result.deleted_count)

    def send_event(self, workflow_id: Any, topic: str, value: Any, now: datetime) -> Any:
        events = self._bound(self.events_name)
        doc = {"_id": codec.new_id(), "workflow": workflow_id, "topic": topic}
        doc.update({"value": {"v": value}, "at": ms(now)})

        def insert(_: int) -> Any:
            try:
                events.insert_one(dict(doc))
            except DuplicateKeyError:  # a repeat after a lost reply: it landed
                pass
            return doc["_id"]

        return self.connection.retrying("send event", insert)

    def events(self, workflow_id: Any, topic: str) -> list[tuple[Any, Any]]:
        events = self._bound(self.events_name)
        docs = self.connection.retrying(
            "events",
            lambda _: list(
                events.find({"workflow": workflow_id, "topic": topic}).sort(
                    [("at", ASCENDING), ("_id", ASCENDING)]
                )
            ),
        )
        return [(doc["_id"], (doc.get("value") or {}).get("v")) for doc in docs]
