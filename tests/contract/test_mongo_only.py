"""What only the MongoDB store has: indexes. On SecantusDB, the wire stand-in and (with
``MONGOSCHED_TEST_URI``) a real MongoDB; the query plan only on a real MongoDB."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

import pytest

from mongosched._core import ranks
from mongosched._core.records import JobQuery, PendingChanges
from mongosched.store.mongo import MongoStore
from mongosched.store.mongo.documents import RANK_SORT, RANKED
from mongosched.store.mongo.indexes import INDEXES, PERMIT_INDEXES
from mongosched.store.mongo.updates import claim_query

from .helpers import (
    LATER,
    T0,
    add,
    as_stored,
    batch,
    claimed,
    job,
    sec,
    settle_and_claim,
    succeeded,
)
from .test_settle_fence import WHEN, WRITES, claimed_pair

if TYPE_CHECKING:
    from tests.support.server_fixtures import SharedDatabase

pytest_plugins = ["tests.support.server_fixtures"]


def keys(info: Mapping[str, Any]) -> list[tuple[str, int]]:
    return [(field, int(direction)) for field, direction in info["key"]]


def plain(value: Any) -> Any:
    """Documents as plain dicts (a server's replies may be SON)."""
    if isinstance(value, Mapping):
        return {k: plain(v) for k, v in value.items()}
    return value


def test_the_documented_query_filters_lead_an_index(mongo_store: MongoStore) -> None:
    """Each filter combination ``get_jobs`` documents is a prefix of some index on the
    server, with the documented sort field right after it; claims and the reaper's
    queries lead theirs."""
    mongo_store.prepare()
    info = mongo_store.connection.jobs.index_information()
    fields = [[field for field, _ in keys(index)] for index in info.values()]
    for filters, sort in [
        (["task"], "updated_at"),
        (["task", "status"], "updated_at"),
        (["status"], "updated_at"),
        (["status", "queue", "task", "priority"], "run_at"),  # claim, queues listed
        (["status", "task", "priority"], "run_at"),  # claim, every queue
        (["status"], "run_at"),  # the job due longest
        (["status"], "finished_at"),  # purge
        (["status"], "lease.until"),  # expired, running
    ]:
        assert any(f[: len(filters) + 1] == [*filters, sort] for f in fields), (filters, fields)
    assert [f for f, _ in keys(info["claim_by_task"])] == [
        "status",
        "queue",
        "task",
        "priority",
        "run_at",
    ]


def test_reads_create_no_index(mongo_store: MongoStore) -> None:
    """A read-only database user can look at jobs: no read creates an index (or a
    collection); only :meth:`prepare` does."""
    store = mongo_store
    now = datetime.now(timezone.utc)
    assert store.jobs.get(store.parse_id("0123456789abcdef01234567")) is None
    assert store.jobs.find(JobQuery()) == [] and store.jobs.count(JobQuery()) == 0
    assert store.jobs.counts() == {} and store.jobs.schedules() == [] and store.jobs.running() == []
    assert store.jobs.oldest_due(now) is None and store.jobs.unknown_due_tasks([], now) == {}
    assert store.leases.leases_expired(now) == [] and store.permits.permit_holders("t", now) == 0
    assert set(store.connection.jobs.index_information()) <= {"_id_"}
    assert set(store.connection.permits.index_information()) <= {"_id_"}
    assert store.connection.database.list_collection_names() == []
    store.prepare()
    assert "claim_by_task" in store.connection.index_names()


def test_prepare_creates_every_index_with_its_options(mongo_store: MongoStore) -> None:
    mongo_store.prepare()
    mongo_store.prepare()  # idempotent
    for collection, expected in (
        (mongo_store.connection.jobs, INDEXES),
        (mongo_store.connection.permits, PERMIT_INDEXES),
    ):
        info = collection.index_information()
        assert set(info) == {"_id_", *(options["name"] for _, options in expected)}
        for spec, options in expected:
            index = info[options["name"]]
            assert keys(index) == list(spec), options["name"]
            assert bool(index.get("unique")) == bool(options.get("unique")), options["name"]
            assert plain(index.get("partialFilterExpression")) == options.get(
                "partialFilterExpression"
            ), options["name"]
            assert index.get("expireAfterSeconds") == options.get("expireAfterSeconds")
    info = mongo_store.connection.jobs.index_information()
    assert info["dedupe_active"]["unique"] and info["dedupe_pending"]["unique"]
    assert info["expire_at"]["expireAfterSeconds"] == 0
    assert set(mongo_store.connection.index_names()) == set(info)


def test_prepare_on_a_database_in_use(mongo_store: MongoStore) -> None:
    """Preparing again (a new deploy) changes nothing of the jobs already there."""
    mongo_store.prepare()
    queued = add(mongo_store, job(dedupe_key="k"), job(dedupe_key="p", dedupe_scope="pending"))
    running = claimed(mongo_store)
    mongo_store.prepare()
    assert mongo_store.jobs.get(running.id) == running
    assert mongo_store.jobs.insert([job(dedupe_key="k")])[0][0].id == queued[0].id


# The query plan (a real MongoDB only) ----------------------------------------------------------------
def plans_only_on_mongodb(substrate: str) -> None:
    """The query plan tests run on a real MongoDB (``MONGOSCHED_TEST_URI``, as in the
    GitHub Actions workflow). SecantusDB's planner chooses a collection scan for the
    claim where MongoDB's uses the claim index (pinned in tests/meta/test_realserver.py):
    the index design follows MongoDB's planner, not that one."""
    if substrate == "server":
        pytest.skip(
            "SecantusDB's planner scans the collection for the claim where MongoDB uses "
            "the claim index: query plans are checked on a real MongoDB (MONGOSCHED_TEST_URI)"
        )
    if substrate != "mongodb":
        pytest.skip("query plans need a real MongoDB (MONGOSCHED_TEST_URI)")


class Recording:
    """The job collection, recording the filter, update and sort of each
    ``find_one_and_update`` the store sends."""

    def __init__(self, collection: Any) -> None:
        self.collection = collection
        self.calls: list[dict[str, Any]] = []

    def find_one_and_update(self, filter: Any, update: Any, **options: Any) -> Any:
        self.calls.append({"query": filter, "update": update, **options})
        return self.collection.find_one_and_update(filter, update, **options)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.collection, name)


