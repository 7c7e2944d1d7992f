"""OpenTelemetry: the trace context carried from schedule() into the job and a span per
run; and the job fields on log records."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from mongosched import App
from mongosched.observe import logs, tracing
from mongosched.testing import FakeClock, drain

sdk_trace = pytest.importorskip("opentelemetry.sdk.trace")
export = pytest.importorskip("opentelemetry.sdk.trace.export")
in_memory = pytest.importorskip("opentelemetry.sdk.trace.export.in_memory_span_exporter")
from opentelemetry import trace  # noqa: E402

_EXPORTER: Any = None


@pytest.fixture
def spans() -> Iterator[Any]:
    """An in-memory exporter behind the global tracer provider (set once a process)."""
    global _EXPORTER
    if _EXPORTER is None:
        _EXPORTER = in_memory.InMemorySpanExporter()
        provider = sdk_trace.TracerProvider()
        provider.add_span_processor(export.SimpleSpanProcessor(_EXPORTER))
        trace.set_tracer_provider(provider)
    _EXPORTER.clear()
    yield _EXPORTER
    _EXPORTER.clear()


def test_a_run_is_a_child_span_of_where_it_was_scheduled(
    make_app: Callable[..., App], spans: Any
) -> None:
    app = make_app()
    app.task(name="ok")(lambda: None)
    app.task(name="boom", retry=1)(lambda: 1 / 0)
    tracer = trace.get_tracer("tests")
    with tracer.start_as_current_span("request") as request:
        job = app.schedule("ok")
        failing = app.schedule("boom")
    context = request.get_span_context()
    stored = job.refresh().record.trace
    assert stored is not None and set(stored) <= set(tracing.KEYS)
    assert stored["traceparent"].split("-")[1] == format(context.trace_id, "032x")
    assert job.to_dict()["trace"] == stored  # plain data
    drain(app)
    runs = [s for s in spans.get_finished_spans() if s.name.startswith("mongosched run")]
    by_name: dict[str, list[Any]] = {}
    for span in runs:
        by_name.setdefault(span.name, []).append(span)
    (ok_run,) = by_name["mongosched run ok"]
    assert ok_run.parent is not None and ok_run.parent.span_id == context.span_id
    assert ok_run.context.trace_id == context.trace_id
    assert ok_run.kind is trace.SpanKind.CONSUMER
    assert ok_run.attributes["mongosched.job_id"] == str(job.id)
    assert ok_run.attributes["mongosched.attempt"] == 1
    assert ok_run.status.status_code is trace.StatusCode.UNSET
    attempts = by_name["mongosched run boom"]
    assert [s.attributes["mongosched.attempt"] for s in attempts] == [1, 2]  # a span each
    assert all(s.status.status_code is trace.StatusCode.ERROR for s in attempts)
    assert all(s.parent.span_id == context.span_id for s in attempts)
    assert failing.refresh().status.value == "failed"


def test_no_current_span_or_no_opentelemetry_stores_nothing(
    make_app: Callable[..., App], spans: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    app = make_app()
    app.task(name="ok")(lambda: None)
    assert app.schedule("ok").record.trace is None  # no span is current
    monkeypatch.setattr(tracing, "_trace", None)  # as if opentelemetry-api were absent
    assert not tracing.available()
    with trace.get_tracer("tests").start_as_current_span("request"):
        job = app.schedule("ok")
    assert job.record.trace is None
    spans.clear()
    drain(app)
    assert spans.get_finished_spans() == ()


def test_log_records_about_a_job_carry_its_fields(
    make_app: Callable[..., App], caplog: pytest.LogCaptureFixture
) -> None:
    app = make_app(clock=FakeClock())
    mine = logging.getLogger("tests.mytask")

    @app.task(name="boom", retry=1)
    def boom() -> None:
        mine.warning("inside the task")
        raise ValueError("no")

    job = boom.schedule()
    handler_records: list[logging.LogRecord] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            handler_records.append(record)

    keep = Keep()
    keep.addFilter(logs.JobFields())
    mine.addHandler(keep)
    try:
        with caplog.at_level(logging.INFO, logger="mongosched"):
            drain(app)
    finally:
        mine.removeHandler(keep)
    about = [
        r
        for r in caplog.records
        if r.name.startswith("mongosched") and str(job.id) in r.getMessage()
    ]
    assert len(about) >= 2  # the retry and the failure
    assert {(r.job_id, r.task) for r in about} == {(str(job.id), "boom")}  # type: ignore[attr-defined]
    assert sorted({r.attempt for r in about}) == [1, 2]  # type: ignore[attr-defined]
    assert [(r.job_id, r.attempt) for r in handler_records] == [  # type: ignore[attr-defined]
        (str(job.id), 1),
        (str(job.id), 2),
    ]
    outside = logging.LogRecord("x", logging.INFO, __file__, 1, "m", None, None)
    logs.JobFields().filter(outside)
    assert not hasattr(outside, "job_id")


def test_the_reapers_records_carry_the_jobs_fields(
    make_app: Callable[..., App], caplog: pytest.LogCaptureFixture
) -> None:
    clock = FakeClock()
    app = make_app(clock=clock, lease_duration=5)
    app.task(name="t", retry=1)(lambda: None)
    job = app.schedule("t")
    runner = app.runner(workers=1)
    claim = runner.claim_next()
    assert claim is not None
    claim.finish()
    clock.advance(seconds=10)
    with caplog.at_level(logging.WARNING, logger="mongosched"):
        assert runner.reap() == 1
    (record,) = [r for r in caplog.records if str(job.id) in r.getMessage()]
    assert (record.job_id, record.task, record.attempt) == (str(job.id), "t", 1)  # type: ignore[attr-defined]
