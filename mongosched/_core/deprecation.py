"""Old names kept for one release: each use warns and names the new one.

A module lists its old names in a dict and hands it to :func:`module_getattr`; the
function it returns becomes the module's ``__getattr__`` (PEP 562), so that reading an
old name warns with a :class:`DeprecationWarning` and returns the new object.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping


def warn(old: str, new: str, *, stacklevel: int = 3) -> None:
    """Warn that ``old`` is deprecated in favour of ``new``."""
    warnings.warn(
        f"{old} is deprecated and will be removed in the next release: use {new}",
        DeprecationWarning,
        stacklevel=stacklevel,
    )


def module_getattr(
    module: str, aliases: Mapping[str, tuple[str, object]]
) -> Callable[[str], object]:
    """A module ``__getattr__`` that serves ``aliases`` (old name -> (new name, object))."""

    def __getattr__(name: str) -> object:
        if name in aliases:
            new, value = aliases[name]
            warn(f"{module}.{name}", f"{module}.{new}")
            return value
        raise AttributeError(f"module {module!r} has no attribute {name!r}")

    return __getattr__