def explain_claim(
    store: MongoStore, queues: tuple[str, ...] | None, verbosity: str
) -> Mapping[str, Any]:
    """The server's plan for the claim ``store`` sends for task ``t`` (which claims a
    job): its ``findAndModify``, recorded, then explained."""
    recording = Recording(store.connection.jobs)
    store.connection.jobs = recording
    try:
        got = store.claims.claim(
            owner="me", tasks=("t",), queues=queues, now=LATER, lease_duration=30
        )
    finally:
        store.connection.jobs = recording.collection
    assert got is not None
    [call] = recording.calls
    command = {
        "findAndModify": recording.collection.name,
        "query": call["query"],
        "update": call["update"],
        "sort": dict(call.get("sort") or []),
        "new": True,
        **({"hint": call["hint"]} if call.get("hint") is not None else {}),
    }
    return dict(store.connection.database.command("explain", command, verbosity=verbosity))


def stages(plan: Any) -> Iterator[Mapping[str, Any]]:
    """Every stage of an explained plan (classic or slot-based, however nested)."""
    if isinstance(plan, Mapping):
        if "stage" in plan:
            yield plan
        for value in plan.values():
            yield from stages(value)
    elif isinstance(plan, list):
        for value in plan:
            yield from stages(value)


@pytest.mark.parametrize("queues", [("default",), None], ids=["queues", "any-queue"])
def test_a_claim_uses_its_index(
    mongo_store: MongoStore, substrate: str, queues: tuple[str, ...] | None
) -> None:
    plans_only_on_mongodb(substrate)
    store = mongo_store
    store.prepare()
    # Work the plan must skip over: other queues, other statuses, jobs not yet due.
    add(store, *[job(queue=f"q{n % 5}", priority=1, at=T0 - sec(n)) for n in range(200)])
    add(store, *[job(at=LATER + sec(n)) for n in range(100)], job())
    for _ in range(50):
        claimed(store, queues=("q0", "q1"))
    explained = explain_claim(store, queues, "queryPlanner")
    winning = list(stages(explained["queryPlanner"]["winningPlan"]))
    kinds = {stage["stage"] for stage in winning}
    indexes = {stage.get("indexName") for stage in winning if stage["stage"] == "IXSCAN"}
    assert "COLLSCAN" not in kinds, explained["queryPlanner"]["winningPlan"]
    assert "SORT" not in kinds, explained["queryPlanner"]["winningPlan"]  # the index sorts
    expected = "claim_by_task" if queues is not None else "claim_by_task_any_queue"
    assert indexes == {expected}, explained["queryPlanner"]["winningPlan"]


