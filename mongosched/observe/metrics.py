"""Prometheus metrics of an app: :func:`render` gives the text exposition format 0.0.4
(no dependency needed), :class:`Collector` the same for ``prometheus_client`` (the
``mongosched[metrics]`` extra), :func:`serve` an HTTP endpoint ``/metrics`` in a daemon
thread (``mongosched worker --metrics-port``).

Two kinds of figures:

* **from the store**, the same in every process: unfinished jobs per queue, task and
  status (``mongosched_jobs``), running jobs, the lateness of the job due longest,
  the registered runners, and the backlog of each queue (jobs due or running, the
  signal to scale runners on, see :doc:`/operations`; due jobs, the lateness of the
  one due longest, running jobs, expired leases). Each
  scrape reads them (three small aggregate reads);
* **per process, from events** (:meth:`App.on`): jobs completed, failed and retried per
  task, and histograms of run time and of due-to-start delay, counted from the first
  scrape (or :func:`instrument`) on, by the runners of *this* process: sum them across
  processes in the query (``sum by (task) (rate(...))``).
"""

from __future__ import annotations

import logging
import math
import threading
import weakref
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any, Protocol

from mongosched._core.records import JobStatus, QueueBacklog, RunnerInfo
from mongosched.errors import StoreError
from mongosched.events import Event, Listener

if TYPE_CHECKING:
    from mongosched.store import Store


class Observed(Protocol):
    """What the metrics read of an app (a :class:`~mongosched.App` is one): its store,
    clock, queues, live runners, and its events."""

    @property
    def store(self) -> Store: ...

    @property
    def queues(self) -> Sequence[str] | None: ...

    def now(self) -> datetime: ...

    def on(self, event: str, listener: Listener | None = None) -> Any: ...

    def live_runners(self) -> list[RunnerInfo]: ...


__all__ = [
    "Observed",
    "BUCKETS",
    "CONTENT_TYPE",
    "Collector",
    "Family",
    "Recorder",
    "collect",
    "instrument",
    "render",
    "serve",
]

log = logging.getLogger("mongosched")

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
BUCKETS: tuple[float, ...] = (
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0,
    600.0, 1800.0, 3600.0,
)  # fmt: skip
"""Upper bounds (seconds) of the histograms' buckets."""

Labels = tuple[tuple[str, str], ...]


@dataclass
class Family:
    """One metric: its name (a counter's without ``_total``), type, help and samples
    ``(full sample name, labels, value)``."""

    name: str
    type: str
    help: str
    samples: list[tuple[str, Mapping[str, str], float]] = field(default_factory=list)


class Histogram:
    """Cumulative buckets, sum and count of observed values."""

    def __init__(self) -> None:
        self.counts = [0] * len(BUCKETS)
        self.sum = 0.0
        self.count = 0

    def observe(self, value: float) -> None:
        value = max(0.0, value)
        for i, bound in enumerate(BUCKETS):
            if value <= bound:
                self.counts[i] += 1
        self.sum += value
        self.count += 1


