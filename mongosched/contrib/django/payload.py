"""A Django task's arguments and return value on their way through mongosched.

They are normalised as Django's own backends do: the framework's ``normalize_json``
(tuples become lists, bytes text), then a JSON round trip, as a backend that stores
JSON does (a dict's integer keys become strings). Whatever is valid JSON is kept:
BSON holds integers of 64 bits only, so a larger one is stored as a tagged string and
read back as the same int. The tagging is this backend's alone: only its jobs' payloads
and results hold it (:func:`stored` writes it, :func:`loaded` reads it).
"""

from __future__ import annotations

import json
from typing import Any

from mongosched.contrib.django.framework import load

__all__ = ["BIG_INT", "ESCAPED", "loaded", "normalized", "stored"]

BIG_INT = "__mongosched_int__"
"""``{BIG_INT: "<digits>"}`` stands for an integer beyond 64 bits."""
ESCAPED = "__mongosched_dict__"
"""``{ESCAPED: {...}}`` stands for a dict of the user's that has a key of the tagging."""
_INT64 = range(-(2**63), 2**63)


def normalized(value: Any) -> Any:
    """``value`` as the task will get it: Django's normalisation, then JSON and back."""
    return json.loads(json.dumps(load().normalize_json(value)))


def stored(value: Any) -> Any:
    """A normalised value as BSON can keep it (big integers tagged)."""
    if isinstance(value, int) and not isinstance(value, bool) and value not in _INT64:
        return {BIG_INT: str(value)}
    if isinstance(value, list):
        return [stored(item) for item in value]
    if isinstance(value, dict):
        items = {key: stored(item) for key, item in value.items()}
        return {ESCAPED: items} if BIG_INT in items or ESCAPED in items else items
    return value


def loaded(value: Any) -> Any:
    """What :func:`stored` kept, as it was."""
    if isinstance(value, list):
        return [loaded(item) for item in value]
    if isinstance(value, dict):
        if len(value) == 1 and isinstance(value.get(BIG_INT), str):
            return int(value[BIG_INT])
        if len(value) == 1 and isinstance(value.get(ESCAPED), dict):
            value = value[ESCAPED]
        return {key: loaded(item) for key, item in value.items()}
    return value
