"""The HTML report: one self-contained file (charts as base64 PNG, no scripts).

`build_report` takes figures already collected to the driver (`ReportData`)
and returns the HTML and the key chart's PNG; it runs no Spark and does no
I/O, so it can be tested with hand-made data. Charts use matplotlib's Agg
backend (no display needed).
"""

from __future__ import annotations

import base64
import html
import io
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from pipeline.operations_stage import OperationsResult  # noqa: E402
from pipeline.report_operations import operations_section  # noqa: E402

#: The per-provider table's columns, main figures first (`totals_by_provider`).
PROVIDER_COLUMNS = [
    "provider", "messages", "acked_share", "timed_out_share", "acked", "timed_out", "late_acks", "failed",
    "dead_lettered", "skipped", "lost", "send_to_ack_p50_ms", "send_to_ack_p90_ms", "send_to_ack_p99_ms", "rooms",
    "duplicates_sent", "publish_to_send_p50_ms", "publish_to_send_p99_ms",
]  # fmt: skip

OUTCOME_COLOURS = {
    "acked": "#2e7d32",
    "timed_out": "#f9a825",
    "failed": "#c62828",
    "dead_lettered": "#6a1b9a",
    "skipped": "#78909c",
    "lost": "#000000",
}


@dataclass
class ReportData:
    """Everything the report shows, collected from the pipeline's tables.

    - `summary`: key -> value (counts, shares 0..1, `*_ms` in ms).
    - `audit_checks`: check name -> rooms failing it.
    - `advice`: `TimeoutAdvice.as_dict()`.
    - `cdf`: (latency_ms, share of arriving acks at or below it), ascending.
    - `provider_cdf`: provider -> the same, per provider (drawn when there
      are two providers or more).
    - `timeline`: rows with `bucket_start` (datetime) and one count per outcome;
      `timeline_bucket_s` its width in seconds.
    - `room_rates`: messages/s of each room (`rooms.messages_per_s`).
    - `top_hol`: (room_id, longest head-of-line wait ms), longest first.
    - `tradeoff`: `timeout_tradeoff` rows as dicts.
    - `providers`, `hourly`, `failing_rooms`, `reject_reasons`, `reject_samples`:
      rows as dicts for the tables.
    - `operations`: the faults and operations (`pipeline.operations_stage`);
      the part is left out when it is None.
    """

    summary: dict[str, Any]
    audit_checks: dict[str, int]
    advice: dict[str, Any]
    cdf: list[tuple[float, float]] = field(default_factory=list)
    provider_cdf: dict[str, list[tuple[float, float]]] = field(default_factory=dict)
    timeline: list[dict[str, Any]] = field(default_factory=list)
    timeline_bucket_s: int = 3600
    room_rates: list[float] = field(default_factory=list)
    top_hol: list[tuple[str, float]] = field(default_factory=list)
    tradeoff: list[dict[str, Any]] = field(default_factory=list)
    providers: list[dict[str, Any]] = field(default_factory=list)
    hourly: list[dict[str, Any]] = field(default_factory=list)
    failing_rooms: list[dict[str, Any]] = field(default_factory=list)
    reject_reasons: dict[str, int] = field(default_factory=dict)
    reject_samples: list[dict[str, Any]] = field(default_factory=list)
    generated_at: str = ""
    input_desc: str = ""
    operations: OperationsResult | None = None


def _png(fig) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100, bbox_inches="tight")
    plt.close(fig)
    return buf.getvalue()


def _empty(ax, text: str) -> None:
    ax.text(0.5, 0.5, text, ha="center", va="center", transform=ax.transAxes, color="#666")
    ax.set_xticks([])
    ax.set_yticks([])


def _mark_timeouts(ax, advice: dict[str, Any], scale: float = 1.0) -> None:
    rec = advice.get("recommended_ms")
    lo, hi = advice.get("ci_low_ms"), advice.get("ci_high_ms")
    obs = advice.get("observed_timeout_ms")
    if rec:
        if lo or hi:
            left, right = ax.get_xlim()
            label = "its confidence interval" + ("" if lo and hi else " (open: too few acks)")
            ax.axvspan(
                lo / scale if lo else left, hi / scale if hi else right, color="#1565c0", alpha=0.12, label=label
            )
            ax.set_xlim(left, right)
        ax.axvline(rec / scale, color="#1565c0", ls="--", label=f"recommended X = {rec / 1000:.2f} s")
    if obs:
        ax.axvline(obs / scale, color="#e65100", ls=":", label=f"X in force = {obs / 1000:.2f} s")