class Recorder:
    """The per-process counters and histograms of one app, fed by its events."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.completed: dict[str, int] = {}
        self.failed: dict[str, int] = {}
        self.retried: dict[str, int] = {}
        self.run_seconds: dict[str, Histogram] = {}
        self.start_delay: dict[str, Histogram] = {}
        self.missed: dict[str, int] = {}
        self.paused_on_failure: dict[str, int] = {}

    def attach(self, app: Observed) -> None:
        app.on("job:start", self._started)
        for name in ("job:success", "job:fail", "job:retry"):
            app.on(name, self._ended)
        app.on("schedule:missed", self._missed)
        app.on("control:pause", self._paused)

    def _missed(self, event: Event) -> None:
        if event.job is not None:
            with self._lock:
                task = event.job.task
                self.missed[task] = self.missed.get(task, 0) + event.missed

    def _paused(self, event: Event) -> None:
        pause = event.pause
        if pause is not None and pause.kind == "schedule" and pause.reason is not None:
            with self._lock:
                name = pause.name
                self.paused_on_failure[name] = self.paused_on_failure.get(name, 0) + 1

    def _started(self, event: Event) -> None:
        job = event.job
        if job is None or job.started_at is None:
            return
        with self._lock:
            delay = (job.started_at - job.run_at).total_seconds()
            self.start_delay.setdefault(job.task, Histogram()).observe(delay)

    def _ended(self, event: Event) -> None:
        job = event.job
        if job is None:
            return
        counter = {"job:success": self.completed, "job:fail": self.failed}.get(
            event.name, self.retried
        )
        with self._lock:
            counter[job.task] = counter.get(job.task, 0) + 1
            # A run's end (not a reaped lease, whose holder's run time is unknown).
            ran = event.name == "job:success" or event.error is not None
            if ran and job.started_at is not None:
                seconds = (job.updated_at - job.started_at).total_seconds()
                self.run_seconds.setdefault(job.task, Histogram()).observe(seconds)

    def families(self) -> list[Family]:
        with self._lock:
            out = [
                _counter("mongosched_jobs_completed", "Jobs completed", self.completed),
                _counter("mongosched_jobs_failed", "Jobs failed for good", self.failed),
                _counter(
                    "mongosched_jobs_retried",
                    "Runs that ended to be retried (an error with attempts left, a lost "
                    "lease, a shutdown)",
                    self.retried,
                ),
                _histogram("mongosched_job_run_seconds", "Seconds a run took", self.run_seconds),
                _counter(
                    "mongosched_schedule_missed_slots",
                    "Slots of repeating jobs that never ran (by misfire or overlap policy)",
                    self.missed,
                ),
                _counter(
                    "mongosched_schedule_pauses",
                    "Times a schedule paused itself after failed runs in a row",
                    self.paused_on_failure,
                    label="schedule",
                ),
                _histogram(
                    "mongosched_job_start_delay_seconds",
                    "Seconds from when a job was due to when it started",
                    self.start_delay,
                ),
            ]
        return out


_recorders: weakref.WeakKeyDictionary[Any, Recorder] = weakref.WeakKeyDictionary()
_recorders_lock = threading.Lock()


def instrument(app: Observed) -> Recorder:
    """Start counting ``app``'s events in this process (once; :func:`render` does it
    on its first call). Returns the app's :class:`Recorder`."""
    with _recorders_lock:
        recorder = _recorders.get(app)
        if recorder is None:
            recorder = _recorders[app] = Recorder()
            recorder.attach(app)
        return recorder


def collect(app: Observed) -> list[Family]:
    """Every metric of ``app``, read now (see the module)."""
    recorder = instrument(app)
    families: list[Family] = []
    up = 1.0
    try:
        families.extend(_store_families(app))
    except StoreError as exc:
        log.warning("metrics: the store could not be read: %s", exc)
        up = 0.0
    families.append(
        Family(
            "mongosched_store_up",
            "gauge",
            "1 if the store answered this scrape's reads, else 0",
            [("mongosched_store_up", {}, up)],
        )
    )
    return families + recorder.families()


def _store_families(app: Observed) -> Iterator[Family]:
    now = app.now()
    depth = app.store.admin.open_counts()
    jobs = Family("mongosched_jobs", "gauge", "Unfinished jobs, by queue, task and status")
    running = 0
    for (queue, task, status), n in sorted(depth.items()):
        labels = {"queue": queue, "task": task, "status": status.value}
        jobs.samples.append(("mongosched_jobs", labels, float(n)))
        running += n if status is JobStatus.RUNNING else 0
    yield jobs
    yield Family(
        "mongosched_running_jobs",
        "gauge",
        "Jobs running now (every runner)",
        [("mongosched_running_jobs", {}, float(running))],
    )
    oldest = app.store.jobs.oldest_due(now)
    late = 0.0 if oldest is None else max(0.0, (now - oldest.run_at).total_seconds())
    yield Family(
        "mongosched_oldest_due_lateness_seconds",
        "gauge",
        "Seconds the pending job due longest has been due (0: none is due)",
        [("mongosched_oldest_due_lateness_seconds", {}, late)],
    )
    backlog = app.store.admin.backlog(now)
    queues = sorted({*backlog, *(queue for queue, _, _ in depth), *(app.queues or ())})
    families = {
        "total": Family(
            "mongosched_queue_backlog_jobs",
            "gauge",
            "Jobs due or running, by queue (what to scale runners on: 0 only when the "
            "queue needs no runner)",
        ),
        "due": Family(
            "mongosched_queue_due_jobs",
            "gauge",
            "Pending jobs due now, by queue (what runners could start at once)",
        ),
        "running": Family("mongosched_queue_running_jobs", "gauge", "Running jobs, by queue"),
        "expired": Family(
            "mongosched_queue_expired_leases",
            "gauge",
            "Running jobs whose lease expired, by queue (their runner died: a live "
            "runner's reaper returns them)",
        ),
    }
    lateness = Family(
        "mongosched_queue_lateness_seconds",
        "gauge",
        "Seconds the job due longest in the queue has been due (0: none is due)",
    )
    for queue in queues:
        waiting = backlog.get(queue, QueueBacklog(0, None))
        for name, family in families.items():
            family.samples.append((family.name, {"queue": queue}, float(getattr(waiting, name))))
        since = waiting.oldest
        seconds = 0.0 if since is None else max(0.0, (now - since).total_seconds())
        lateness.samples.append((lateness.name, {"queue": queue}, seconds))
    yield from families.values()
    yield lateness
    runners = app.live_runners()
    stale = sum(1 for r in runners if r.stale)
    name = "mongosched_runners"
    yield Family(
        name,
        "gauge",
        "Registered runners, live and stale",
        [
            (name, {"state": "live"}, float(len(runners) - stale)),
            (name, {"state": "stale"}, float(stale)),
        ],
    )


