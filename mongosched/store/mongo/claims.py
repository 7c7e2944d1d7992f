"""Claims, one job or many, and settlements in batches, for
:class:`~mongosched.store.mongo.MongoStore` (a part of it, over the single settlements
of :mod:`~mongosched.store.mongo.leases`).

A single claim is one ``findAndModify`` (:meth:`MongoClaims.claim`), tagged with a
token made before the call, so that a claim whose reply was lost is found again by its
token.

A batched claim takes up to ``limit`` due jobs in two round trips whatever the limit
(up to three jobs: one round trip each, one at a time):

1. read the first ``limit`` candidates on the claim index (the claim's own filter and
   sort);
2. one unordered bulk write (one ``update`` command) of one update per candidate,
   each re-checking the whole claim filter (still pending, still due, ...) and that
   the job is still the document read (:func:`~mongosched.store.mongo.updates.claim_fence`:
   its ``rev``, which every write that changes an unstarted job's fields or makes a
   job pending sets afresh), and setting a lease under a token of its own, made
   before the call.

Under a backlog a runner's dispatcher claims batch after batch, and its read takes the
candidates of several batches at once: the next claims spend what it kept, one round
trip each (their write), for as long as :class:`~mongosched.store.parts.ReadAhead`
allows (a tenth of a second, no new due job announced, nobody else claiming from them).
The write's fence makes a kept candidate as safe as a fresh one.

When every update landed at the first try, the claimed jobs are the jobs read, as
the claim leaves them (:func:`~mongosched._core.transitions.claimed`). Otherwise
(a racing claimer took some, one changed meanwhile, a reply was lost and the write
repeated) a third round trip reads back, by id and token, the jobs whose update landed.

Each job gets its own token, as a single claim would: every later write for it
(renewal, permit, settlement) is fenced on a token that names that one lease. A racing
claimer that read the same candidates loses those updates whose filter no longer
matches; nobody takes a job twice. After a network error the bulk write is repeated
(an update that landed no longer matches) and the read back finds what landed by
token.

Both round trips are commands sent as they are (:mod:`~mongosched.store.mongo.commands`): a
``find`` of one batch and an ``update`` of many statements, without the cursor and
bulk-write objects the collection methods build around them (a large share of the
client's CPU per batch). A write concern error counts as a miss: what landed is read
back.

Several settlements are written in one unordered bulk write, each update fenced on its
own job's token (and on the job being as claimed), so one that misses never affects the
others; see :meth:`MongoClaims.settle_many`. With a backlog, the runner's dispatcher
hands the outcomes of the jobs that just finished to its next claim, and the same bulk
write carries both (:meth:`MongoClaims.settle_and_claim`): a batch of jobs costs two
round trips, not three. One read back by id resolves whichever updates missed.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any

from pymongo import ReturnDocument

from mongosched._core import ranks, transitions
from mongosched._core.records import JobRecord, Settlement, evolved
from mongosched.errors import MalformedJob, SerializationError
from mongosched.store import codec
from mongosched.store.claimant import here
from mongosched.store.mongo import commands
from mongosched.store.mongo.connection import MongoConnection, patiently
from mongosched.store.mongo.documents import (
    CLAIM_SORT,
    RANK_SORT,
    RANKED,
    RUNNING,
    aware,
    to_record,
)
from mongosched.store.mongo.fair import MongoFair
from mongosched.store.mongo.leases import MongoLeases
from mongosched.store.mongo.updates import (
    claim_fence,
    claim_query,
    claim_update,
    claim_updates,
    dedupe_hold,
    set_also,
    settle_update,
    unchanged_since_claim,
)
from mongosched.store.parts import Landed, ReadAhead
from mongosched.store.patience import Patience

__all__ = ["MongoClaims"]

log = logging.getLogger("mongosched.store")

BATCH_FROM = 3
"""A batched claim takes two round trips (three when one of its updates missed): up to
two jobs are claimed one at a time, one round trip each."""


def settled_result(task: str, settlement: Settlement) -> tuple[Any, bytes | None]:
    """The settlement's result as the job will hold it (as BSON gives it back), and
    encoded; :class:`SerializationError` when it cannot be stored."""
    if settlement.result is None:
        return None, None
    encoded = codec.encode_value(task, "return value", settlement.result)
    return codec.decode(encoded)["v"], encoded


def _claim_key(doc: dict[str, Any], now: datetime) -> tuple[float, float]:
    """Where a candidate comes in a merged claim (a malformed one first: it fails)."""
    try:
        return ranks.claim_key(
            doc["priority"], aware(doc["run_at"]), doc.get("rank"), doc.get("aging"), now
        )
    except (KeyError, TypeError, ValueError):
        return (0.0, 0.0)


def _merged(found: list[list[dict[str, Any]]], now: datetime, limit: int) -> list[dict[str, Any]]:
    """The first ``limit`` of several finds' candidates, each find's in its own order
    (a task's ranked jobs in rank order), the next taken from the find whose next one
    has the least :func:`_claim_key`; on equal keys, from the earlier find (the
    ordinary jobs', then the ranked tasks' in the order given), as memory:// merges
    them."""
    keys = [[_claim_key(doc, now) for doc in docs] for docs in found]
    heads = [0] * len(found)
    merged: list[dict[str, Any]] = []
    while len(merged) < limit:
        best, key = None, None
        for n, docs in enumerate(found):
            if heads[n] < len(docs) and (key is None or keys[n][heads[n]] < key):
                best, key = n, keys[n][heads[n]]
        if best is None:
            break
        merged.append(found[best][heads[best]])
        heads[best] += 1
    return merged


class _Settling:
    """The settlements of one bulk write: an update each, fenced on its job's token and
    on the job being as claimed (:func:`unchanged_since_claim`), tagged with the bulk
    write's id (``last_write``, fresh for each: a job is in it once) by which a read
    back tells which landed."""

    def __init__(self, items: Sequence[tuple[JobRecord, Settlement]], records: bool = True) -> None:
        self.items = items
        self.records = records
        """False: those that landed as written are given back as :class:`Landed`."""
        self.results: list[Any] = [None] * len(items)
        self.writes: dict[int, tuple[dict[str, Any], Any]] = {}
        self.write = write = codec.new_token()
        for n, (job, settlement) in enumerate(items):
            try:
                result, encoded = settled_result(job.task, settlement)
            except SerializationError as exc:
                self.results[n] = exc
                continue
            if job.repeat is not None:
                # Its slot is recorded right after the claim, maybe within the same
                # millisecond (updated_at unchanged): settled alone, afterwards.
                continue
            token = job.lease.token if job.lease is not None else ""
            update = settle_update(job.id, settlement, dedupe_hold(job), encoded, job)
            if type(update["$set"]) is dict:  # a fresh one: ours to add to
                update["$set"]["last_write"] = write
            else:  # raw, holding an encoded result
                update = set_also(update, {"last_write": write})
            fence = {"_id": job.id, "lease.token": token, "status": RUNNING}
            fence.update(unchanged_since_claim(job))
            self.writes[n] = ({"q": fence, "u": update}, result)
        self.statements = [statement for statement, _ in self.writes.values()]
        self.ids = [items[n][0].id for n in self.writes]

    def finish(self, leases: MongoLeases, read: dict[Any, Any] | None) -> list[Any]:
        """The results, once the bulk write is done: ``read`` holds the jobs as read back
        by id (None: every write landed, as written). Those that did not land, and those
        settled alone, are settled one by one as :meth:`MongoLeases.settle` does (which says which
        lost their lease, and sees a cancel requested or a dedupe key taken)."""
        for n, (_, result) in self.writes.items():
            job, settlement = self.items[n]
            landed = read is None or (read.get(job.id) or {}).get("last_write") == self.write
            if not landed:
                self.results[n] = leases.settle(job, settlement)
            elif self.records:
                self.results[n] = transitions.settled(job, settlement, result)
            else:
                self.results[n] = Landed(job, settlement, result)
        for n, item in enumerate(self.items):
            if n not in self.writes and self.results[n] is None:
                self.results[n] = leases.settle(*item)
        return self.results


class _Claiming:
    """The claims of one bulk write: an update per candidate read, each under a token
    of its own and fenced on the claim filter and on the job being the document read
    (:func:`claim_fence`)."""

    def __init__(
        self,
        query: dict[str, Any],
        docs: list[dict[str, Any]],
        owner: str,
        now: datetime,
        lease_duration: float,
    ) -> None:
        self.docs = docs
        self.owner = owner
        self.now = now
        self.lease_duration = lease_duration
        self.ids = [doc["_id"] for doc in docs]
        self.tokens = [codec.new_token() for _ in docs]
        updates = claim_updates(owner, self.tokens, now, lease_duration)
        self.statements = [
            {"q": {**query, **claim_fence(doc)}, "u": update}
            for doc, update in zip(docs, updates, strict=True)
        ]

    def finish(self, leases: MongoLeases, read: dict[Any, Any] | None) -> list[JobRecord]:
        """The jobs claimed, in claim order: when every update landed (``read`` None),
        the jobs read, claimed as :func:`~mongosched._core.transitions.claimed` says
        (what the update wrote); else those ``read`` back under their token. A
        malformed one fails alone, unrun."""
        claims: Iterable[tuple[Any, str, Any]] = zip(self.ids, self.tokens, self.docs, strict=True)
        if read is not None:  # those read back under their token (others were first)
            claims = (
                (job_id, token, read[job_id])
                for job_id, token, _ in claims
                if job_id in read
                and read[job_id].get("status") == RUNNING
                and (read[job_id].get("lease") or {}).get("token") == token
            )
        lease = None  # as the update wrote it: one lease, copied under each token
        if read is None:
            lease = transitions.claim_lease(self.owner, "", self.now, self.lease_duration, here())
        records = []
        for job_id, token, doc in claims:
            try:
                record = to_record(doc, check=True)
            except MalformedJob as exc:  # failed alone
                leases.fail_malformed({"_id": job_id, "lease.token": token}, str(exc), self.now)
                continue
            if lease is not None:
                record = transitions.claimed_under(record, evolved(lease, token=token))
            records.append(record)
        return records


class MongoClaims:
    """The batched operations of :class:`~mongosched.store.mongo.MongoStore`: what
    misses the bulk write is claimed or settled one at a time by ``leases``."""

    def __init__(self, connection: MongoConnection, leases: MongoLeases) -> None:
        self.connection = connection
        self.leases = leases
        self.fair = MongoFair(connection)

    def claim_batch(
        self,
        *,
        owner: str,
        tasks: Sequence[str],
        queues: Sequence[str] | None,
        now: datetime,
        lease_duration: float,
        limit: int,
        ranked: Sequence[str] = (),
    ) -> list[JobRecord]:
        return self.settle_and_claim(
            (),
            owner=owner,
            tasks=tasks,
            queues=queues,
            now=now,
            lease_duration=lease_duration,
            limit=limit,
            ranked=ranked,
        )[1]

    def settle_many(
        self, items: Sequence[tuple[JobRecord, Settlement]], patience: Patience | None = None
    ) -> list[JobRecord | SerializationError | None]:
        """One unordered bulk write of every settlement (see :class:`_Settling`): the
        records of those that landed are computed
        (:func:`~mongosched._core.transitions.settled`), not read back. Jobs whose write
        did not land (a cancel requested, progress written, a lease lost, a dedupe key
        taken meanwhile) are found by reading back the writes' ids, and settled one by
        one as :meth:`MongoLeases.settle` does, which says which of those lost their
        lease. Repeating jobs are settled one by one too."""
        return patiently(patience, self._write, _Settling(items), None)[0]

    def settle_and_claim(
        self,
        items: Sequence[tuple[JobRecord, Settlement]],
        *,
        owner: str,
        tasks: Sequence[str],
        queues: Sequence[str] | None,
        now: datetime,
        lease_duration: float,
        limit: int,
        patience: Patience | None = None,
        ranked: Sequence[str] = (),
        ahead: ReadAhead | None = None,
        records: bool = True,
    ) -> tuple[list[JobRecord | Landed | SerializationError | None], list[JobRecord]]:
        """The settlements and the claims in one unordered bulk write, after the read
        of the candidates: two round trips for both when nothing unusual happened, one
        when the candidates were read ahead (``ahead``: see :meth:`_kept`). The
        write (with what it reads back and settles alone) has the settlements'
        ``patience``. With ranked tasks among ``tasks``, the candidates are read in
        two finds (see :meth:`_candidates`), even for one job."""
        settling = _Settling(items, records)
        claiming = None
        ranked = [task for task in tasks if task in ranked] if ranked else []
        kept = False
        if tasks and (limit >= BATCH_FROM or ranked):
            query = claim_query(tasks, queues, now)
            if ahead is None or ranked:
                docs = self._candidates(query, tasks, queues, now, limit, ranked)
            else:
                docs, kept = self._kept(ahead, query, tasks, queues, now, limit)
            if docs:
                claiming = _Claiming(query, docs, owner, now, lease_duration)
        results, claimed = patiently(patience, self._write, settling, claiming)
        missed = claiming is not None and len(claimed) < len(claiming.docs)
        if ahead is not None and kept and missed:
            # Kept candidates were taken or changed: others claim from this backlog too.
            ahead.docs, ahead.paused_until = [], now + ReadAhead.PAUSE
        if tasks and limit < BATCH_FROM and not ranked:  # fewer round trips one at a time
            while len(claimed) < limit:
                record = self.claim(
                    owner=owner, tasks=tasks, queues=queues, now=now, lease_duration=lease_duration
                )
                if record is None:
                    break
                claimed.append(record)
        return results, claimed

    def claim(
        self,
        *,
        owner: str,
        tasks: Sequence[str],
        queues: Sequence[str] | None,
        now: datetime,
        lease_duration: float,
        job_id: Any = None,
        ranked: Sequence[str] = (),
    ) -> JobRecord | None:
        """One job: a single ``findAndModify``, or, when ``tasks`` include ranked ones,
        a batch of one (two finds merged: see :meth:`_candidates`)."""
        if not tasks:
            return None
        if job_id is None and ranked and any(task in ranked for task in tasks):
            claimed = self.claim_batch(
                owner=owner,
                tasks=tasks,
                queues=queues,
                now=now,
                lease_duration=lease_duration,
                limit=1,
                ranked=ranked,
            )
            return claimed[0] if claimed else None
        token = codec.new_token()
        query = claim_query(tasks, queues, now, job_id)
        update = claim_update(owner, token, now, lease_duration)

        def attempt(n: int) -> dict[str, Any] | None:
            if n > 0:  # the last try may have landed: look for our token first
                mine = self.connection.jobs.find_one({"lease.token": token, "status": RUNNING})
                if mine is not None:
                    return mine
            return self.connection.jobs.find_one_and_update(
                query, update, sort=CLAIM_SORT, return_document=ReturnDocument.AFTER
            )

        doc = self.connection.retrying("claim", attempt)
        if doc is None:
            return None
        try:
            return to_record(doc, check=True)
        except MalformedJob as exc:  # failed alone; the caller claims again
            self.leases.fail_malformed({"_id": doc["_id"], "lease.token": token}, str(exc), now)
            return None

    def _kept(
        self,
        ahead: ReadAhead,
        query: dict[str, Any],
        tasks: Sequence[str],
        queues: Sequence[str] | None,
        now: datetime,
        limit: int,
    ) -> tuple[list[dict[str, Any]], bool]:
        """The first ``limit`` candidates, and whether they were kept from an earlier
        read: kept ones when ``ahead`` holds enough, read for these tasks and queues
        within :attr:`ReadAhead.FOR`, with no new due job announced since; else a read
        of :attr:`ReadAhead.BATCHES` times ``limit``, whose rest ``ahead`` keeps (unless
        reading ahead is paused, or the previous claim is not that recent)."""
        key = (tuple(tasks), None if queues is None else tuple(queues))
        woken, ahead.woken = ahead.woken, False  # cleared before a read it may predate
        last, ahead.last = ahead.last, now
        if (
            not woken
            and ahead.key == key
            and len(ahead.docs) >= limit
            and ahead.until is not None
            and now < ahead.until
        ):
            docs, ahead.docs = ahead.docs[:limit], ahead.docs[limit:]
            return docs, True
        paused = ahead.paused_until is not None and now < ahead.paused_until
        quick = last is not None and now - last < ReadAhead.FOR
        read = limit * ReadAhead.BATCHES if quick and not paused else limit
        docs = self._candidates(query, tasks, queues, now, read, ())
        ahead.key, ahead.docs, ahead.until = key, docs[limit:], now + ReadAhead.FOR
        return docs[:limit], False

    def _candidates(
        self,
        query: dict[str, Any],
        tasks: Sequence[str],
        queues: Sequence[str] | None,
        now: datetime,
        limit: int,
        ranked: Sequence[str],
    ) -> list[dict[str, Any]]:
        """The first ``limit`` due jobs of ``tasks`` in claim order: one find on the
        claim index; with ``ranked`` tasks, one more per ranked task on the ranked
        index (sorted by rank, then due time, which is its claim order: one task, one
        interval), merged by :func:`~mongosched._core.ranks.claim_key` with each find's
        order kept (:func:`_merged`). Ranks of different intervals do not sort alike,
        so one find over several tasks would cut at the wrong jobs."""

        def find(where: dict[str, Any], sort: list[tuple[str, int]]) -> list[dict[str, Any]]:
            return self.connection.retrying(
                "claim",
                lambda _: commands.find_batch(self.connection.jobs, where, sort=sort, limit=limit),
            )

        if not ranked:
            return find(query, CLAIM_SORT)
        plain = [task for task in tasks if task not in ranked]
        self.fair.place(ranked, queues, now, limit)  # unplaced fair jobs come due
        found = [find(claim_query(plain, queues, now), CLAIM_SORT)] if plain else []
        for task in ranked:
            found.append(find({**claim_query([task], queues, now), **RANKED}, RANK_SORT))
        return _merged(found, now, limit)

    def _write(
        self, settling: _Settling, claiming: _Claiming | None
    ) -> tuple[list[Any], list[JobRecord]]:
        """One unordered bulk write of the settlements' and the claims' updates. When
        one missed (a claim taken or a job changed meanwhile, a settlement fenced off, a
        write refused, a reply lost and the write repeated), one read back by id tells
        which landed."""
        statements = settling.statements + ([] if claiming is None else claiming.statements)
        what = "settle" if claiming is None else "claim"
        read: dict[Any, Any] | None = None
        if statements and not self._all_landed(
            what, statements, len(settling.statements), claiming
        ):
            ids = settling.ids + ([] if claiming is None else claiming.ids)
            read = self._read_back(what, ids)
        results = settling.finish(self.leases, read)
        return results, ([] if claiming is None else claiming.finish(self.leases, read))

    def _all_landed(
        self,
        what: str,
        statements: list[dict[str, Any]],
        settlements: int,
        claiming: _Claiming | None,
    ) -> bool:
        """Write ``statements`` (``settlements`` of them first, then the claims) in one
        unordered bulk write: True when every one landed, at the first try (and the
        write concern was met)."""
        tries: list[int] = []

        def bulk(attempt: int) -> bool:
            tries.append(attempt)
            updated = commands.update(self.connection.jobs, statements)
            for error in updated.errors:  # the others landed: read back what did
                index = error["index"] - settlements
                if claiming is not None and index >= 0:  # (a settlement refused:
                    # a dedupe key taken, seen when it is settled alone)
                    log.warning("claim of job %s refused: %s", claiming.ids[index], error)
            return updated.matched == len(statements) and not updated.unknown

        landed = self.connection.retrying(what, bulk)
        return landed and len(tries) == 1

    def _read_back(self, what: str, ids: list[Any]) -> dict[Any, Any]:
        """The jobs ``ids`` as stored, by id: one batch, and only when it came back
        short (a batch holds 16 MiB; or a job was deleted) a cursor for the rest."""
        docs = self.connection.retrying(
            what, lambda _: commands.find_batch(self.connection.jobs, {"_id": {"$in": ids}})
        )
        read = {doc["_id"]: doc for doc in docs}
        if len(read) < len(ids):
            rest = [job_id for job_id in ids if job_id not in read]
            more = self.connection.retrying(
                what, lambda _: list(self.connection.jobs.find({"_id": {"$in": rest}}))
            )
            read.update((doc["_id"], doc) for doc in more)
        return read
