"""The overview's chart of the last hour, as SVG shapes the template draws
(server-rendered, no script): one stacked bar per bucket of messages ended
(acked, timed out, failed, dead-lettered, skipped; height = count, on the
left scale) and a line of the bucket's hand-over latency p95 (ms, on a
logarithmic right scale, 1 ms to the hour's highest), from
`activity.recent` (shared/admin/recent.py)."""

from __future__ import annotations

import math
from typing import Any

from shared.admin.recent import OUTCOMES

WIDTH, HEIGHT = 720, 200
LEFT, RIGHT, TOP, BOTTOM = 48, 60, 10, 24
# Bar colours per outcome (CSS colours), in stacking order from the bottom.
COLOURS = {"acked": "#3a9a5b", "timed_out": "#e0a030", "failed": "#c83c3c", "dead_lettered": "#7a2a8a",
           "skipped": "#8899aa"}


def activity_chart(recent: dict[str, Any] | None) -> dict[str, Any] | None:
    """Shapes for `recent` (an `activity.recent` answer), in SVG user units
    of a WIDTH x HEIGHT box: `bars` (x, y, w, h, colour, title), `line`
    (polyline points of the hand-over p95), `ticks` (x, label) under the
    bars, `left_max` (the count scale's top), `right_max_ms` (the latency
    scale's top), `legend`. None without an answer (no event reader)."""
    if not recent or not recent.get("available") or not recent.get("buckets"):
        return None
    buckets = recent["buckets"]
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM
    step = plot_w / len(buckets)
    top = max(1, max(sum(b[o] for o in OUTCOMES) for b in buckets))
    slowest = max([b["handover_p95_ms"] for b in buckets if b["handover_p95_ms"]] or [1.0])
    log_top = math.log10(max(10.0, slowest))
    bars, points, ticks = [], [], []
    for i, b in enumerate(buckets):
        x, y = LEFT + i * step, TOP + plot_h
        for outcome in OUTCOMES:
            h = plot_h * b[outcome] / top
            if b[outcome]:
                bars.append({"x": round(x + step * 0.1, 1), "y": round(y - h, 1), "w": round(step * 0.8, 1),
                             "h": round(h, 1), "colour": COLOURS[outcome],
                             "title": f"{b['start']} UTC: {b[outcome]} {outcome.replace('_', ' ')}"})
            y -= h
        p95 = b["handover_p95_ms"]
        if p95:
            points.append(f"{x + step / 2:.1f},{TOP + plot_h * (1 - math.log10(max(1.0, p95)) / log_top):.1f}")
        if i % max(1, len(buckets) // 6) == 0:
            ticks.append({"x": round(x + step / 2, 1), "label": b["start"]})
    return {"width": WIDTH, "height": HEIGHT, "left": LEFT, "right": WIDTH - RIGHT, "top": TOP,
            "bottom": TOP + plot_h, "bars": bars, "line": " ".join(points), "ticks": ticks, "left_max": top,
            "right_max_ms": round(10 ** log_top), "legend": [(o.replace("_", " "), c) for o, c in COLOURS.items()]}
