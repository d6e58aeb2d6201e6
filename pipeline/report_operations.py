"""The report's "Faults and operations" part: tables of `OperationsResult`
and one chart (the time rooms spent waiting, by cause)."""

from __future__ import annotations

import html
from collections.abc import Callable
from typing import Any

import matplotlib.pyplot as plt

from pipeline.operations import WAIT_KINDS
from pipeline.operations_stage import REPORT_ROWS, OperationsResult


def chart_waits(result: OperationsResult, png: Callable[[Any], bytes]) -> bytes:
    """Total seconds rooms waited, per wait kind and provider (horizontal bars)."""
    rows = sorted(result.waits, key=lambda r: r["total_s"] or 0.0)
    fig, ax = plt.subplots(figsize=(8, max(2.0, 0.45 * len(rows) + 1)))
    if not rows:
        ax.text(0.5, 0.5, "no waits in this log", ha="center", va="center", transform=ax.transAxes)
        ax.set_axis_off()
    else:
        ax.barh([f"{r['kind']} ({r['provider']})" for r in rows], [r["total_s"] or 0.0 for r in rows], color="#1565c0")
        ax.set_xlabel("total wait (s)")
    ax.set_title("Time rooms waited, by cause")
    return png(fig)


def operations_section(
    result: OperationsResult, table: Callable[..., str], img: Callable[[bytes, str], str], png: Callable[[Any], bytes]
) -> list[str]:
    """The HTML parts of the section (`table`, `img` and `png` are the
    report's own helpers)."""
    meaning = {k.kind: k.meaning for k in WAIT_KINDS}
    waits = [{**r, "what": meaning.get(r["kind"], "")} for r in result.waits]
    prep = (
        f"<p>{result.prepared_n:,} preparations finished; request to result p50 "
        f"{_ms(result.prepare_p50_ms)}, p99 {_ms(result.prepare_p99_ms)}. Waiting for a preparation took "
        f"{_share(result.prepare_share_of_hol)} of all head-of-line wait.</p>"
        if result.prepared_n
        else "<p class=muted>No preparation in this log.</p>"
    )
    return [
        "<h2>Faults and operations</h2>",
        "<p class=muted>Every event off the normal path (enqueued, sent, acked, timed out), counted by cause "
        "(numbers in a reason read as N) and provider: resends by cause, unknown outcomes, watchdog rescues, "
        "timers not armed, back-pressure, dead letters by reason, preparation failures by class.</p>",
        table(result.faults, ["event", "cause", "provider", "events", "rooms"]),
        "<h3>Waits: pauses, parked and blocked messages, pacing, preparation, held sequences, schedules</h3>",
        img(chart_waits(result, png), "time rooms waited, by cause"),
        table(waits, ["kind", "provider", "episodes", "open", "rooms", "total_s", "p50_ms", "p99_ms", "max_ms",
                      "late_p50_ms", "late_max_ms", "what"]),
        prep,
        "<h3>Watchdog rescues, by phase</h3>",
        "<p class=muted>How late each rescued room's own wake-up (its timer) was when the sweep re-drove it; "
        "every rescue in <code>rescues/</code>.</p>",
        table(result.rescues, ["phase", "rescues", "rooms", "overdue_p50_ms", "overdue_p99_ms", "overdue_max_ms"]),
        "<h3>Duplicates per message</h3>",
        "<p class=muted>Messages by their possibly-sent attempts beyond the first.</p>",
        table(result.sends, ["extra_sends", "messages"]),
        f"<h3>Operator actions ({result.trail_n:,}; first {REPORT_ROWS}, all in <code>operator_actions/</code>)</h3>",
        table(result.trail, ["ts", "action", "actor", "room_id", "seq", "message_id", "reason"]),
        f"<h3>Rooms with most faults (first {REPORT_ROWS}, all in <code>room_faults/</code>)</h3>",
        table(result.room_faults),
        f"<h3>Producer sequence gaps given up ({result.gaps_n:,})</h3>",
        table(result.gaps, ["room_id", "ts", "missing"]),
    ]  # fmt: skip


def _ms(v: float | None) -> str:
    return "–" if v is None else f"{v:,.0f} ms"


def _share(v: float | None) -> str:
    return "–" if v is None else html.escape(f"{v:.1%}")
