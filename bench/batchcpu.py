"""Thread CPU per job of each step a batched claim and its settlements take in the
client, without a server.

    python bench/batchcpu.py [--batch 8] [--calls 3000] [--repeats 5]

bench/jobcpu.py measures a whole runner's threads; on a loaded machine its figures move
by a fifth from one round to the next, more than one step's saving. This times the
Python steps of one batch of ``--batch`` no-op jobs alone, each ``--calls`` times with
:func:`time.thread_time` (the CPU of this thread only), and prints the best of
``--repeats`` in µs per job:

* ``decode``: the ``find`` reply's documents, with the store's codec options;
* ``claim statements``: the claim's update per candidate (``_Claiming``);
* ``claimed records``: the claimed documents computed and read into records;
* ``settle statements``: the settlements' updates (``_Settling``);
* ``settled records``: the records the settlements leave;
* ``encode``: the ``update`` command that carries both.

What pymongo adds per command (two per batch) is not counted here.
"""

from __future__ import annotations

import argparse
import sys
import time
import uuid
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import bson  # noqa: E402

from mongosched import App  # noqa: E402
from mongosched._core.records import JobStatus, Settlement  # noqa: E402
from mongosched.store import codec  # noqa: E402
from mongosched.store.mongo.claims import _Claiming, _Settling  # noqa: E402
from mongosched.store.mongo.documents import to_document  # noqa: E402
from mongosched.store.mongo.updates import claim_query  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--calls", type=int, default=3000)
    parser.add_argument("--repeats", type=int, default=5)
    options = parser.parse_args()
    batch = options.batch
    app = App(f"memory://batchcpu-{uuid.uuid4().hex}")  # a job as the store writes it
    noop = app.task(name="noop", retry=0)(lambda: None)
    job = to_document(app.store.jobs.get(noop.schedule().id))
    now = job["run_at"]
    reply = bson.encode(
        {
            "cursor": {"firstBatch": [{**job, "_id": codec.new_id()} for _ in range(batch)]},
            "ok": 1,
        },
        codec_options=codec.CODEC_OPTIONS,
    )

    def decode() -> list[dict[str, Any]]:
        found = bson.decode(reply, codec_options=codec.CODEC_OPTIONS)["cursor"]["firstBatch"]
        return found  # type: ignore[no-any-return]

    query = claim_query(["noop"], None, now)
    docs = decode()
    claiming = _Claiming(query, docs, "runner", now, 30.0)
    records = claiming.finish(None, None)  # type: ignore[arg-type]
    done = Settlement(status=JobStatus.COMPLETED, now=now, delete_at=now + timedelta(days=7))
    items = [(record, done) for record in records]
    settling = _Settling(items)
    command = {"update": "jobs", "updates": settling.statements + claiming.statements}
    steps: list[tuple[str, Callable[[], Any]]] = [
        ("decode", decode),
        ("claim statements", lambda: _Claiming(query, docs, "runner", now, 30.0)),
        ("claimed records", lambda: claiming.finish(None, None)),  # type: ignore[arg-type]
        ("settle statements", lambda: _Settling(items)),
        ("settled records", lambda: settling.finish(None, None)),  # type: ignore[arg-type]
        ("encode", lambda: bson.encode(command, codec_options=codec.CODEC_OPTIONS)),
    ]
    print(
        f"mongosched batchcpu: Python {sys.version.split()[0]}, batches of {batch} no-op "
        f"jobs, {options.calls:,} calls a step, best of {options.repeats}; µs of thread CPU "
        "per job"
    )
    total = 0.0
    for name, step in steps:
        best = min(timed(step, options.calls) for _ in range(options.repeats)) / batch
        total += best
        print(f"{name:>18}: {best:6.2f}")
    print(f"{'total':>18}: {total:6.2f}")


def timed(step: Callable[[], Any], calls: int) -> float:
    """µs of this thread's CPU per call of ``step``."""
    started = time.thread_time()
    for _ in range(calls):
        step()
    return (time.thread_time() - started) / calls * 1e6


if __name__ == "__main__":
    main()
