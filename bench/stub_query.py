"""The query language of the benchmark stub server (bench/stub_server.py), over dicts.

MongoDB's semantics for what mongosched sends, and no more: filters (equality on
dotted paths, ``$eq $ne $gt $gte $lt $lte $in $nin $exists $type $not $or $and $nor``),
updates (``$set $unset $inc $min $max $push $addToSet $pull $setOnInsert
$currentDate``, and replacements), projections, sort keys in BSON's order across
types, and the aggregation stages ``$match $group $sort $limit $skip $project $count``.
Values compare only within their BSON type bracket (a number never equals a string,
``True`` is not ``1``), and an array field matches a value any of its elements equals.
"""

from __future__ import annotations

import copy
import datetime as dt
import functools
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from bson import Decimal128, Int64, ObjectId, Regex, Timestamp

__all__ = [
    "MISSING",
    "QueryError",
    "aggregate",
    "apply_update",
    "compile_filter",
    "get_path",
    "project",
    "sort_key",
]

Doc = dict[str, Any]
Matcher = Callable[[Mapping[str, Any]], bool]


class QueryError(Exception):
    """A query or update the stub cannot run (replied as ``ok: 0``, code 2: BadValue)."""


class _Missing:
    def __repr__(self) -> str:
        return "MISSING"


MISSING: Any = _Missing()


# BSON comparison order ---------------------------------------------------------------------------
_BRACKETS: dict[type, int] = {
    type(None): 1,
    int: 2,
    float: 2,
    Int64: 2,
    Decimal128: 2,
    str: 3,
    dict: 4,
    list: 5,
    bytes: 6,
    ObjectId: 7,
    bool: 8,
    dt.datetime: 9,
    Timestamp: 10,
}


def bracket(value: Any) -> int:
    """BSON's comparison order of types (MinKey < null < numbers < string < object <
    array < binary < ObjectId < bool < date < timestamp < regex)."""
    known = _BRACKETS.get(type(value))
    if known is not None:
        return known
    if value is None or value is MISSING:
        return 1
    if isinstance(value, bool):
        return 8
    if isinstance(value, (int, float, Int64, Decimal128)):
        return 2
    if isinstance(value, str):
        return 3
    if isinstance(value, dict):
        return 4
    if isinstance(value, (list, tuple)):
        return 5
    if isinstance(value, bytes):
        return 6
    if isinstance(value, ObjectId):
        return 7
    if isinstance(value, dt.datetime):
        return 9
    if isinstance(value, Timestamp):
        return 10
    return 11


_PLAIN = frozenset({int, float, str, ObjectId, bool, bytes})


def _plain(value: Any) -> Any:
    """A value comparable with others of its bracket."""
    if type(value) in _PLAIN:
        return value
    if isinstance(value, Decimal128):
        return float(value.to_decimal())
    if isinstance(value, dt.datetime) and value.tzinfo is not None:
        return value.astimezone(dt.timezone.utc).replace(tzinfo=None)
    if isinstance(value, dict):
        return tuple((k, sort_key(v)) for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return tuple(sort_key(v) for v in value)
    if value is None or value is MISSING:
        return 0
    return value


def sort_key(value: Any) -> tuple[int, Any]:
    """A key that orders any two values as MongoDB does."""
    return bracket(value), _plain(value)


@functools.total_ordering
class Descending:
    """Reverses the order of a sort key (a descending field)."""

    __slots__ = ("key",)

    def __init__(self, key: Any) -> None:
        self.key = key

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Descending) and self.key == other.key

    def __lt__(self, other: Descending) -> bool:
        return bool(other.key < self.key)

    def __hash__(self) -> int:
        return hash(self.key)


def doc_sort_key(spec: list[tuple[str, int]]) -> Callable[[Mapping[str, Any]], tuple[Any, ...]]:
    """The key of a document for a sort specification ``[(path, 1 | -1), ...]``."""

    def key(doc: Mapping[str, Any]) -> tuple[Any, ...]:
        parts: list[Any] = []
        for path, direction in spec:
            value = get_path(doc, path)
            if isinstance(value, list):  # ascending: the smallest element; descending: largest
                items = [sort_key(v) for v in value] or [sort_key(None)]
                k = min(items) if direction > 0 else max(items)
            else:
                k = sort_key(value)
            parts.append(k if direction > 0 else Descending(k))
        return tuple(parts)

    return key