def test_a_claim_examines_about_one_key_at_a_large_backlog(
    mongo_store: MongoStore, substrate: str
) -> None:
    """100,000 due jobs of another task in front: the claim of this task's one due job
    still examines a handful of index keys (the task is in the claim index)."""
    plans_only_on_mongodb(substrate)
    store = mongo_store
    store.prepare()
    for chunk in range(10):
        add(
            store,
            *[job("other", priority=1, at=T0 - sec(chunk * 10_000 + n)) for n in range(10_000)],
        )
    add(store, job())
    explained = explain_claim(store, None, "executionStats")
    stats = explained["executionStats"]
    assert stats["totalKeysExamined"] <= 3 and stats["totalDocsExamined"] <= 2, stats


@pytest.mark.parametrize("queues", [("default",), None], ids=["queues", "any-queue"])
def test_a_ranked_claim_reads_its_index_without_scanning_the_backlog(
    mongo_store: MongoStore, substrate: str, queues: tuple[str, ...] | None
) -> None:
    """Fair shares: one key's 5,000 jobs ahead, and another key's one; the ranked find
    of the claim is sorted by the ranked index and examines a handful of keys."""
    plans_only_on_mongodb(substrate)
    store = mongo_store
    store.prepare()
    add(store, *[job("fair", fair_key="A") for _ in range(5_000)])
    add(store, job("fair", fair_key="B"), *[job(at=LATER + sec(n)) for n in range(100)])
    query = {**claim_query(("fair",), queues, LATER), **RANKED}
    command = {"find": store.jobs.name, "filter": query, "sort": dict(RANK_SORT), "limit": 2}
    explained = store.transactions.database.command("explain", command, verbosity="executionStats")
    winning = list(stages(explained["queryPlanner"]["winningPlan"]))
    kinds = {stage["stage"] for stage in winning}
    indexes = {stage.get("indexName") for stage in winning if stage["stage"] == "IXSCAN"}
    assert "COLLSCAN" not in kinds and "SORT" not in kinds, explained["queryPlanner"]
    expected = "claim_ranked" if queues is not None else "claim_ranked_any_queue"
    assert indexes == {expected}, explained["queryPlanner"]["winningPlan"]
    stats = explained["executionStats"]
    assert stats["totalKeysExamined"] <= 4 and stats["totalDocsExamined"] <= 3, stats
    assert stats["nReturned"] == 2
    got = store.claims.claim_batch(
        owner="me",
        tasks=("fair", "t"),
        queues=queues,
        now=LATER,
        lease_duration=30,
        limit=2,
        ranked=("fair",),
    )
    assert sorted(r.fair_key or "" for r in got) == ["A", "B"]


