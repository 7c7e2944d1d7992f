"""Methods of one object that are methods of an object it holds (:class:`Delegated`):
how :class:`~mongosched.App` offers the operations it is composed of."""

from __future__ import annotations

import types
from collections.abc import Callable
from typing import Any, Concatenate, Generic, ParamSpec, TypeVar, overload

__all__ = ["Delegated"]

P = ParamSpec("P")
R = TypeVar("R")


class Delegated(Generic[P, R]):
    """A method that is ``operation``, a method of the object held in the attribute
    ``holder``: its signature, defaults and docstring are the operation's, written once.
    Read on the class, it is the operation's function (what the API reference
    documents); on an instance, the operation bound to the instance's held object.
    The method must have the operation's name."""

    def __init__(self, holder: str, operation: Callable[Concatenate[Any, P], R]) -> None:
        self.holder = holder
        self.operation = operation
        self.__doc__ = operation.__doc__

    def __set_name__(self, owner: type[Any], name: str) -> None:
        if name != self.operation.__name__:
            raise TypeError(f"{owner.__name__}.{name} must be named as its operation")

    @overload
    def __get__(self, instance: None, owner: type[Any]) -> Callable[Concatenate[Any, P], R]: ...

    @overload
    def __get__(self, instance: object, owner: type[Any]) -> Callable[P, R]: ...

    def __get__(self, instance: object, owner: type[Any]) -> Callable[..., R]:
        if instance is None:
            return self.operation
        return types.MethodType(self.operation, getattr(instance, self.holder))
