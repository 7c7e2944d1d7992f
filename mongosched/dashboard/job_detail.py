"""The dashboard's page of one job (reads only): its facts, progress, arguments and
result, its runs (the attempts each operator's retry started, who ran each attempt and
its error), and the log records kept with it; its actions link to their confirmation
pages (:mod:`.actions`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from mongosched._core.records import (
    ERRORS_KEPT,
    RETRYABLE_STATUSES,
    AuditEntry,
    ErrorInfo,
    JobStatus,
)
from mongosched.dashboard.data import Operations
from mongosched.dashboard.render import (
    Context,
    Markup,
    ago,
    badge,
    code_block,
    duration,
    fmt,
    join,
    pretty,
    stamp,
    table,
    when,
)
from mongosched.dashboard.views import link, pause_link, run_time, runner_anchor
from mongosched.job import Job

__all__ = ["job_actions", "job_page"]

AUDIT_KEPT = 100
"""A job's audit entries its page reads (the newest)."""


def job_actions(ctx: Context, job: Job) -> Markup:
    """The buttons to the confirmation pages of what can be done to ``job`` now."""
    buttons = []
    path = f"/jobs/{job.id}"
    if job.status in RETRYABLE_STATUSES:
        buttons.append(
            fmt('<a class="button primary" href="{}">Retry…</a>', ctx.url(path + "/retry"))
        )
    if not job.is_finished and job.status is not JobStatus.PAUSED:
        buttons.append(
            fmt('<a class="button danger" href="{}">Cancel…</a>', ctx.url(path + "/cancel"))
        )
    if job.is_finished:
        buttons.append(
            fmt('<a class="button danger" href="{}">Delete…</a>', ctx.url(path + "/purge"))
        )
    return fmt('<div class="actions">{}</div>', join(buttons))


def job_page(ops: Operations, ctx: Context, job: Job) -> tuple[str, Markup]:
    now = ops.app.now()
    lease = job.lease
    task = link(ctx, "/jobs", job.task, [("task", job.task)])
    if job.label is not None:  # a Django task's path: its own filter and pause
        paused = any(p.kind == "task" and p.name == job.label for p in ops.pauses())
        task = fmt(
            '{} <span class="muted small">runs as {}</span> {}',
            link(ctx, "/jobs", job.label, [("label", job.label)]),
            task,
            pause_link(ctx, "task", job.label, paused=paused),
        )
    facts: list[tuple[str, Any]] = [
        ("Id", fmt('<span class="mono">{}</span>', job.id)),
        ("Task", task),
        ("Queue", link(ctx, "/jobs", job.queue, [("queue", job.queue)])),
        (
            "Status",
            badge("scheduled" if job.repeat and job.status is JobStatus.PENDING else job.status)
            + (Markup(" ") + badge("cancel requested") if job.cancel_requested else Markup("")),
        ),
        ("Priority", _priority(job)),
        ("Attempts", f"{job.attempts} of {job.max_attempts}"),
        ("Next run" if job.repeat else "Due", when(job.run_at, now)),
        ("Created", stamp(job.created_at)),
        ("Started", stamp(job.started_at)),
        ("Finished", stamp(job.finished_at)),
        ("Run time", duration(run_time(job, now))),
        ("Updated", stamp(job.updated_at)),
    ]
    if job.delete_at:
        facts.append(("Deleted after", stamp(job.delete_at)))
    if job.dedupe_key:
        facts.append(("Dedupe key", job.dedupe_key))
    if job.repeat:
        facts.append(("Repeats", _rule(job.repeat)))
        facts.append(("Slot", stamp(job.scheduled_for)))
    if job.repeat and not job.last_run:
        facts.append(("Last run", "not yet"))
    if job.last_run:
        facts.append(
            (
                "Last run",
                join([stamp(job.last_run.finished_at), Markup(" "), badge(job.last_run.status)]),
            )
        )
    if lease is not None:
        facts.append(
            (
                "Lease owner",
                fmt(
                    '<a class="mono" href="{}#{}">{}</a>',
                    ctx.url("/runners"),
                    runner_anchor(lease.owner),
                    lease.owner,
                ),
            )
        )
        facts.append(("Lease until", when(lease.until, now)))
        facts.append(("Last heartbeat", ago(lease.heartbeat_at, now)))
    for name, value in _extra_facts(job):
        facts.append((name, value))
    dl = join(fmt("<dt>{}</dt><dd>{}</dd>", k, v) for k, v in facts)
    left = [fmt('<section class="panel"><h2>Job</h2><dl class="facts">{}</dl></section>', dl)]
    right: list[Markup] = []
    if job.progress is not None:
        value = job.progress.value
        bar = (
            fmt(
                '<progress max="1" value="{}">{}</progress> {}',
                f"{value:.4f}",
                f"{value:.0%}",
                f"{value:.0%}",
            )
            if value is not None
            else Markup("")
        )
        left.append(
            fmt(
                '<section class="panel"><h2>Progress</h2><p>{} {}</p>'
                '<p class="muted">reported {}</p></section>',
                bar,
                job.progress.message or "",
                ago(job.progress.at, now),
            )
        )
    args, kwargs = job.call
    passed = (
        fmt(
            '<p class="muted small">{}\'s own, which <span class="mono">{}</span> passes on.</p>'
            "<details><summary>As stored</summary>{}</details>",
            job.label,
            job.task,
            pretty(job.kwargs),
        )
        if job.label is not None and (args, kwargs) != (list(job.args), dict(job.kwargs))
        else Markup("")
    )
    right.append(
        fmt(
            '<section class="panel"><h2>Arguments</h2>{}<h3>args</h3>{}<h3>kwargs</h3>{}</section>',
            passed,
            pretty(args),
            pretty(kwargs),
        )
    )
    if job.result is not None or job.status is JobStatus.COMPLETED:
        right.append(fmt('<section class="panel"><h2>Result</h2>{}</section>', pretty(job.result)))
    sections = [
        fmt('<div class="grid2 detail"><div>{}</div><div>{}</div></div>', join(left), join(right))
    ]
    runs, told = _runs_panel(ops, ctx, job, now)
    if runs is not None:
        sections.append(runs)
    sections.extend(_error_panels(job, now, told))
    steps = ops.app.steps(job.id)
    if steps:
        sections.append(_steps_panel(ctx, job, steps))
    if job.logs:
        sections.append(_logs_panel(job))
    title = job.label or job.task
    head = fmt(
        '<p class="crumbs">{} / <span class="mono">{}</span></p>',
        link(ctx, "/jobs", "Jobs"),
        job.id,
    )
    return title, head + job_actions(ctx, job) + join(sections)


