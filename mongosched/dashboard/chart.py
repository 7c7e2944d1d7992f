"""The overview's throughput chart: an inline SVG drawn on the server (no script, no
external resource), stacked bars of completed and failed jobs per time bucket."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta, timezone

from mongosched.dashboard.data import Bucket
from mongosched.dashboard.render import Markup, fmt, join

__all__ = ["throughput_chart"]

WIDTH, HEIGHT = 720, 170
LEFT, RIGHT, TOP, BOTTOM = 44, 8, 10, 24


def _scale(value: int) -> tuple[int, int]:
    """The axis: a step of 1, 2 or 5 times a power of ten, and how many steps (1 to 4)
    reach ``value`` (at least 4)."""
    top = max(value, 4)
    step = 1
    while True:
        for factor in (1, 2, 5):
            if factor * step * 4 >= top:
                size = factor * step
                return size, -(-top // size)
        step *= 10


def throughput_chart(buckets: Sequence[Bucket]) -> Markup:
    """Completed (green) over failed (red) jobs per bucket; each bar's exact figures
    are its tooltip and the table fallback for screen readers is the figure caption."""
    if not buckets:
        return Markup("")
    step, steps = _scale(max(b.completed + b.failed for b in buckets))
    top = step * steps
    plot_w = WIDTH - LEFT - RIGHT
    plot_h = HEIGHT - TOP - BOTTOM
    slot = plot_w / len(buckets)
    # Over a day or more, each time says its day too.
    days = buckets[-1].start - buckets[0].start >= timedelta(hours=23)
    axis_format = "%a %H:%M" if days else "%H:%M"
    bar = max(1.0, slot * 0.72)
    parts: list[Markup] = []
    for i in range(steps + 1):  # grid lines and their labels
        value = step * i
        y = TOP + plot_h - plot_h * i / steps
        parts.append(
            fmt(
                '<line class="grid" x1="{}" x2="{}" y1="{y}" y2="{y}"/>'
                '<text class="axis" x="{}" y="{}" text-anchor="end">{}</text>',
                LEFT,
                WIDTH - RIGHT,
                LEFT - 6,
                f"{y + 4:.1f}",
                f"{value:g}",
                y=f"{y:.1f}",
            )
        )
    for i, b in enumerate(buckets):
        x = LEFT + i * slot + (slot - bar) / 2
        h_done = plot_h * b.completed / top
        h_fail = plot_h * b.failed / top
        base = TOP + plot_h
        at = b.start.astimezone(timezone.utc)
        start = at.strftime(axis_format)
        label = f"{at:%Y-%m-%d %H:%M} UTC: {b.completed} completed, {b.failed} failed"
        parts.append(
            fmt(
                "<g><title>{}</title>"
                '<rect class="hit" x="{x}" y="{}" width="{w}" height="{}"/>'
                '<rect class="done" x="{x}" y="{}" width="{w}" height="{}"/>'
                '<rect class="fail" x="{x}" y="{}" width="{w}" height="{}"/></g>',
                label,
                TOP,
                plot_h,
                f"{base - h_done:.1f}",
                f"{h_done:.1f}",
                f"{base - h_done - h_fail:.1f}",
                f"{h_fail:.1f}",
                x=f"{x:.1f}",
                w=f"{bar:.1f}",
            )
        )
        if i % max(1, len(buckets) // 6) == 0:
            parts.append(
                fmt(
                    '<text class="axis" x="{}" y="{}" text-anchor="middle">{}</text>',
                    f"{x + bar / 2:.1f}",
                    HEIGHT - 6,
                    start,
                )
            )
    done = sum(b.completed for b in buckets)
    failed = sum(b.failed for b in buckets)
    return fmt(
        '<figure class="chart"><svg viewBox="0 0 {} {}" role="img" '
        'aria-label="Throughput: {} completed, {} failed">{}</svg>'
        '<figcaption><span class="key done"></span>{} completed '
        '<span class="key fail"></span>{} failed</figcaption></figure>',
        WIDTH,
        HEIGHT,
        done,
        failed,
        join(parts),
        done,
        failed,
    )
