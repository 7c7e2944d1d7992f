"""Dramatiq on Redis, without the results middleware."""

from __future__ import annotations

import os

import dramatiq
from dramatiq.brokers.redis import RedisBroker

dramatiq.set_broker(RedisBroker(url=os.environ["BENCH_REDIS_URL"]))


@dramatiq.actor(max_retries=0)
def noop() -> None:
    return None