@dataclass(frozen=True)
class _Attempt:
    """An attempt as the runs panel shows it: ended (from :attr:`Job.history`) or
    running now (from the lease; no end, no status)."""

    attempt: int
    runner: str
    host: str | None
    pid: int | None
    started_at: datetime
    ended_at: datetime | None = None
    status: JobStatus | None = None


@dataclass
class _Run:
    """Attempts run one after another, and the operator action that started them (None:
    the job as scheduled, or a repeating job's next occurrence)."""

    started_by: AuditEntry | None
    attempts: list[_Attempt] = field(default_factory=list)


def _runs(job: Job, retries: list[AuditEntry]) -> list[_Run]:
    """The job's attempts grouped into runs: attempts count from one again after an
    operator's retry (``retries``, oldest first) and at a repeating job's next
    occurrence. A run is told as started by the retry made between the previous run's
    end and its start (none: an occurrence). A retry that has not run yet ends the list
    with an empty run."""
    attempts = [
        _Attempt(a.attempt, a.runner, a.host, a.pid, a.started_at, a.ended_at, a.status)
        for a in job.history
    ]
    lease = job.lease
    if job.status is JobStatus.RUNNING and lease is not None and job.started_at is not None:
        attempts.append(_Attempt(job.attempts, lease.owner, lease.host, lease.pid, job.started_at))
    runs: list[_Run] = []
    unused = list(retries)
    for a in attempts:
        if runs and a.attempt > runs[-1].attempts[-1].attempt:
            runs[-1].attempts.append(a)
            continue
        by = None
        if runs:
            ended = runs[-1].attempts[-1].ended_at or a.started_at
            by = next((e for e in unused if ended <= e.at <= a.started_at), None)
            unused = unused if by is None else unused[unused.index(by) + 1 :]
        runs.append(_Run(by, [a]))
    last = attempts[-1].ended_at if attempts else None
    runs.extend(_Run(e) for e in unused if last is not None and e.at >= last)
    return runs


