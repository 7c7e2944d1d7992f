"""The one rule of waiting after failures in a row (:class:`Backoff`): the wait doubles
with each failure, from a first wait up to a longest."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Backoff"]


@dataclass(frozen=True)
class Backoff:
    """Waits that double with each failure in a row: ``first`` seconds after the first,
    never more than ``most``."""

    first: float
    most: float

    def after(self, failures: int) -> float:
        """Seconds to wait after ``failures`` failures in a row (0 after none)."""
        if failures <= 0:
            return 0.0
        return min(self.most, self.first * 2.0 ** min(failures - 1, 64))
