"""A fault injector around the store's collections.

Each call to a wrapped collection may fail with a network error *before* it reaches the
server (nothing applied) or *after* the server applied it (the reply is lost), as a
dropped connection or a timeout does to a real client.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Callable
from typing import Any

from pymongo.errors import AutoReconnect, NetworkTimeout

# Calls that do not reach the server, or only read.
_LOCAL = frozenset({"name", "full_name", "database", "with_options", "index_information"})


class FaultyCollection:
    """``late``, if given, is called after an applied ``find_one_and_update`` or
    ``bulk_write`` with some probability (``late_rate``): the reply arrived late (a test moves its clock on)."""

    def __init__(
        self,
        target: Any,
        rng: random.Random,
        rate: float,
        late: Callable[[], None] | None = None,
        late_rate: float = 0.0,
    ) -> None:
        self._target = target
        self.rng = rng
        self.rate = rate
        self.late = late
        self.late_rate = late_rate
        self.enabled = True
        self.injected: Counter[str] = Counter()

    def __getattr__(self, name: str) -> Any:
        value = getattr(self._target, name)
        if not callable(value) or name in _LOCAL:
            return value

        def call(*args: Any, **kwargs: Any) -> Any:
            if self.enabled and self.rng.random() < self.rate:
                if self.rng.random() < 0.5:
                    self.injected[f"{name}:before"] += 1
                    raise AutoReconnect(f"injected: connection dropped before {name}")
                result = value(*args, **kwargs)
                if hasattr(result, "__iter__") and not isinstance(result, (dict, list)):
                    list(result)  # a cursor: its query ran
                self.injected[f"{name}:after"] += 1
                raise NetworkTimeout(f"injected: reply to {name} lost")
            result = value(*args, **kwargs)
            if (
                self.enabled
                and self.late is not None
                and name in ("find_one_and_update", "bulk_write")
                and self.rng.random() < self.late_rate
            ):
                self.injected[f"{name}:late"] += 1
                self.late()
            return result

        return call


def inject(
    store: Any,
    rng: random.Random,
    rate: float,
    late: Callable[[], None] | None = None,
    late_rate: float = 0.0,
) -> list[FaultyCollection]:
    """Wrap a MongoStore's collections; returns the wrappers (set ``enabled`` to switch)."""
    store.retry_pause = 0.0
    store.jobs = FaultyCollection(store.jobs, rng, rate, late, late_rate)
    store.permits = FaultyCollection(store.permits, rng, rate)
    store.limits = FaultyCollection(store.limits, rng, rate)
    return [store.jobs, store.permits, store.limits]
