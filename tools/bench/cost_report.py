"""The cost model's levers and output (`make cost`, tools/bench/cost.py): the
changes whose saving is priced (`LEVERS`, each with where it is made),
`report` (the items at one load, the total by load, the fixed costs, the
levers and the preparation, as one dict that `--json` prints), and its text
and Markdown renderings (`--markdown` is the tables of docs/cost.md). Held
apart from the arithmetic (cost_model.py) so the figures can be checked
without their layout. Standard library only.
"""

from __future__ import annotations

from typing import Any

from tools.bench.cost_model import cost, fixed_monthly, prepare_cost
from tools.bench.cost_prices import MILLION, MONTH_S, RATES

# The levers: (key, what changes, where it is changed, cumulative). The
# cumulative ones are applied one after the other in this order; the others
# are priced alone. keep_request_logs is the default's opposite: its
# "saving" is negative, the price of turning the default exclusion off.
LEVERS: list[tuple[str, str, str, bool]] = [
    ("quiet_ignored_events", "log no event for statuses that change nothing (status_ignored: `sent`, "
     "statuses after the ack)", "code: shared/room/flight.py (not done: the late acks feed the analytics)", True),
    ("exclude_delivery_events", "keep the delivery events only in the sink's bucket (not in Logs Explorer)",
     "infra: keep_delivery_events_in_default_bucket = false", True),
    ("keep_routine_statuses", "keep the routine statuses (`sent`, statuses after the ack) in the _Default log bucket "
     "too (the default keeps them only in the sink's bucket)", "infra: keep_routine_statuses_in_default_bucket = true",
     False),
    ("keep_relogged_events", "keep the outbox's re-logged lines (`relogged`: a room's later transaction logs the "
     "lines an earlier write left, most often a second time) in the _Default log bucket too (the default keeps them "
     "only in the sink's bucket)", "infra: keep_relogged_events_in_default_bucket = true", False),
    ("keep_request_logs", "keep Cloud Run's request logs in the _Default log bucket (the default drops them)",
     "infra: keep_request_logs_in_default_bucket = true", False),
    ("fractional_cpu", "0.5 vCPU at one request per instance (Cloud Run allows concurrency only from 1 vCPU)",
     "infra: function_cpu = \"0.5\", function_threads = 1", False),
    ("concurrency_16", "16 requests per instance instead of 8", "infra: function_threads = 16", False),
    ("sender_window_off", "no per-number send window (a number's sends past its rate meet 130429 and retry)",
     "infra: whatsapp_sender_rate = 0", False),
    ("outcomes_off", "publish no delivery outcomes (producers follow the event log instead)",
     "infra: publish_outcomes = false", False),
    ("sent_proof_off", "a WhatsApp `sent` status is only logged: none of the proof's reads and writes (for a "
     "`sent` its webhook instance does not know to be settled), and more resends after an unknown send outcome",
     "infra: whatsapp_sent_proof = \"off\"", False),
]


def money(usd: float) -> str:
    return f"${usd:,.2f}"


def signed(usd: float) -> str:
    return ("+" if usd > 0.005 else "-" if usd < -0.005 else "") + money(abs(usd))


def report(inputs: dict[str, Any], source: str, deploy: dict[str, Any], rate: float, mode: str) -> dict[str, Any]:
    base = cost(inputs, deploy, rate)
    by_rate = {r: cost(inputs, deploy, r)["total"] for r in RATES}
    levers = []
    applied: frozenset[str] = frozenset()
    for key, what, where, cumulative in LEVERS:
        alone = cost(inputs, deploy, rate, frozenset({key}))["total"]
        total = None
        if cumulative:
            applied = applied | {key}
            total = cost(inputs, deploy, rate, applied)["total"]
        levers.append((key, what, where, base["total"] - alone, total))
    return {"mode": mode, "source": source, "rate": rate, "deployment": deploy, "base": base, "by_rate": by_rate,
            "fixed": fixed_monthly(deploy), "levers": levers,
            "prepare": prepare_cost(inputs, deploy, rate),
            "prepare_by_rate": {r: prepare_cost(inputs, deploy, r)["total"] for r in RATES}}


