"""What the ``mongosched`` command prints: tables, JSON, one-line errors.

Times are printed in UTC: to the millisecond with a ``Z`` in JSON, to the second in
tables. Every line written goes through :func:`printable`: a control character in what
is shown (an escape sequence in a job's error, a log line, an actor's name) is written
escaped, never played by the terminal. JSON holds plain data only: ids (ObjectIds and
the like) as strings, bytes as base64, the package's value types
(:class:`~mongosched._core.records.ErrorInfo`, leases, progress) as objects.
"""

from __future__ import annotations

import base64
import dataclasses
import enum
import json
import re
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime, timezone
from typing import Any

from mongosched._core.records import AttemptRecord
from mongosched.job import Job

__all__ = [
    "cell",
    "error",
    "gist",
    "iso",
    "job_json",
    "json_default",
    "listing",
    "out",
    "printable",
    "print_json",
    "table",
    "to_json",
]


# Control characters (C0, DEL and C1) but the newline and the tab, each as its escape.
_CONTROLS = {
    code: f"\\x{code:02x}" for code in (*range(0x20), *range(0x7F, 0xA0)) if chr(code) not in "\n\t"
}


def printable(text: str) -> str:
    """``text`` with its control characters escaped (``ESC`` as ``\\x1b``), newlines
    and tabs kept: what the command writes to a terminal."""
    return text.translate(_CONTROLS)


def out(text: str = "") -> None:
    sys.stdout.write(printable(text) + "\n")


def error(text: str) -> None:
    """The command's one line on stderr."""
    sys.stderr.write(f"mongosched: error: {printable(text)}\n")


def warning(text: str) -> None:
    """A line on stderr that does not end the command."""
    sys.stderr.write(f"mongosched: warning: {printable(text)}\n")


def gist(exc: BaseException) -> str:
    """The first line of an error's message, without a driver's topology description."""
    text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return re.split(r" \(configured timeouts|, Timeout: |, Topology Description: ", text)[0]


def iso(value: datetime) -> str:
    """ISO 8601 in UTC, milliseconds, ``Z``."""
    if value.tzinfo is None:
        value = value.replace(tzinfo=timezone.utc)
    return value.astimezone(timezone.utc).isoformat(timespec="milliseconds")[:-6] + "Z"


def json_default(value: Any) -> Any:
    """What :func:`json.dumps` cannot encode itself, as plain data."""
    if isinstance(value, datetime):
        return iso(value)
    if isinstance(value, (bytes, bytearray)):
        return base64.b64encode(value).decode("ascii")
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, Mapping):
        return dict(value)
    if isinstance(value, (set, frozenset)):
        return list(value)
    return str(value)  # ObjectId, Decimal128, UUID, ...: their string forms


def to_json(value: Any) -> str:
    """``value`` as compact JSON, for one line of a table or a field."""
    return json.dumps(value, default=json_default, ensure_ascii=False)


# What JSON leaves as it is among the control characters (DEL and C1), as its escapes.
_JSON_CONTROLS = {code: f"\\u{code:04x}" for code in range(0x7F, 0xA0)}


def print_json(value: Any) -> None:
    """``value`` as indented JSON, every control character escaped as JSON escapes
    them (so that :func:`printable` finds none, and the JSON stays valid)."""
    text = json.dumps(value, default=json_default, indent=2, ensure_ascii=False)
    out(text.translate(_JSON_CONTROLS))


def job_json(job: Job) -> dict[str, Any]:
    """A job as the JSON of ``jobs list`` and ``jobs show``: its id first."""
    data = job.to_dict()
    args, kwargs = job.call
    shown = {"call": {"args": args, "kwargs": kwargs}, "label_priority": job.label_priority}
    return {"id": data.pop("id"), **data, **(shown if job.label is not None else {})}


def ran(attempt: AttemptRecord) -> str:
    """Who ran an attempt, when, and how it ended, on one line."""
    where = f" on {attempt.host}" if attempt.host else ""
    pid = f" pid {attempt.pid}" if attempt.pid is not None else ""
    return (
        f"{cell(attempt.started_at)} to {cell(attempt.ended_at)}  {attempt.status.value}  "
        f"runner {attempt.runner}{where}{pid}"
    )


def cell(value: Any) -> str:
    """A value as a table cell: times in UTC to the second, nothing as ``-``."""
    if value is None or value == "":
        return "-"
    if isinstance(value, datetime):
        return iso(value)[:19].replace("T", " ")
    text = str(value).replace("\n", " ")
    return text if len(text) <= 60 else text[:57] + "..."


def table(headers: Sequence[str], rows: Iterable[Sequence[Any]]) -> None:
    cells = [list(headers)] + [[cell(v) for v in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    for row in cells:
        out("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())


def listing(
    items: Sequence[Any],
    *,
    as_json: bool,
    json_row: Callable[[Any], Any],
    empty: str,
    headers: Sequence[str],
    row: Callable[[Any], Sequence[Any]],
) -> None:
    """Print ``items`` as JSON (``as_json``), as a table, or say there are none."""
    if as_json:
        print_json([json_row(item) for item in items])
    elif not items:
        out(empty)
    else:
        table(headers, (row(item) for item in items))