def test_the_uri_read_preference_applies_to_listings_only(shared_db: SharedDatabase) -> None:
    """``readPreference=secondaryPreferred`` in the URI moves listings and counts off the
    primary; claims, fenced writes and reads by id stay on it (they decide what runs)."""
    from pymongo import ReadPreference

    store = MongoStore(uri=shared_db.uri(readPreference="secondaryPreferred"))
    try:
        assert store.connection.jobs.read_preference == ReadPreference.PRIMARY
        assert store.connection.permits.read_preference == ReadPreference.PRIMARY
        assert store.connection.queries.read_preference == ReadPreference.SECONDARY_PREFERRED
        store.prepare()
        (added,) = add(store, job())
        assert store.jobs.get(added.id) == added  # by id: the primary, read your write
        assert [r.id for r in store.jobs.find(JobQuery())] == [added.id]
        assert store.jobs.count(JobQuery()) == 1
    finally:
        store.close()


@pytest.mark.parametrize("many", [False, True], ids=["settle", "settle_many"])
def test_a_result_is_encoded_once_on_its_way_to_the_server(
    mongo_store: MongoStore, monkeypatch: pytest.MonkeyPatch, many: bool
) -> None:
    """The size check's encoding is what is written: a Decimal in a result passes
    through the codec once (twice if the write encoded the result again)."""
    from decimal import Decimal

    from bson import Decimal128

    from mongosched.store import codec

    mongo_store.prepare()
    add(mongo_store, job(), job())
    first, second = claimed(mongo_store), claimed(mongo_store)
    calls: list[Any] = []
    monkeypatch.setattr(codec, "Decimal128", lambda v: calls.append(v) or Decimal128(v))
    result = {"total": Decimal("12.50"), "rows": [1, 2]}
    if many:
        settled = mongo_store.claims.settle_many(
            [(first, succeeded(first, result=result)), (second, succeeded(second, result=result))]
        )
        assert len(calls) == 2  # one per job
    else:
        settled = [mongo_store.leases.settle(first, succeeded(first, result=result))]
        assert len(calls) == 1
    for record in settled:
        assert record is not None and not isinstance(record, Exception)
        assert record.result == result == mongo_store.jobs.get(record.id).result  # type: ignore[union-attr]


class _Watched:
    """A store's jobs collection that records the calls made on it, and the commands
    sent through its database (by command name: a batched claim's ``find`` and
    ``update``), and can run ``on_claim_read`` right after a claim has read its
    candidates."""

    def __init__(self, collection: Any, on_claim_read: Any = None) -> None:
        self.collection = collection
        self.on_claim_read = on_claim_read
        self.calls: list[str] = []

    def find(self, filter: Any = None, *args: Any, **kwargs: Any) -> Any:
        self.calls.append("find")
        found = list(self.collection.find(filter, *args, **kwargs))
        self._read(filter)
        return found

    def _read(self, filter: Any) -> None:
        if self.on_claim_read is not None and isinstance(filter, Mapping) and "run_at" in filter:
            edit, self.on_claim_read = self.on_claim_read, None
            edit()

    @property
    def database(self) -> Any:
        watched, database = self, self.collection.database

        class Commands:
            def command(self, command: Any, *args: Any, **kwargs: Any) -> Any:
                name = command if isinstance(command, str) else next(iter(command))
                watched.calls.append(name)
                reply = database.command(command, *args, **kwargs)
                if name == "find":
                    watched._read(command.get("filter"))
                return reply

            def __getattr__(self, name: str) -> Any:
                return getattr(database, name)

        return Commands()

    def __getattr__(self, name: str) -> Any:
        attribute = getattr(self.collection, name)
        if callable(attribute):

            def call(*args: Any, **kwargs: Any) -> Any:
                self.calls.append(name)
                return attribute(*args, **kwargs)

            return call
        return attribute


