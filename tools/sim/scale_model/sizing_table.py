"""`make scale-table`: docs/scale.md's per-component table, written from the
outputs of the sizing module (infra/modules/sizing) as Terraform plans it.

One source of truth: the queue counts, instances, index shards and senders
the deployment gets, with each component's load at the target, capacity and
headroom, are what Terraform derives; this renders them and never computes
a figure itself. tests/infra/test_sizing.py fails when the page and the
module disagree.

`python -m tools.sim.scale_model.sizing_table` prints the table;
`--write docs/scale.md` replaces the part of the page between the markers.
Standard library only (runs in any virtualenv); needs `terraform` on PATH
(no provider: the module plans offline).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[3]
INFRA = ROOT / "infra"
BEGIN = "<!-- BEGIN sizing table: `make scale-table` writes it from infra/modules/sizing -->"
END = "<!-- END sizing table -->"
REQUIRED_VARS = {"project_id": "my-chat-project", "whatsapp_phone_number_id": "123456789012345"}


def senders(count: int, rate: int) -> str:
    """WHATSAPP_SENDERS of `count` numbers at `rate` msg/s each."""
    return ",".join(f"{1000001 + i}:{rate}" for i in range(count))


# The configurations the page shows: the defaults (one number), and the
# 1,000 / 10,000 / 30,000 msg/s of docs/scale.md with the numbers (at most
# 70% busy), shards
# and threads each needs. tests/infra/test_sizing.py plans the same ones.
CASES: dict[str, dict[str, Any]] = {
    "default": {},
    "1,000 msg/s": {"target_peak_messages_per_s": 1000, "whatsapp_senders": senders(2, 950)},
    "10,000 msg/s": {"target_peak_messages_per_s": 10000, "whatsapp_senders": senders(16, 950)},
    "30,000 msg/s": {"target_peak_messages_per_s": 30000, "whatsapp_senders": senders(48, 950),
                     "index_shards": 256, "function_threads": 32},
}
CASE_NOTES = {
    "default": "one number at 75 msg/s; the target unset",
    "1,000 msg/s": "2 numbers at 950 msg/s (the example tfvars)",
    "10,000 msg/s": "16 numbers at 950 msg/s",
    "30,000 msg/s": "48 numbers at 950 msg/s, `index_shards` 256, `function_threads` 32",
}
# The documented limit behind each kind of component, with its source.
LIMITS = {
    "function": "requests in flight: `max_instances` x `function_threads`; `max_instances` up to 1,000 "
                "([Cloud Run](https://cloud.google.com/run/docs/configuring/max-instances))",
    "queues": "500 dispatches/s per queue, 1,000 queues per region ([Cloud Tasks](https://cloud.google.com/tasks/docs/quotas)); past 500 created or dispatched/s a queue needs a ramp ([scaling](https://cloud.google.com/tasks/docs/manage-cloud-task-scaling))",
    "index": "500 writes/s per sequential index range "
             "([shard timestamps](https://cloud.google.com/firestore/docs/solutions/shard-timestamp))",
    "whatsapp": "the numbers' rates less the send window's guard (x 1/1.05), sized at most 70% busy; 80 msg/s per "
                "number, 1,000 after "
                "Meta's upgrade ([throughput](https://developers.facebook.com/documentation/business-messaging/whatsapp/throughput))",
    "meta": "300 Send API calls/s per Page or account for text ([rate limiting]"
            "(https://developers.facebook.com/documentation/business-messaging/messenger-platform/overview/rate-limiting))",
}


def limit_of(component: str) -> str:
    if component.startswith("function "):
        return LIMITS["function"]
    if component.endswith("queues"):
        return LIMITS["queues"]
    if component.startswith("index"):
        return LIMITS["index"]
    return LIMITS["whatsapp"] if component.startswith("whatsapp") else LIMITS["meta"]


def plan_outputs(variables: dict[str, Any], terraform: str = "terraform") -> dict[str, Any]:
    """The root's `sizing` output for `variables`, planned by Terraform on a
    copy of infra/'s provider-free slice (variables*.tf, scale.tf, modules/).

    Raises: RuntimeError with Terraform's output when init or plan fails
    (a refused configuration included); FileNotFoundError without terraform."""
    binary = shutil.which(terraform)
    if binary is None:
        raise FileNotFoundError(f"{terraform} is not installed")
    env = {**os.environ, "CHECKPOINT_DISABLE": "1", "TF_IN_AUTOMATION": "1", "TF_INPUT": "0"}
    with tempfile.TemporaryDirectory(prefix="baton-sizing-") as tmp:
        work = Path(tmp)
        for path in [*INFRA.glob("variables*.tf"), INFRA / "scale.tf"]:
            shutil.copy(path, work / path.name)
        shutil.copytree(INFRA / "modules", work / "modules", ignore=shutil.ignore_patterns(".terraform*"))
        (work / "case.auto.tfvars.json").write_text(json.dumps({**REQUIRED_VARS, **variables}))
        for args in (["init", "-backend=false", "-input=false", "-no-color"],
                     ["plan", "-input=false", "-no-color", "-lock=false", "-out=case.tfplan"]):
            done = subprocess.run([binary, f"-chdir={work}", *args], capture_output=True, text=True, env=env,
                                  check=False)
            if done.returncode != 0:
                raise RuntimeError(f"terraform {args[0]} failed:\n{done.stdout}\n{done.stderr}")
        shown = subprocess.run([binary, f"-chdir={work}", "show", "-json", "case.tfplan"], capture_output=True,
                               text=True, env=env, check=True)
    return json.loads(shown.stdout)["planned_values"]["outputs"]["sizing"]["value"]


def _number(x: float) -> str:
    return f"{x:,.0f}" if abs(x) >= 10 else f"{x:,.1f}"


def render(sized: dict[str, dict[str, Any]]) -> str:
    """The Markdown between the markers, from each case's `sizing` output
    (case name -> output), in CASES order."""
    names = [n for n in CASES if n in sized]
    head = [f"{n} ({_number(sized[n]['target_peak_messages_per_s'])} msg/s)" if n == "default" else n for n in names]
    lines = [
        BEGIN,
        "",
        "Each cell: the load at the target, of the capacity configured (headroom = capacity / load). "
        "Configurations: " + "; ".join(f"{n}: {CASE_NOTES[n]}" for n in names) + ".",
        "",
        "| component | per message | documented limit | " + " | ".join(head) + " |",
        "| --- | --- | --- | " + " | ".join("---" for _ in names) + " |",
    ]
    components: list[str] = []
    for n in names:
        components += [c for c in sized[n]["components"] if c not in components]
    for c in components:
        unit = next(sized[n]["components"][c]["unit"] for n in names if c in sized[n]["components"])
        per = {f"{sized[n]['components'][c]['per_message']:.2f}" for n in names if c in sized[n]["components"]}
        cells = []
        for n in names:
            comp = sized[n]["components"].get(c)
            cells.append("-" if comp is None else f"{_number(comp['at_target'])} of {_number(comp['capacity'])} "
                                                  f"({sized[n]['headroom'][c]:.2f}x)")
        lines.append(f"| {c} ({unit}) | {' / '.join(sorted(per))} | {limit_of(c)} | " + " | ".join(cells) + " |")
    lines.append("| timer / prepare queues | | | " + " | ".join(
        f"{sized[n]['tasks_queue_count']} / {sized[n]['prepare_queue_count']}" for n in names) + " |")
    lines.append("| `max_instances` enqueue / webhook / timeout / prepare | | | " + " | ".join(
        " / ".join(str(sized[n]["max_instances"][f]) for f in ("enqueue", "webhook", "timeout", "prepare"))
        for n in names) + " |")
    lines.append("| **first limit reached at** (msg/s) | | | " + " | ".join(
        f"**{_number(sized[n]['max_messages_per_s'])}** ({sized[n]['max_messages_per_s'] / sized[n]['target_peak_messages_per_s']:.2f}x)"
        for n in names) + " |")
    lines.append("| **highest target these threads, shards and senders can be sized for** (msg/s) | | | " + " | ".join(
        f"**{_number(sized[n]['sizable_up_to_messages_per_s'])}** "
        f"({sized[n]['sizable_up_to_messages_per_s'] / sized[n]['target_peak_messages_per_s']:.2f}x)"
        for n in names) + " |")
    lines += ["", END]
    return "\n".join(lines)


def replace_block(page: str, block: str) -> str:
    """`page` with the text between BEGIN and END (inclusive) replaced.

    Raises: ValueError when the markers are missing."""
    start, end = page.find(BEGIN), page.find(END)
    if start < 0 or end < start:
        raise ValueError("the page has no sizing-table markers")
    return page[:start] + block + page[end + len(END):]


def current_block(page: str) -> str:
    start, end = page.find(BEGIN), page.find(END)
    return page[start:end + len(END)] if 0 <= start < end else ""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--write", type=Path, help="replace the table in this page (docs/scale.md)")
    parser.add_argument("--terraform", default=os.environ.get("BATON_TERRAFORM", "terraform"))
    args = parser.parse_args(argv)
    try:
        block = render({name: plan_outputs(variables, args.terraform) for name, variables in CASES.items()})
    except (RuntimeError, FileNotFoundError) as err:
        print(f"scale-table: {err}", file=sys.stderr)
        return 1
    if args.write:
        args.write.write_text(replace_block(args.write.read_text(), block))
        print(f"wrote the sizing table of {args.write}")
    else:
        print(block)
    return 0


if __name__ == "__main__":
    sys.exit(main())