# Paths -------------------------------------------------------------------------------------------
def get_path(doc: Any, path: str) -> Any:
    """The value at a dotted ``path``, MISSING if absent; through an array of documents,
    the list of the values found in them."""
    if "." not in path and type(doc) is dict:
        return doc.get(path, MISSING)
    value = doc
    for part in path.split("."):
        if isinstance(value, dict):
            value = value.get(part, MISSING)
        elif isinstance(value, list):
            if part.isdigit():
                index = int(part)
                value = value[index] if index < len(value) else MISSING
            else:
                found = [get_path(v, part) for v in value if isinstance(v, dict)]
                value = [v for v in found if v is not MISSING] or MISSING
        else:
            return MISSING
        if value is MISSING:
            return MISSING
    return value


def _parent(doc: Doc, path: str, create: bool) -> tuple[Any, str]:
    """The container holding the last part of ``path``. Containers on the way are
    copied before they are changed (copy on write): stored documents are never changed
    in place, so they can share values with the commands that wrote them."""
    parts = path.split(".")
    target: Any = doc
    for part in parts[:-1]:
        if isinstance(target, list) and part.isdigit():
            index = int(part)
            target[index] = _copied(target[index])
            target = target[index]
            continue
        if not isinstance(target, dict):
            raise QueryError(f"cannot use the part ({part}) of ({path}) to traverse the element")
        if part not in target:
            if not create:
                return None, parts[-1]
            target[part] = {}
        else:
            target[part] = _copied(target[part])
        target = target[part]
    return target, parts[-1]


def _copied(value: Any) -> Any:
    if isinstance(value, dict):
        return dict(value)
    if isinstance(value, list):
        return list(value)
    return value


def set_path(doc: Doc, path: str, value: Any) -> None:
    parent, last = _parent(doc, path, create=True)
    if isinstance(parent, list) and last.isdigit():
        index = int(last)
        parent.extend([None] * (index + 1 - len(parent)))
        parent[index] = value
    elif isinstance(parent, dict):
        parent[last] = value
    else:
        raise QueryError(f"cannot create field {last!r} in element {parent!r}")


def unset_path(doc: Doc, path: str) -> None:
    parent, last = _parent(doc, path, create=False)
    if isinstance(parent, dict):
        parent.pop(last, None)