def chart_cdf(data: ReportData) -> bytes:
    """Ack-latency CDF of arriving acks, with the X in force and the recommended X."""
    fig, ax = plt.subplots(figsize=(8, 4.2))
    pts = [(x, p) for x, p in data.cdf if x is not None and x > 0]
    if not pts:
        _empty(ax, "no ack arrived")
    else:
        ax.step([x for x, _ in pts], [p * 100 for _, p in pts], where="post", color="#2e7d32", label="arriving acks")
        if len(data.provider_cdf) > 1:
            for name, curve in sorted(data.provider_cdf.items()):
                cp = [(x, p) for x, p in curve if x is not None and x > 0]
                if cp:
                    ax.step([x for x, _ in cp], [p * 100 for _, p in cp], where="post", lw=1, alpha=0.8,
                            label=f"{name}")  # fmt: skip
        ax.set_xscale("log")
        _mark_timeouts(ax, data.advice)
        ax.set_xlabel("send to ack (ms, log scale)")
        ax.set_ylabel("share of arriving acks at or below (%)")
        ax.set_ylim(0, 100.5)
        ax.grid(alpha=0.3, which="both")
        ax.legend(loc="lower right", fontsize=8)
    ax.set_title("Ack latency: cumulative distribution")
    return _png(fig)


def tradeoff_figure(data: ReportData):
    """The timeout trade-off as a matplotlib Figure: share of arriving acks
    later than X (%, left axis) and a backlogged room's rate (msg/s, right
    axis) per candidate X (s, log scale). Both axes start at 0, so a point
    of either line never sits below the other's zero (the right axis used to
    start at 0 while the left one had a margin below 0, and small rates were
    drawn under the left axis' 0 line, reading as negative)."""
    fig, ax = plt.subplots(figsize=(8, 4.2))
    rows = [r for r in data.tradeoff if r.get("share_too_late") is not None]
    if not rows:
        _empty(ax, "no ack arrived: no trade-off to show")
        ax.set_title("Ack timeout trade-off: missed acks against room throughput")
        return fig
    xs = [r["timeout_ms"] / 1000 for r in rows]
    late = [r["share_too_late"] * 100 for r in rows]
    rates = [max(0.0, r["room_max_messages_per_s"] or 0.0) for r in rows]
    ax.plot(xs, late, "o-", color="#c62828", label="acks that would come too late (%)", clip_on=False)
    ax.set_xscale("log")
    ax.set_xlabel("ack timeout X (s, log scale)")
    ax.set_ylabel("arriving acks later than X (%)", color="#c62828")
    ax.set_ylim(0, max(1.0, max(late)) * 1.05)
    ax.grid(alpha=0.3, which="both")
    ax2 = ax.twinx()
    ax2.plot(xs, rates, "s-", color="#1565c0", label="backlogged room's rate (msg/s)", clip_on=False)
    ax2.set_ylabel("messages/s of a room with a backlog", color="#1565c0")
    ax2.set_ylim(0, max(rates) * 1.05 if max(rates) > 0 else 1.0)
    _mark_timeouts(ax, data.advice, scale=1000)
    h1, l1 = ax.get_legend_handles_labels()
    h2, l2 = ax2.get_legend_handles_labels()
    ax.legend(h1 + h2, l1 + l2, loc="upper right", fontsize=8)
    ax.set_title("Ack timeout trade-off: missed acks against room throughput")
    return fig


def chart_tradeoff(data: ReportData) -> bytes:
    """The timeout trade-off chart (`tradeoff_figure`) as PNG bytes."""
    return _png(tradeoff_figure(data))