def _runs_panel(
    ops: Operations, ctx: Context, job: Job, now: datetime
) -> tuple[Markup | None, set[tuple[int, datetime]]]:
    """The job's attempts as runs, each headed by who started it and when (linked to
    the audit trail), each attempt with its runner, host, process, times and error.
    Also the failed attempts it told of (attempt, time), which the failed-attempts
    panel leaves out. None when the job kept no ended attempt and none runs."""
    entries = ops.app.audit.entries(limit=AUDIT_KEPT, job=job.id)
    retries = sorted((e for e in entries if e.action == "retry"), key=lambda e: e.at)
    runs = _runs(job, retries)
    if not runs:
        return None, set()
    errors = {(e.attempt, e.at): e.error for e in job.errors}
    told = {
        (a.attempt, a.ended_at)
        for run in runs
        for a in run.attempts
        if a.ended_at is not None and (a.attempt, a.ended_at) in errors
    }
    last = max(told, key=lambda key: (key[1], key[0]), default=None)  # its traceback open
    audit = ctx.url("/audit", [("job", str(job.id))])
    items = []
    for n, run in enumerate(runs, 1):
        by = run.started_by
        if by is not None:
            head = fmt(
                'Run {} · retried by <strong>{}</strong> via {} {} · <a href="{}">audit</a>',
                n,
                by.actor,
                by.via,
                ago(by.at, now),
                audit,
            )
        elif n == 1:
            head = fmt("Run {} · as scheduled {}", n, ago(job.created_at, now))
        elif job.repeat:
            head = fmt("Run {} · next occurrence", n)
        else:  # a retry of many jobs at once (by a filter), or an entry no longer kept
            head = fmt(
                'Run {} · retried · <a href="{}">the audit trail</a> says by whom',
                n,
                ctx.url("/audit"),
            )
        rows = []
        for a in run.attempts:
            key = (a.attempt, a.ended_at)
            error = errors.get(key) if key in told else None
            rows.append(_attempt_item(ctx, a, error, open_=key == last))
        if not rows:
            rows.append(Markup('<li class="muted">Not run yet.</li>'))
        items.append(
            fmt('<li><p class="run-head">{}</p><ol class="attempts">{}</ol></li>', head, join(rows))
        )
    link_audit = (
        fmt(' <a class="small" href="{}">its audit trail</a>', audit) if entries else Markup("")
    )
    panel = fmt(
        '<section class="panel runs"><h2>Runs{}</h2><ol class="runs">{}</ol></section>',
        link_audit,
        join(items),
    )
    return panel, told


def _attempt_item(ctx: Context, a: _Attempt, error: ErrorInfo | None, *, open_: bool) -> Markup:
    where = fmt(
        'runner <a class="mono" href="{}#{}">{}</a>{}{}',
        ctx.url("/runners"),
        runner_anchor(a.runner),
        a.runner,
        fmt(" on <strong>{}</strong>", a.host) if a.host else Markup(""),
        fmt(" pid {}", a.pid) if a.pid is not None else Markup(""),
    )
    if a.ended_at is None:
        status, took = badge("running"), fmt("since {}", stamp(a.started_at))
    else:
        status = badge("retried" if a.status is JobStatus.PENDING else a.status)
        took = fmt(
            "{} → {} ({})",
            stamp(a.started_at),
            stamp(a.ended_at),
            duration((a.ended_at - a.started_at).total_seconds()),
        )
    line = fmt("<p>Attempt {} {} · {} · {}</p>", a.attempt, status, where, took)
    if error is None:
        return fmt('<li class="attempt">{}</li>', line)
    return fmt(
        '<li class="attempt">{}<p>{}</p><details{}><summary>Traceback</summary>{}</details></li>',
        line,
        _error_text(error),
        Markup(" open") if open_ else Markup(""),
        _traceback(error),
    )


def _error_panels(job: Job, now: Any, told: set[tuple[int, datetime]]) -> list[Markup]:
    """Each failed attempt's error the runs panel did not tell (the last one's traceback
    open), then the job's last error where it is none of them (a cancel's, an
    expiry's; a job stored before jobs kept their attempts)."""
    out: list[Markup] = []
    attempts = tuple(a for a in job.errors if (a.attempt, a.at) not in told)
    if attempts:
        items = join(
            fmt(
                '<li><p><span class="muted">Attempt {} · {}</span> {}</p>'
                "<details{}><summary>Traceback</summary>{}</details></li>",
                a.attempt,
                ago(a.at, now),
                _error_text(a.error),
                Markup(" open") if i == len(attempts) - 1 else Markup(""),
                _traceback(a.error),
            )
            for i, a in enumerate(attempts)
        )
        out.append(
            fmt(
                '<section class="panel error-panel"><h2>Failed attempts</h2>'
                '<ol class="attempts">{}</ol>{}</section>',
                items,
                fmt('<p class="muted small">The last {} are kept.</p>', len(attempts))
                if len(attempts) >= ERRORS_KEPT
                else Markup(""),
            )
        )
    error = job.error
    if error is not None and (not job.errors or job.errors[-1].error != error):
        out.append(
            fmt(
                '<section class="panel error-panel"><h2>Error</h2><p>{}</p>{}</section>',
                _error_text(error),
                _traceback(error),
            )
        )
    return out