# Filters ---------------------------------------------------------------------------------------
def equal(a: Any, b: Any) -> bool:
    """BSON equality: same bracket, same value (1 == 1.0; True != 1; key order counts)."""
    if a is MISSING:
        a = None
    if b is MISSING:
        b = None
    if bracket(a) != bracket(b):
        return False
    if isinstance(a, dict) and isinstance(b, dict):
        return list(a.keys()) == list(b.keys()) and all(equal(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(equal(x, y) for x, y in zip(a, b, strict=True))
    return bool(_plain(a) == _plain(b))


def _matches_value(value: Any, target: Any) -> bool:
    """``{field: target}``: the value equals it, or (an array) one of its elements does."""
    if isinstance(target, Regex) or hasattr(target, "pattern") and hasattr(target, "match"):
        pattern = target.try_compile() if isinstance(target, Regex) else target
        items = value if isinstance(value, list) else [value]
        return any(isinstance(v, str) and pattern.search(v) for v in items)
    if equal(value, target):
        return True
    return isinstance(value, list) and any(equal(v, target) for v in value)


def _compare(value: Any, target: Any, accept: Callable[[int], bool]) -> bool:
    items = value if isinstance(value, list) else [value]
    for item in items:
        if item is MISSING or bracket(item) != bracket(target):
            continue
        a, b = _plain(item), _plain(target)
        if accept((a > b) - (a < b)):
            return True
    return False


TYPE_ALIASES: dict[Any, Callable[[Any], bool]] = {
    "double": lambda v: isinstance(v, float),
    "string": lambda v: isinstance(v, str),
    "object": lambda v: isinstance(v, dict),
    "array": lambda v: isinstance(v, list),
    "binData": lambda v: isinstance(v, bytes),
    "objectId": lambda v: isinstance(v, ObjectId),
    "bool": lambda v: isinstance(v, bool),
    "date": lambda v: isinstance(v, dt.datetime),
    "null": lambda v: v is None,
    "int": lambda v: isinstance(v, int) and not isinstance(v, (bool, Int64)),
    "long": lambda v: isinstance(v, Int64),
    "decimal": lambda v: isinstance(v, Decimal128),
    "number": lambda v: bracket(v) == 2,
}
TYPE_ALIASES.update(
    {1: TYPE_ALIASES["double"], 2: TYPE_ALIASES["string"], 3: TYPE_ALIASES["object"]}
)
TYPE_ALIASES.update({4: TYPE_ALIASES["array"], 7: TYPE_ALIASES["objectId"]})
TYPE_ALIASES.update({8: TYPE_ALIASES["bool"], 9: TYPE_ALIASES["date"], 10: TYPE_ALIASES["null"]})
TYPE_ALIASES.update({16: TYPE_ALIASES["int"], 18: TYPE_ALIASES["long"]})


def _has_type(value: Any, names: Any) -> bool:
    if value is MISSING:
        return False
    checks = []
    for name in names if isinstance(names, list) else [names]:
        if name not in TYPE_ALIASES:
            raise QueryError(f"unknown $type {name!r}")
        checks.append(TYPE_ALIASES[name])
    items = [value, *value] if isinstance(value, list) else [value]
    return any(check(item) for check in checks for item in items)


def _operator(op: str, arg: Any) -> Callable[[Any], bool]:
    if op == "$eq":
        return lambda v: _matches_value(v, arg)
    if op == "$ne":
        return lambda v: not _matches_value(v, arg)
    if op in ("$gt", "$gte", "$lt", "$lte"):
        accept: Callable[[int], bool] = {
            "$gt": lambda c: c > 0,
            "$gte": lambda c: c >= 0,
            "$lt": lambda c: c < 0,
            "$lte": lambda c: c <= 0,
        }[op]
        return lambda v: _compare(v, arg, accept)
    if op in ("$in", "$nin"):
        if not isinstance(arg, list):
            raise QueryError(f"{op} needs an array")
        found = (lambda v: any(_matches_value(v, a) for a in arg)) if arg else (lambda v: False)
        return found if op == "$in" else (lambda v: not found(v))
    if op == "$exists":
        return (lambda v: v is not MISSING) if arg else (lambda v: v is MISSING)
    if op == "$type":
        return lambda v: _has_type(v, arg)
    if op == "$not":
        inner = _field_matcher(arg)
        return lambda v: not inner(v)
    if op == "$size":
        return lambda v: isinstance(v, list) and len(v) == arg
    if op == "$all":
        return lambda v: all(_matches_value(v, a) for a in arg)
    if op == "$elemMatch":
        sub = compile_filter(arg)
        return lambda v: isinstance(v, list) and any(isinstance(e, dict) and sub(e) for e in v)
    raise QueryError(f"unknown operator: {op}")


def _field_matcher(condition: Any) -> Callable[[Any], bool]:
    if isinstance(condition, dict) and condition and next(iter(condition)).startswith("$"):
        checks = [_operator(op, arg) for op, arg in condition.items()]
        if len(checks) == 1:
            return checks[0]
        return lambda v: all(check(v) for check in checks)
    return lambda v: _matches_value(v, condition)


def compile_filter(query: Mapping[str, Any] | None) -> Matcher:
    """A function telling whether a document matches ``query``."""
    checks: list[Matcher] = []
    for key, condition in (query or {}).items():
        if key in ("$or", "$and", "$nor"):
            subs = [compile_filter(q) for q in condition]
            if key == "$or":
                checks.append(lambda d, subs=subs: any(s(d) for s in subs))
            elif key == "$and":
                checks.append(lambda d, subs=subs: all(s(d) for s in subs))
            else:
                checks.append(lambda d, subs=subs: not any(s(d) for s in subs))
        elif key == "$comment":
            continue
        elif key.startswith("$"):
            raise QueryError(f"unknown top level operator: {key}")
        else:
            field = _field_matcher(condition)
            checks.append(lambda d, key=key, field=field: field(get_path(d, key)))
    if len(checks) == 1:
        return checks[0]
    return lambda d: all(check(d) for check in checks)


def equalities(query: Mapping[str, Any] | None) -> dict[str, list[Any]]:
    """Fields the query pins to one value or a few (plain equality, ``$eq``, ``$in``):
    what an index lookup can narrow the candidates to."""
    pinned: dict[str, list[Any]] = {}
    for key, condition in (query or {}).items():
        if key.startswith("$"):
            continue
        if isinstance(condition, dict):
            if condition and next(iter(condition)).startswith("$"):
                if "$eq" in condition:
                    pinned[key] = [condition["$eq"]]
                elif isinstance(condition.get("$in"), list):
                    pinned[key] = list(condition["$in"])
            continue
        if not isinstance(condition, (list, Regex)):
            pinned[key] = [condition]
    return pinned


# Updates -----------------------------------------------------------------------------------------
def _number(value: Any, what: str) -> Any:
    if bracket(value) != 2:
        raise QueryError(f"Cannot apply {what} to a value of non-numeric type")
    return value


def apply_update(doc: Doc, update: Mapping[str, Any], *, inserting: bool, now: dt.datetime) -> Doc:
    """``doc`` after ``update``: a new document (``doc`` is left as it was; values the
    two share are never changed in place)."""
    if not any(k.startswith("$") for k in update):  # a replacement
        new = copy.deepcopy(dict(update))
        if "_id" in doc:
            if "_id" in new and not equal(new["_id"], doc["_id"]):
                raise QueryError("the (immutable) field '_id' was found to have been altered")
            new = {"_id": doc["_id"], **{k: v for k, v in new.items() if k != "_id"}}
        return new
    new = dict(doc)  # copied on write, path by path (see _parent)
    for op, fields in update.items():
        if not isinstance(fields, dict):
            raise QueryError(f"Modifiers operate on fields but we found a {type(fields).__name__}")
        for path, arg in fields.items():
            if path == "_id" and op not in ("$setOnInsert",) and not inserting:
                if op == "$set" and equal(arg, doc.get("_id")):
                    continue
                raise QueryError("Performing an update on the path '_id' would modify '_id'")
            current = get_path(new, path)
            if op == "$set" or (op == "$setOnInsert" and inserting):
                set_path(new, path, arg)
            elif op == "$setOnInsert":
                continue
            elif op == "$unset":
                unset_path(new, path)
            elif op == "$inc":
                base = 0 if current is MISSING else _number(current, "$inc")
                set_path(new, path, base + _number(arg, "$inc"))
            elif op in ("$min", "$max"):
                if current is MISSING or (
                    (sort_key(arg) < sort_key(current))
                    if op == "$min"
                    else (sort_key(arg) > sort_key(current))
                ):
                    set_path(new, path, arg)
            elif op in ("$push", "$addToSet"):
                items = arg["$each"] if isinstance(arg, dict) and "$each" in arg else [arg]
                array = [] if current is MISSING else current
                if not isinstance(array, list):
                    raise QueryError(f"The field '{path}' must be an array")
                array = list(array)
                for item in items:
                    if op == "$push" or not any(equal(item, a) for a in array):
                        array.append(item)
                set_path(new, path, array)
            elif op == "$pull":
                if isinstance(current, list):
                    keep = (
                        compile_filter(arg)
                        if isinstance(arg, dict) and not next(iter(arg), "").startswith("$")
                        else None
                    )
                    field = _field_matcher(arg)
                    set_path(
                        new,
                        path,
                        [
                            v
                            for v in current
                            if not (keep(v) if keep and isinstance(v, dict) else field(v))
                        ],
                    )
            elif op == "$currentDate":
                set_path(new, path, now.replace(tzinfo=None))
            else:
                raise QueryError(f"Unknown modifier: {op}")
    return new


def upsert_seed(query: Mapping[str, Any]) -> Doc:
    """The document an upsert starts from: the query's equalities."""
    seed: Doc = {}
    for key, condition in query.items():
        if key.startswith("$"):
            continue
        if isinstance(condition, dict) and condition and next(iter(condition)).startswith("$"):
            if "$eq" in condition:
                set_path(seed, key, copy.deepcopy(condition["$eq"]))
            continue
        set_path(seed, key, copy.deepcopy(condition))
    return seed


# Projection ------------------------------------------------------------------------------------
def project(doc: Mapping[str, Any], projection: Mapping[str, Any] | None) -> Doc:
    if not projection:
        return dict(doc)
    include = {k for k, v in projection.items() if v and k != "_id"}
    if include:
        out: Doc = {}
        if projection.get("_id", 1) and "_id" in doc:
            out["_id"] = doc["_id"]
        for path in include:
            value = get_path(doc, path)
            if value is not MISSING:
                set_path(out, path, value)
        return out
    out = dict(doc)  # unset_path copies what it changes
    for path, flag in projection.items():
        if not flag:
            unset_path(out, path)
    return out


# Aggregation -------------------------------------------------------------------------------------
def _expression(doc: Mapping[str, Any], expr: Any) -> Any:
    if isinstance(expr, str) and expr.startswith("$"):
        value = get_path(doc, expr[1:])
        return None if value is MISSING else value
    if isinstance(expr, dict):
        if expr and next(iter(expr)).startswith("$"):
            raise QueryError(f"expression operator {next(iter(expr))} is not supported here")
        return {k: _expression(doc, v) for k, v in expr.items()}
    return expr


def _group(docs: Iterable[Doc], spec: Mapping[str, Any]) -> list[Doc]:
    groups: dict[Any, Doc] = {}
    sums: dict[Any, dict[str, list[Any]]] = {}
    for doc in docs:
        key_value = _expression(doc, spec["_id"])
        key = sort_key(key_value)
        if key not in groups:
            groups[key] = {"_id": key_value}
            sums[key] = {name: [] for name in spec if name != "_id"}
        for name, acc in spec.items():
            if name == "_id":
                continue
            ((op, arg),) = acc.items()
            sums[key][name].append(_expression(doc, arg))
    for key, group in groups.items():
        for name, acc in spec.items():
            if name == "_id":
                continue
            op = next(iter(acc))
            values = sums[key][name]
            numbers = [v for v in values if bracket(v) == 2]
            if op == "$sum":
                group[name] = sum(numbers)
            elif op == "$avg":
                group[name] = sum(numbers) / len(numbers) if numbers else None
            elif op in ("$min", "$max"):
                present = [v for v in values if v is not None]
                pick = min if op == "$min" else max
                group[name] = pick(present, key=sort_key) if present else None
            elif op == "$first":
                group[name] = values[0] if values else None
            elif op == "$last":
                group[name] = values[-1] if values else None
            elif op == "$push":
                group[name] = values
            else:
                raise QueryError(f"accumulator {op} is not supported here")
    return list(groups.values())


def aggregate(docs: Iterable[Doc], pipeline: list[Mapping[str, Any]]) -> list[Doc]:
    out: Iterable[Doc] = docs
    for stage in pipeline:
        ((name, arg),) = stage.items()
        if name == "$match":
            matcher = compile_filter(arg)
            out = [d for d in out if matcher(d)]
        elif name == "$group":
            out = _group(out, arg)
        elif name == "$sort":
            out = sorted(out, key=doc_sort_key(list(arg.items())))
        elif name == "$limit":
            out = list(out)[: int(arg)]
        elif name == "$skip":
            out = list(out)[int(arg) :]
        elif name == "$project":
            out = [project(d, arg) for d in out]
        elif name == "$count":
            out = [{arg: len(list(out))}]
        else:
            raise QueryError(f"stage {name} is not supported here")
    return list(out)
