"""OpenTelemetry, when ``opentelemetry-api`` is installed (otherwise nothing here does
anything, and nothing is stored).

:func:`carrier` captures the trace context current where a job is scheduled, as the W3C
``traceparent`` and ``tracestate`` headers (a small dict stored in the job); :func:`run`
opens a span around each run of the job (``mongosched run <task>``, kind CONSUMER),
child of that context, so the run appears in the trace of the request that scheduled
it, each attempt a span of its own.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from .records import JobRecord

__all__ = ["KEYS", "available", "carrier", "run"]

KEYS = ("traceparent", "tracestate")
"""The W3C Trace Context fields a job stores."""

try:  # an optional dependency
    from opentelemetry import trace as _trace
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    _PROPAGATOR: Any = TraceContextTextMapPropagator()
except ImportError:  # pragma: no cover - exercised where the package is absent
    _trace = None  # type: ignore[assignment]
    _PROPAGATOR = None


def available() -> bool:
    """Whether ``opentelemetry-api`` is installed."""
    return _trace is not None


def carrier() -> dict[str, str] | None:
    """The current trace context as W3C headers, or None (no OpenTelemetry, or no
    span is current)."""
    if _trace is None or not _trace.get_current_span().get_span_context().is_valid:
        return None
    headers: dict[str, str] = {}
    _PROPAGATOR.inject(headers)
    found = {key: headers[key] for key in KEYS if key in headers}
    return found or None


@contextmanager
def run(record: JobRecord, runner: str) -> Iterator[Callable[[BaseException | None], None]]:
    """A span around one run of ``record`` (a no-op without OpenTelemetry). Yields a
    function to call with the run's error (None: it succeeded)."""
    if _trace is None:
        yield _ignore
        return
    parent = _PROPAGATOR.extract(dict(record.trace)) if record.trace else None
    tracer = _trace.get_tracer("mongosched")
    attributes: dict[str, Any] = {
        "mongosched.job_id": str(record.id),
        "mongosched.task": record.task,
        "mongosched.queue": record.queue,
        "mongosched.attempt": record.attempts,
        "mongosched.runner": runner,
    }
    with tracer.start_as_current_span(
        f"mongosched run {record.task}",
        context=parent,
        kind=_trace.SpanKind.CONSUMER,
        attributes=attributes,
    ) as span:

        def ended(error: BaseException | None) -> None:
            if error is not None:
                span.record_exception(error)
                span.set_status(_trace.Status(_trace.StatusCode.ERROR, str(error)))

        yield ended


def _ignore(error: BaseException | None) -> None:
    """Nothing to record without OpenTelemetry."""