def _error_text(error: ErrorInfo) -> Markup:
    return fmt('<strong class="mono">{}</strong>: {}', error.path, error.message)


def _traceback(error: ErrorInfo) -> Markup:
    if not error.traceback:
        return Markup('<p class="muted">No traceback.</p>')
    return code_block(error.traceback, "traceback")


def _steps_panel(ctx: Context, job: Job, steps: list[Any]) -> Markup:
    """A workflow's recorded history as a timeline: each position's kind, name, tries,
    times, and its result, error, wake-up time or the jobs it gathered (linked)."""

    def outcome(step: Any) -> Any:
        if step.error is not None:
            return fmt("{}: {}", step.error.get("type"), step.error.get("message"))
        until = stamp(step.until) if step.until else "-"
        if step.kind.value == "sleep":
            return fmt("until {}", until)
        if step.kind.value == "wait":
            return fmt("for event {} until {}", step.name, until)
        if step.kind.value == "event":
            if step.event is None:
                return fmt("no event {} by the deadline", step.name)
            return fmt("received {}: {}", step.name, pretty(step.value))
        if step.children:
            return join(link(ctx, f"/jobs/{child}", child) for child in step.children)
        return pretty(step.value)

    rows = [
        (
            s.position,
            s.kind.value,
            s.name,
            s.attempts,
            stamp(s.started_at) if s.started_at else "-",
            stamp(s.finished_at) if s.finished_at else "-",
            outcome(s),
        )
        for s in steps
    ]
    path = f"/jobs/{job.id}"
    buttons = [
        link(ctx, f"{path}/fork", fmt("Fork from {}…", s.position), [("from", str(s.position))])
        for s in steps
        if s.kind.value == "step"
    ]
    if job.status in RETRYABLE_STATUSES:
        buttons.insert(0, link(ctx, f"{path}/retry-workflow", "Retry from failed step…"))
    if not job.is_finished:
        buttons.insert(0, link(ctx, f"{path}/cancel-workflow", "Cancel workflow…"))
    return fmt(
        '<section class="panel steps"><h2>Steps</h2>{}<div class="actions">{}</div></section>',
        table(["#", "Kind", "Name", "Tries", "Started", "Finished", "Outcome"], rows, empty=""),
        join(buttons),
    )


def _logs_panel(job: Job) -> Markup:
    """The log records kept with the job (:attr:`Job.logs`), oldest first."""
    rows = [(stamp(e.at), e.level, e.logger, e.attempt, e.message) for e in job.logs]
    return fmt(
        '<section class="panel flush"><h2>Logs</h2>{}</section>',
        table(["Time (UTC)", "Level", "Logger", "Attempt", "Message"], rows, empty="", css="logs"),
    )


def _extra_facts(job: Job) -> list[tuple[str, Any]]:
    """Fields newer versions add to jobs (expiry, dependencies), where present."""
    out: list[tuple[str, Any]] = []
    record = job.record
    expires = getattr(record, "expires_at", None)
    if expires is not None:
        out.append(("Expires", stamp(expires)))
    depends = getattr(record, "depends_on", None)
    if depends:
        out.append(("Depends on", ", ".join(str(d) for d in depends)))
    return out


def _priority(job: Job) -> Any:
    """Its priority; a Django task's own too (its scale differs: higher runs first)."""
    if job.label_priority is None:
        return job.priority
    return fmt(
        '{} <span class="muted small">(Django priority; runs at mongosched priority {})</span>',
        job.label_priority,
        f"{job.priority:g}",
    )


def _rule(repeat: dict[str, Any]) -> str:
    if repeat.get("cron"):
        tz = repeat.get("timezone")
        return f"cron {repeat['cron']}" + (f" ({tz})" if tz else "")
    return f"every {duration(float(repeat.get('every') or 0))}"
