"""A task function's parameters, and how a job's arguments bind to them.

Arguments are bound where a job is made (``schedule()``, ``job()``, ``update_job()``,
the Django tasks backend's ``enqueue()``): a job its function cannot take would fail
at every attempt, so it is refused at once with :class:`~mongosched.errors.ArgumentError`.
The binding also says where each parameter's value is (a position, a keyword, its
default), for the options that name an argument (``rate_key=``, ``concurrency_key=``):
one rule, whatever the form of the call.

Whether a call binds depends only on its shape (how many positional arguments, which
keywords), so the binding of each shape is made once by :meth:`inspect.Signature.bind`
and cached: the check costs a dictionary lookup per job.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from mongosched.errors import ArgumentError, ConfigurationError

__all__ = ["KEYWORDS", "Binding", "Parameters"]

SHAPES = 64
"""Shapes of call whose binding a task keeps (the least recently used goes)."""

_VARIADIC = (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)
_KEYWORD = object()
"""What a keyword argument is bound as while a shape is bound (positions are ints)."""


@dataclass(frozen=True)
class Binding:
    """Where a call of one shape puts each parameter's value: the positional argument
    at ``positions[name]``, else the keyword argument ``name`` (a named parameter's,
    or one that ``**kwargs`` takes), else ``defaults[name]``."""

    positions: Mapping[str, int]
    defaults: Mapping[str, Any]

    def value(self, name: str, args: Sequence[Any], kwargs: Mapping[str, Any]) -> Any:
        """The value ``name`` takes in the call ``(*args, **kwargs)``; KeyError when
        the call gives it none."""
        index = self.positions.get(name)
        if index is not None:
            return args[index]
        if name in kwargs:
            return kwargs[name]
        return self.defaults[name]


KEYWORDS = Binding({}, {})
"""The binding of a call to a function whose parameters are not known, or that takes
anything (``*args, **kwargs``): an argument has a name only when passed by keyword."""


class Parameters:
    """The parameters of ``fn``, the function of task ``task``, read once."""

    def __init__(self, fn: Callable[..., Any], task: str) -> None:
        self.task = task
        try:
            signature: inspect.Signature | None = inspect.signature(fn)
        except (TypeError, ValueError):  # a callable whose signature Python cannot tell
            signature = None
        self.signature = signature
        """The function's signature (None: not known, so nothing is checked)."""
        params = () if signature is None else tuple(signature.parameters.values())
        kinds = {p.kind for p in params}
        self.names = frozenset(p.name for p in params if p.kind not in _VARIADIC)
        """The parameters an argument can be named after (not ``*args``, ``**kwargs``)."""
        self.open = signature is None or inspect.Parameter.VAR_KEYWORD in kinds
        """Whether an argument of any other name may be passed by keyword."""
        takes_anything = not self.names and kinds == set(_VARIADIC)
        self._check = signature is not None and not takes_anything
        self._shapes = functools.lru_cache(maxsize=SHAPES)(self._bind_shape)

    def bind(self, args: Sequence[Any], kwargs: Mapping[str, Any]) -> Binding:
        """Where each parameter takes its value in the call ``(*args, **kwargs)``;
        :class:`ArgumentError` naming the task and the problem when the function
        cannot take these arguments."""
        if not self._check:
            return KEYWORDS
        return self._shapes(len(args), tuple(kwargs))

    def _bind_shape(self, count: int, keywords: tuple[str, ...]) -> Binding:
        assert self.signature is not None
        try:
            bound = self.signature.bind(*range(count), **dict.fromkeys(keywords, _KEYWORD))
        except TypeError as exc:
            raise ArgumentError(
                f"task {self.task!r}: {exc}; its function takes {self.signature}"
            ) from None
        params = self.signature.parameters.values()
        positions = {
            p.name: bound.arguments[p.name]
            for p in params
            if p.kind not in _VARIADIC and type(bound.arguments.get(p.name)) is int
        }
        defaults = {
            p.name: p.default
            for p in params
            if p.name not in bound.arguments and p.default is not p.empty
        }
        return Binding(positions, defaults)

    def check_name(self, name: str, what: str) -> None:
        """For an option naming an argument (``what``, e.g. ``"task 't': rate_key"``):
        :class:`ConfigurationError` unless the function can be given an argument
        of that name."""
        if name not in self.names and not self.open:
            raise ConfigurationError(
                f"{what} names {name!r}, which is not a parameter of its function {self.signature}"
            )