def chart_outcomes(data: ReportData) -> bytes:
    """Share of each outcome per time bucket (by enqueue time)."""
    fig, ax = plt.subplots(figsize=(8, 3.8))
    rows = [r for r in data.timeline if r.get("messages")]
    if not rows:
        _empty(ax, "no messages")
    else:
        xs = list(range(len(rows)))
        bottom = [0.0] * len(rows)
        for o, colour in OUTCOME_COLOURS.items():
            ys = [100.0 * (r.get(o) or 0) / r["messages"] for r in rows]
            ax.bar(xs, ys, bottom=bottom, color=colour, label=o, width=0.9)
            bottom = [b + y for b, y in zip(bottom, ys, strict=True)]
        step = max(1, len(rows) // 8)
        fmt = "%H:%M:%S" if data.timeline_bucket_s < 60 else "%m-%d %H:%M"
        ax.set_xticks(xs[::step], [r["bucket_start"].strftime(fmt) for r in rows[::step]], rotation=30, fontsize=8)
        ax.set_ylabel("share of messages (%)")
        ax.set_ylim(0, 100)
        ax.legend(fontsize=8, ncol=5, loc="lower left")
    ax.set_title(f"Outcomes over time ({_bucket_label(data.timeline_bucket_s)} buckets, by enqueue time)")
    return _png(fig)


def chart_room_rates(data: ReportData) -> bytes:
    """Histogram of per-room throughput (messages/s over each room's active span)."""
    fig, ax = plt.subplots(figsize=(8, 3.8))
    vals = [v for v in data.room_rates if v is not None]
    if not vals:
        _empty(ax, "no room with two or more ended messages")
    else:
        ax.hist(vals, bins=min(50, max(5, len(vals) // 5)), color="#1565c0")
        ax.set_xlabel("messages/s over the room's active span")
        ax.set_ylabel("rooms")
        ax.grid(alpha=0.3)
    ax.set_title("Per-room throughput")
    return _png(fig)


def chart_top_hol(data: ReportData) -> bytes:
    """The rooms with the longest head-of-line wait (s)."""
    rows = [(r, w) for r, w in data.top_hol if w is not None]
    fig, ax = plt.subplots(figsize=(8, max(2.5, 0.28 * len(rows) + 1)))
    if not rows:
        _empty(ax, "no message was sent")
    else:
        rows = rows[::-1]
        ax.barh([r for r, _ in rows], [w / 1000 for _, w in rows], color="#6a1b9a")
        ax.set_xlabel("longest head-of-line wait (s): enqueued to first sent")
        ax.tick_params(axis="y", labelsize=8)
        ax.grid(alpha=0.3, axis="x")
    ax.set_title("Top rooms by head-of-line wait")
    return _png(fig)


def _bucket_label(s: int) -> str:
    return f"{s // 3600} h" if s % 3600 == 0 else f"{s // 60} min" if s % 60 == 0 else f"{s} s"


def _fmt(v: Any) -> str:
    if v is None:
        return "–"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, float):
        return f"{v:,.3f}" if abs(v) < 10 else f"{v:,.1f}"
    if isinstance(v, int):
        return f"{v:,}"
    if isinstance(v, datetime):
        return v.strftime("%Y-%m-%d %H:%M:%S")
    return str(v)


def _table(rows: list[dict[str, Any]], cols: list[str] | None = None) -> str:
    if not rows:
        return "<p class=muted>none</p>"
    cols = cols or list(rows[0])
    head = "".join(f"<th>{html.escape(c)}</th>" for c in cols)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(_fmt(r.get(c)))}</td>" for c in cols) + "</tr>" for r in rows)
    # the wrapper scrolls a wide table within the page's width instead of the whole page
    return f"<div class=scroll><table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table></div>"


def _img(png: bytes, alt: str) -> str:
    return f'<img alt="{html.escape(alt)}" src="data:image/png;base64,{base64.b64encode(png).decode()}">'


_CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;max-width:1000px;margin:2em auto;padding:0 1em;color:#222}
h1{font-size:1.6em}h2{font-size:1.2em;margin-top:2em;border-bottom:1px solid #ddd}
.scroll{max-width:100%;overflow-x:auto}
table{border-collapse:collapse;font-size:.85em;margin:.5em 0}td,th{border:1px solid #ddd;padding:3px 7px;text-align:right}
td{overflow-wrap:anywhere;max-width:40em}
th{background:#f4f4f4}td:first-child,th:first-child{text-align:left}.muted{color:#777}
.ok{color:#2e7d32;font-weight:bold}.bad{color:#c62828;font-weight:bold}img{max-width:100%}
code{background:#f4f4f4;padding:1px 4px}
"""


def build_report(data: ReportData) -> tuple[str, bytes]:
    """The report as (HTML text, PNG bytes of the key chart: the timeout
    trade-off). The HTML needs no network: images are inline base64 PNG and
    there is no script."""
    s, adv = data.summary, data.advice
    tradeoff_png = chart_tradeoff(data)
    charts = {
        "cdf": chart_cdf(data),
        "outcomes": chart_outcomes(data),
        "rates": chart_room_rates(data),
        "hol": chart_top_hol(data),
    }
    failing = {k: v for k, v in data.audit_checks.items() if v}
    verdict = (
        "<p class=ok>Ordering holds in every room: sends in sequence order, never more than one message in flight, "
        'no message without an end, no gap (the rules: docs/analytics.md, "The audit\'s definitions").</p>'
        if not failing
        else "<p class=bad>Ordering audit found problems: "
        + ", ".join(f"{html.escape(k)} fails in {v:,} room(s)" for k, v in failing.items())
        + ".</p>"
    )
    rec = adv.get("recommended_ms")
    if rec is None:
        advice_text = "<p class=muted>No ack arrived in this log: no timeout can be recommended.</p>"
    else:
        lo, hi = adv.get("ci_low_ms"), adv.get("ci_high_ms")
        ci = (
            f"{adv['confidence']:.0%} confidence interval {_fmt(lo)} – {_fmt(hi)} ms"
            if lo is not None and hi is not None
            else f"too few acks ({adv['arriving_acks']:,}) to bound it on the "
            + ("upper" if hi is None else "lower")
            + f" side at {adv['confidence']:.0%} confidence"
        )
        obs = adv.get("observed_timeout_ms")
        advice_text = (
            f"<p>Recommended ack timeout <b>X = {rec:,.0f} ms</b>: {adv['target_share']:.1%} of the "
            f"{adv['arriving_acks']:,} acks that arrived came within it ({ci}; order-statistic interval, "
            "no distribution assumed). "
            + (
                f"The X in force (observed from <code>sent</code> to <code>timed_out</code>) is about {obs:,.0f} ms, "
                f"and {adv['share_late_observed']:.2%} of arriving acks came later than that. "
                if obs is not None and adv.get("share_late_observed") is not None
                else ""
            )
            + f"{adv['no_ack']:,} timed-out messages never got an ack at all.</p>"
        )
    summary_rows = [{"figure": k, "value": v} for k, v in s.items()]
    parts = [
        "<!doctype html><html><head><meta charset=utf-8>",
        "<title>baton delivery analytics</title>",
        f"<style>{_CSS}</style></head><body>",
        "<h1>baton delivery analytics</h1>",
        f"<p class=muted>Input: <code>{html.escape(data.input_desc)}</code> · generated {html.escape(data.generated_at)}</p>",
        "<h2>Ordering audit</h2>",
        verdict,
        _table([{"check": k, "rooms failing": v} for k, v in data.audit_checks.items()]),
        "<h3>Rooms failing the audit (first 20)</h3>",
        _table(data.failing_rooms),
        "<h2>Summary</h2>",
        _table(summary_rows),
        "<h2>By provider</h2>",
        "<p class=muted>The main figures per platform (send-to-ack percentiles are of acked messages, approximate).</p>",
        _table(data.providers, [c for c in PROVIDER_COLUMNS if not data.providers or c in data.providers[0]]),
        "<h2>Ack timeout advice</h2>",
        advice_text,
        _img(tradeoff_png, "timeout trade-off"),
        _img(charts["cdf"], "ack latency CDF"),
        _table(
            data.tradeoff,
            [
                "timeout_ms",
                "share_too_late",
                "acks_too_late",
                "mean_hold_ms",
                "room_max_messages_per_s",
                "room_busy_s_mean",
                "room_busy_s_p90",
            ],
        ),
        "<h2>Outcomes over time</h2>",
        _img(charts["outcomes"], "outcomes over time"),
        "<h2>Rooms</h2>",
        _img(charts["rates"], "per-room throughput"),
        _img(charts["hol"], "top rooms by head-of-line wait"),
        *(operations_section(data.operations, _table, _img, _png) if data.operations is not None else []),
        "<h2>Per hour</h2>",
        _table(data.hourly),
        "<h2>Rejected lines</h2>",
        _table([{"reason": k, "lines": v} for k, v in data.reject_reasons.items()]),
        _table(data.reject_samples),
        "</body></html>",
    ]
    return "\n".join(parts), tradeoff_png
