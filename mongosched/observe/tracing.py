"""OpenTelemetry, when ``opentelemetry-api`` is installed (otherwise nothing here does
anything, and nothing is stored).

:func:`carrier` captures the trace context current where a job is scheduled, as the W3C
``traceparent`` and ``tracestate`` headers (a small dict stored in the job); :func:`start`
opens a span around each run of the job (``mongosched run <task>``, kind CONSUMER),
child of that context, so the run appears in the trace of the request that scheduled
it, each attempt a span of its own.
"""

from __future__ import annotations

from typing import Any

from mongosched._core.records import JobRecord

__all__ = ["KEYS", "Run", "available", "carrier", "end", "failed", "start"]

KEYS = ("traceparent", "tracestate")
"""The W3C Trace Context fields a job stores."""

try:  # an optional dependency
    from opentelemetry import context as _context
    from opentelemetry import trace as _trace
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    _PROPAGATOR: Any = TraceContextTextMapPropagator()
    _NOOP_PROVIDERS: tuple[type, ...] = (_trace.ProxyTracerProvider, _trace.NoOpTracerProvider)
except ImportError:  # pragma: no cover - exercised where the package is absent
    _trace = None  # type: ignore[assignment, unused-ignore]
    _PROPAGATOR = None
    _NOOP_PROVIDERS = ()


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


class Run:
    """A run's span, made current in the thread running the job (see :func:`start`)."""

    __slots__ = ("span", "token")

    def __init__(self, span: Any, token: Any) -> None:
        self.span, self.token = span, token


def start(record: JobRecord, runner: str) -> Run | None:
    """Open a span for one run of ``record`` and make it current (spans the task opens
    become its children); None without OpenTelemetry or without a configured SDK (the
    API's no-op provider), so that a run costs nothing then. End it with :func:`end`."""
    if _trace is None or isinstance(_trace.get_tracer_provider(), _NOOP_PROVIDERS):
        return None
    parent = _PROPAGATOR.extract(dict(record.trace)) if record.trace else None
    attributes: dict[str, Any] = {
        "mongosched.job_id": str(record.id),
        "mongosched.task": record.task,
        "mongosched.queue": record.queue,
        "mongosched.attempt": record.attempts,
        "mongosched.runner": runner,
    }
    span = _trace.get_tracer("mongosched").start_span(
        f"mongosched run {record.task}",
        context=parent,
        kind=_trace.SpanKind.CONSUMER,
        attributes=attributes,
    )
    return Run(span, _context.attach(_trace.set_span_in_context(span)))


def failed(run: Run | None, error: BaseException | None) -> None:
    """Record the run's error on its span (None: it succeeded)."""
    if run is not None and error is not None and _trace is not None:
        run.span.record_exception(error)
        run.span.set_status(_trace.Status(_trace.StatusCode.ERROR, str(error)))


def end(run: Run | None) -> None:
    """End the run's span (and make the previous context current again)."""
    if run is not None:
        _context.detach(run.token)
        run.span.end()