def _counter(name: str, text: str, values: Mapping[str, int], label: str = "task") -> Family:
    samples = [(f"{name}_total", {label: t}, float(n)) for t, n in sorted(values.items())]
    return Family(name, "counter", text, list(samples))


def _histogram(name: str, text: str, values: Mapping[str, Histogram]) -> Family:
    family = Family(name, "histogram", text)
    for task, h in sorted(values.items()):
        for bound, n in zip(BUCKETS, h.counts, strict=True):
            family.samples.append((f"{name}_bucket", {"task": task, "le": _number(bound)}, n))
        family.samples.append((f"{name}_bucket", {"task": task, "le": "+Inf"}, h.count))
        family.samples.append((f"{name}_sum", {"task": task}, h.sum))
        family.samples.append((f"{name}_count", {"task": task}, h.count))
    return family


def render(app: Observed) -> str:
    """``app``'s metrics in the Prometheus text exposition format 0.0.4."""
    return to_text(collect(app))


def to_text(families: Iterable[Family]) -> str:
    lines = []
    for family in families:
        exposed = f"{family.name}_total" if family.type == "counter" else family.name
        lines.append(f"# HELP {exposed} {_escape_help(family.help)}")
        lines.append(f"# TYPE {exposed} {family.type}")
        for name, labels, value in family.samples:
            lines.append(f"{name}{_labels(labels)} {_number(value)}")
    return "\n".join(lines) + "\n"


def _labels(labels: Mapping[str, str]) -> str:
    if not labels:
        return ""
    inner = ",".join(f'{k}="{_escape_label(str(v))}"' for k, v in labels.items())
    return "{" + inner + "}"


def _escape_label(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _escape_help(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n")


def _number(value: float) -> str:
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    if math.isnan(value):
        return "NaN"
    return repr(float(value)) if value != int(value) else f"{int(value)}.0"


class Collector:
    """A ``prometheus_client`` collector of ``app``'s metrics (needs the
    ``mongosched[metrics]`` extra)::

        from prometheus_client import REGISTRY
        REGISTRY.register(mongosched.observe.metrics.Collector(app))
    """

    def __init__(self, app: Observed) -> None:
        self.app = app
        instrument(app)

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import Metric

        for family in collect(self.app):
            metric = Metric(family.name, family.help, family.type)
            for name, labels, value in family.samples:
                metric.add_sample(name, dict(labels), value)
            yield metric


def serve(app: Observed, port: int, host: str = "0.0.0.0") -> ThreadingHTTPServer:
    """Serve ``app``'s metrics at ``http://host:port/metrics`` from a daemon thread;
    returns the server (``shutdown()`` stops it; ``server_address`` says the port when
    ``port`` is 0)."""
    instrument(app)

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - the name http.server calls
            if self.path.split("?", 1)[0] != "/metrics":
                self.send_error(404, "only /metrics is served here")
                return
            body = render(app).encode("utf-8")
            self.send_response(200)
            self.send_header("Content-Type", CONTENT_TYPE)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            log.debug("metrics: " + format, *args)

    server = ThreadingHTTPServer((host, port), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, name="mongosched-metrics", daemon=True)
    thread.start()
    log.info("metrics served at http://%s:%d/metrics", *server.server_address[:2])
    return server
