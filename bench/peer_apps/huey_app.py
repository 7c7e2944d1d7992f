"""Huey on SQLite or Redis (``BENCH_HUEY_STORAGE``), results not stored."""

from __future__ import annotations

import os

from huey import RedisHuey, SqliteHuey

if os.environ.get("BENCH_HUEY_STORAGE") == "redis":
    huey = RedisHuey("bench", url=os.environ["BENCH_REDIS_URL"], results=False)
else:
    huey = SqliteHuey("bench", filename=os.environ["BENCH_SQLITE"], results=False)


@huey.task()
def noop() -> None:
    return None
