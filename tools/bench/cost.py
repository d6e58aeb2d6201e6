"""`make cost`: what one million delivered messages cost on Google Cloud, and
what each lever would save. The one cost model of the project (docs/cost.md
is its output; README and docs/deploy.md quote its total).

    cost per message = sum over items of (count per message x list price)

Counts come from `make bench-core` (the local stack, per ended message):
out/bench/core-MODE.json (or core.json), with the same run's event log
(out/bench/core-events-MODE.jsonl) and invocation records
(run/bench-MODE/invocations.jsonl) when present; otherwise from the committed
snapshot docs/cost-inputs.json (`--snapshot` writes it from those files).
Compute time is not measured here (the emulators are not the cloud): each
invocation's duration is built from its measured operation counts and the
per-operation latencies in ASSUMED, and billed as Cloud Run bills request-
based instances (LOAD). The deployment's size and concurrency are read
from infra/variables*.tf (variables_functions.tf, variables_analytics.tf).

The model is four modules beside this one, each a concern, composed by
imports: cost_prices.py (list prices with their sources, ASSUMED, LOAD,
the loads priced), cost_inputs.py (`deployment`, `derive`, `load_inputs`,
`snapshot`: the only part that reads files), cost_model.py (the billed
compute time, the items `cost` prices and what the levers change in them,
`prepare_cost`, `fixed_monthly`) and cost_report.py (`LEVERS`, `report` and
its text and Markdown renderings). This module is the command line, and
re-exports their names so `from tools.bench import cost` reaches them all.

Usage: python -m tools.bench.cost [--mode direct|queued] [--rate MSGS_PER_S]
       [--inputs FILE] [--json] [--markdown] [--snapshot FILE]
Standard library only.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from tools.bench.cost_inputs import (
    BENCH,
    ROOT,
    ROUTINE_STATUS_REASONS,
    RUNS,
    SNAPSHOT,
    TERMINAL,
    VARIABLE_FILES,
    deployment,
    derive,
    load_inputs,
    snapshot,
    split_lines,
)
from tools.bench.cost_model import (
    FIXED_FUNCTIONS,
    PREPARE_EVENTS,
    PREPARE_OPS,
    PREPARE_TASK_OPERATIONS,
    billed_seconds_per_second,
    cost,
    fixed_monthly,
    invocation_seconds,
    prepare_cost,
)
from tools.bench.cost_prices import ASSUMED, LOAD, MILLION, MONTH_S, PRICES, RATES, REFERENCE_RATE, Price
from tools.bench.cost_report import LEVERS, money, render_markdown, render_text, report, signed

__all__ = [
    "ASSUMED", "BENCH", "FIXED_FUNCTIONS", "LEVERS", "LOAD", "MILLION", "MONTH_S", "PREPARE_EVENTS", "PREPARE_OPS",
    "PREPARE_TASK_OPERATIONS", "PRICES", "RATES", "REFERENCE_RATE", "ROOT", "ROUTINE_STATUS_REASONS", "RUNS",
    "SNAPSHOT", "TERMINAL", "VARIABLE_FILES", "Price", "billed_seconds_per_second", "cost", "deployment", "derive",
    "fixed_monthly", "invocation_seconds", "load_inputs", "main", "money", "prepare_cost", "render_markdown",
    "render_text", "report", "signed", "snapshot", "split_lines",
]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mode", choices=("direct", "queued"), help="WEBHOOK_MODE (default: infra/variables_webhook.tf)")
    parser.add_argument("--rate", type=float, default=REFERENCE_RATE, help="sustained msgs/s (default %(default)s)")
    parser.add_argument("--inputs", type=Path, help="a cost-inputs.json to read instead of out/bench")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    parser.add_argument("--markdown", action="store_true", help="print the tables of docs/cost.md")
    parser.add_argument("--snapshot", type=Path, help="write the inputs of the last bench-core run here")
    args = parser.parse_args(argv)
    if args.snapshot:
        snapshot(args.snapshot)
        return
    deploy = deployment()
    mode = args.mode or deploy["webhook_mode"]
    inputs, source = load_inputs(mode, args.inputs)
    r = report(inputs, source, deploy, args.rate, mode)
    if args.json:
        print(json.dumps(r, indent=2, default=str))
    elif args.markdown:
        print(render_markdown(r))
    else:
        print(render_text(r))


if __name__ == "__main__":
    main(sys.argv[1:])