def _watch(
    monkeypatch: pytest.MonkeyPatch, store: MongoStore, on_claim_read: Any = None
) -> _Watched:
    watched = _Watched(store.connection.jobs, on_claim_read)
    monkeypatch.setattr(type(store.connection), "jobs", property(lambda self: watched))
    return watched


@pytest.mark.parametrize("change", ["args", "priority", "has_dependents"])
def test_a_batched_claim_returns_a_job_edited_after_its_read_as_edited(
    mongo_store: MongoStore, monkeypatch: pytest.MonkeyPatch, change: str
) -> None:
    """A batched claim computes the jobs it claimed from the documents it read, unless
    one changed meanwhile (its ``rev``): a job edited between the read and the claim's
    write is left pending, as edited, for the next claim, and the others are read back."""
    from mongosched._core.records import PendingChanges

    jobs = add(mongo_store, *[job(args=(n,)) for n in range(4)])
    target = jobs[1]
    edits: list[str] = []

    def edit() -> None:
        edits.append(change)
        if change == "args":
            assert mongo_store.jobs.update_pending(target, PendingChanges(args=("edited",)), T0)
        elif change == "priority":
            assert mongo_store.jobs.update_pending(target, PendingChanges(priority=5), T0)
        else:
            mongo_store.dependents.link_dependencies([target.id], T0)

    watched = _watch(monkeypatch, mongo_store, edit)
    got = batch(mongo_store, 4)
    monkeypatch.undo()
    assert edits == [change]
    assert watched.calls[-2:] == ["update", "find"]  # its update missed: read back
    assert target.id not in {r.id for r in got} and len(got) == 3
    as_stored(mongo_store, got)  # each claim is the job as stored
    again = batch(mongo_store, 4)
    assert [r.id for r in again] == [target.id]  # pending still, and claimed as edited
    edited = again[0]
    assert edited == mongo_store.jobs.get(target.id)
    assert edited.args == (("edited",) if change == "args" else (1,))
    assert edited.priority == (5 if change == "priority" else jobs[0].priority)
    assert edited.has_dependents is (change == "has_dependents")