def render_text(r: dict[str, Any]) -> str:
    d = r["deployment"]
    lines = [f"baton: cost of 1,000,000 delivered messages, WEBHOOK_MODE={r['mode']}, at {r['rate']:g} msgs/s",
             f"counts: {r['source']}; deployment: {d['cpu']:g} vCPU, {d['memory_gib']:g} GiB, "
             f"{d['threads']} requests per instance (infra/variables_functions.tf)", ""]
    width = max(len(name) for name, *_ in r["base"]["items"])
    for name, qty, _unit, usd in r["base"]["items"]:
        lines.append(f"  {name:<{width}}  {qty:>10.3f} per message  {money(usd):>8}")
    lines.append(f"  {'total':<{width}}  {'':>10}              {money(r['base']['total']):>8} per million")
    lines += ["", "by sustained load (billed compute shrinks as requests share instances):"]
    lines += [f"  {rate:>6g} msgs/s ({rate * MONTH_S / MILLION:>5.1f} M/month): {money(total)} per million"
              for rate, total in r["by_rate"].items()]
    lines += ["", "fixed, per month whatever the traffic:"]
    lines += [f"  {name}: {money(usd)}" for name, usd in r["fixed"]]
    lines += ["", f"levers at {r['rate']:g} msgs/s (what each saves alone; for the first ones, the total with it "
                  "and those above it):"]
    for _, what, where, saving, total in r["levers"]:
        after = f" -> {money(total)}" if total is not None else ""
        lines.append(f"  {signed(-saving)}{after}: {what} [{where}]")
    prep = r["prepare"]
    lines += ["", f"preparation (a `prepare` attribute, e.g. a media upload), per prepared message on top of its "
                  f"delivery, at {r['rate']:g} prepared msgs/s:"]
    width = max(len(name) for name, *_ in prep["items"])
    for name, qty, _unit, usd in prep["items"]:
        lines.append(f"  {name:<{width}}  {qty:>10.3f} per message  {money(usd):>8}")
    lines.append(f"  {'total':<{width}}  {'':>10}              {money(prep['total']):>8} per million prepared")
    lines += [f"  {rate:>6g} prepared msgs/s: {money(total)} per million prepared"
              for rate, total in r["prepare_by_rate"].items()]
    return "\n".join(lines)


def render_markdown(r: dict[str, Any]) -> str:
    d = r["deployment"]
    out = [f"Counts from `{r['source']}`, WEBHOOK_MODE={r['mode']}; deployment {d['cpu']:g} vCPU, "
           f"{d['memory_gib']:g} GiB, {d['threads']} requests per instance; a sustained {r['rate']:g} msgs/s.", "",
           "| item | per message | unit | USD per million |", "|---|---:|---|---:|"]
    for name, qty, unit, usd in r["base"]["items"]:
        out.append(f"| {name} | {qty:.3f} | {unit} | {money(usd)} |")
    out += [f"| **total** | | | **{money(r['base']['total'])}** |", "",
            "| sustained load | messages a month | USD per million |", "|---:|---:|---:|"]
    out += [f"| {rate:g} msgs/s | {rate * MONTH_S / MILLION:.1f} M | {money(total)} |" for rate, total in r["by_rate"].items()]
    out += ["", "| fixed cost | USD per month |", "|---|---:|"]
    out += [f"| {name} | {money(usd)} |" for name, usd in r["fixed"]]
    out += ["", f"| lever (at {r['rate']:g} msgs/s) | where | change alone | total with it and those above |",
            "|---|---|---:|---:|"]
    for _, what, where, saving, total in r["levers"]:
        out.append(f"| {what} | {where} | {signed(-saving)} | {money(total) if total is not None else '-'} |")
    prep = r["prepare"]
    out += ["", f"Preparation, per prepared message on top of its delivery; a sustained {r['rate']:g} prepared "
                "msgs/s:", "", "| item | per prepared message | unit | USD per million prepared |", "|---|---:|---|---:|"]
    for name, qty, unit, usd in prep["items"]:
        out.append(f"| {name} | {qty:.3f} | {unit} | {money(usd)} |")
    out += [f"| **total** | | | **{money(prep['total'])}** |", "",
            "| sustained preparations | USD per million prepared |", "|---:|---:|"]
    out += [f"| {rate:g} prepared msgs/s | {money(total)} |" for rate, total in r["prepare_by_rate"].items()]
    return "\n".join(out)
