"""The comparison's PNG: per-room messages/s (median over rooms, p10 as the
lower whisker) against the ack latency median, for (b), (c) and (d), with
the physical limit of an ordered sender drawn as a line, and 0.97 of the
actors' rate as the goal line for baton (matplotlib)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from tools.bench.compare import metrics  # noqa: E402
from tools.local.audit import percentile  # noqa: E402

STYLE = {"delay": ("(b) fixed delay", "tab:orange", "s"), "actor": ("(c) asyncio actors", "tab:green", "o"),
         "baton": ("(d) baton, emulators", "tab:blue", "D")}


def plot(results: list[dict[str, Any]], args: argparse.Namespace, path: Path) -> None:
    """Write the PNG to `path`. `results`: the driver's rows (system,
    latency_ms, per_room_msgs_per_s_p50/p10, per_room_limit_msgs_per_s_p50)."""
    fig, ax = plt.subplots(figsize=(8, 5), dpi=120)
    grid = np.geomspace(30, 1500, 40)
    limit = [percentile(metrics.simulated_room_limits(x, args.ack_sigma, args.ack_prob, args.ack_timeout_ms,
                                                      args.burst, rooms=4000), 0.5) for x in grid]
    ax.plot(grid, limit, color="black", lw=1.5,
            label=f"physical limit: one ack round trip per message\n(no ack: the {args.ack_timeout_ms:.0f} ms timeout), "
                  "median room")
    ax.plot(grid, 1000 / grid, color="grey", lw=1, ls=":", label="1 / ack latency median (every message acked)")
    for system, (label, color, marker) in STYLE.items():
        rows = sorted((r for r in results if r["system"] == system and r["per_room_msgs_per_s_p50"]),
                      key=lambda r: r["latency_ms"])
        if not rows:
            continue
        x = [r["latency_ms"] for r in rows]
        y = [r["per_room_msgs_per_s_p50"] for r in rows]
        low = [max(0.0, r["per_room_msgs_per_s_p50"] - (r["per_room_msgs_per_s_p10"] or 0)) for r in rows]
        ax.errorbar(x, y, yerr=[low, [0] * len(rows)], color=color, marker=marker, capsize=3, label=label + " (p10 whisker)")
        if system == "delay":
            for r in rows:
                ax.annotate(f"{100 * r['violations'] / r['planned']:.1f}% overtaken", (r["latency_ms"], r["per_room_msgs_per_s_p50"]),
                            textcoords="offset points", xytext=(0, 8), ha="center", fontsize=7, color=color)
        if system == "actor":
            # Issue 31's goal for baton: at least 0.97 of the actors' per-room rate at every latency.
            ax.plot(x, [0.97 * v for v in y], color=color, lw=1, ls="--", label="0.97 x (c): the goal for (d)")
        measured_limits = [r.get("per_room_limit_msgs_per_s_p50") for r in rows]
        if system in ("actor", "baton"):
            ax.scatter(x, measured_limits, color=color, marker="_", s=200, zorder=3)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xticks([50, 100, 300, 1000])
    ax.get_xaxis().set_major_formatter(matplotlib.ticker.ScalarFormatter())
    ax.get_yaxis().set_major_formatter(matplotlib.ticker.ScalarFormatter())
    ax.get_yaxis().set_minor_formatter(matplotlib.ticker.NullFormatter())
    ax.set_ylim(0.3, 60)
    ax.set_xlabel(f"ack latency median, ms (log-normal, sigma {args.ack_sigma:.1f}, {args.ack_prob:.0%} acked)")
    ax.set_ylabel("per-room messages/s (median over rooms)")
    ax.set_title(f"Per-room throughput, bursts of {args.burst} (dashes: each run's own limit)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8, loc="upper right")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