def test_a_batched_claim_that_misses_nothing_is_two_round_trips(
    mongo_store: MongoStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The claimed jobs are computed from the documents read, not read back: a read and
    a write, and each record is what the store then holds."""
    add(mongo_store, *[job(args=(n,)) for n in range(5)])
    watched = _watch(monkeypatch, mongo_store)
    got = batch(mongo_store, 4)
    monkeypatch.undo()
    assert watched.calls == ["find", "update"]
    as_stored(mongo_store, got, (0,), (1,), (2,), (3,))


def test_outcomes_written_with_a_batched_claim_take_no_round_trip_of_their_own(
    mongo_store: MongoStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """settle_and_claim: the settlements ride in the claim's bulk write (a read and a
    write for both), and every record returned is what the store then holds."""
    add(mongo_store, *[job(args=(n,)) for n in range(7)])
    finished = batch(mongo_store, 3)
    watched = _watch(monkeypatch, mongo_store)
    outcomes = [(r, succeeded(r, LATER + sec(1), result=n)) for n, r in enumerate(finished)]
    settled, got = settle_and_claim(mongo_store, outcomes, 4, now=LATER + sec(1))
    monkeypatch.undo()
    assert watched.calls == ["find", "update"]
    assert [r.args for r in got] == [(3,), (4,), (5,), (6,)]
    for record in [*settled, *got]:
        assert record == mongo_store.jobs.get(record.id)  # type: ignore[union-attr]
    assert [r.result for r in settled] == [0, 1, 2]  # type: ignore[union-attr]


@pytest.mark.parametrize("write", [None, *(n for n, w in WRITES.items() if not w.repeating)])
def test_a_batched_settlement_of_a_job_written_since_its_claim_is_settled_alone(
    mongo_store: MongoStore, monkeypatch: pytest.MonkeyPatch, write: str | None
) -> None:
    """settle_many computes the records of the settlements that landed as claimed: one
    bulk write. A job written to since its claim, even within the claim's millisecond
    (``updated_at`` unchanged), fails that fence: the ids are read back and that job is
    settled alone, as :meth:`MongoStore.leases.settle` settles it (the bystander is not)."""
    target, bystander = claimed_pair(mongo_store, write or "progress")
    if write is not None:
        WRITES[write].make(mongo_store, target, WHEN["same_ms"])
    at = LATER + sec(2)
    watched = _watch(monkeypatch, mongo_store)
    results = mongo_store.claims.settle_many(
        [(target, succeeded(target, at)), (bystander, succeeded(bystander, at))]
    )
    monkeypatch.undo()
    if write is None:
        assert watched.calls == ["update"]
    else:
        assert watched.calls[:2] == ["update", "find"]  # the ids, read back
        assert set(watched.calls[2:]) == {"find_one_and_update"}  # the target, alone
    assert results == [mongo_store.jobs.get(target.id), mongo_store.jobs.get(bystander.id)]


def test_an_edit_between_a_placement_s_read_and_its_write_is_not_undone(
    mongo_store: MongoStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An unplaced fair job's placement reads it, ranks it, and writes its rank; a
    priority edit landing between the read and the write keeps its rank (the job is
    still unplaced), so a write fenced on the rank alone placed the job by the
    priority it had before the edit. The write is fenced on the job as read: the edit
    wins, and the next placement ranks the job by its new priority."""
    mongo_store.prepare()
    add(mongo_store, *[job("fair", priority=5, fair_key="A") for _ in range(5)])
    (late,) = add(mongo_store, job("fair", priority=5, at=T0 + sec(9), fair_key="C"))
    fair = mongo_store.claims.fair  # type: ignore[attr-defined]
    rank = fair.rank

    def rank_after_an_edit(docs: Any, now: Any = None) -> None:
        edited = mongo_store.jobs.update_pending(late, PendingChanges(priority=1), T0)
        assert edited is not None
        rank(docs, now)

    def placed() -> tuple[Any, Any]:
        stored = mongo_store.jobs.get(late.id)
        assert stored is not None and stored.priority == 1
        return stored.fair_at, stored.rank

    monkeypatch.setattr(fair, "rank", rank_after_an_edit)
    fair.place(("fair",), None, T0 + sec(10), 100)
    fair_at, stored_rank = placed()
    assert fair_at is None  # the edit came after the read: not placed by the old priority
    monkeypatch.setattr(fair, "rank", rank)
    fair.place(("fair",), None, T0 + sec(10), 100)
    fair_at, stored_rank = placed()
    assert fair_at is not None and stored_rank == ranks.rank(fair_at, 1, None)


def test_a_runners_batched_claim_gives_back_landed_settlements_without_their_records(
    mongo_store: MongoStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``records=False`` (a runner's batched claim): a settlement that landed as written
    comes back as a Landed, and no settled record is made until one is asked for; the
    record it then makes is the job as stored."""
    from mongosched._core import transitions
    from mongosched.store.parts import Landed

    add(mongo_store, *[job(args=(n,)) for n in range(4)])
    first, second = batch(mongo_store, 2)
    made: list[object] = []
    settled = transitions.settled

    def counting(*args: Any) -> Any:
        made.append(args[0].id)
        return settled(*args)

    monkeypatch.setattr(transitions, "settled", counting)
    items = [(first, succeeded(first, LATER, result=1)), (second, succeeded(second, LATER))]
    results, got = settle_and_claim(mongo_store, items, 2, records=False)
    assert len(got) == 2 and all(isinstance(r, Landed) for r in results)
    assert made == []  # nothing built for the write
    assert [r.record() for r in results] == [mongo_store.jobs.get(j.id) for j in (first, second)]
    assert made == [first.id, second.id]
