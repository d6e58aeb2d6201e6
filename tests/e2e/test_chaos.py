"""The short chaos run (`make chaos` at 60 rooms x 5 messages, faults every
0.7 s and a Cloud Tasks outage every 4 s): nothing lost, nothing stuck, acked
messages in order on the devices, no send inside the previous message's ack
window. It brings up a stack of its own."""

from __future__ import annotations

import argparse

import pytest
from rich.console import Console

from tools.local.chaos import run


@pytest.mark.parametrize("webhook_mode", ["direct", "queued"])
def test_a_short_chaos_run_keeps_every_invariant(tmp_path, webhook_mode):
    # Both webhook modes: the queued one's `status` function is among the
    # processes killed and frozen.
    args = argparse.Namespace(rooms=60, messages=5, seed=11, fault_rate=2.0, kill_every_s=0.7,
                              tasks_outage_every_s=4.0, fault_seconds=20.0, drain_s=45.0, max_drain_s=150.0,
                              run_dir=str(tmp_path / "run"), out=str(tmp_path / "out"), webhook_mode=webhook_mode)
    verdict, report = run(args, Console(quiet=True))
    assert report["violations"] == {name: [] for name in report["violations"]}, report
    assert verdict.ok and report["drained"]
    # The faults really happened.
    kills = sum(n for kind, n in report["faults"].items() if kind.startswith("killed "))
    assert kills >= 3 and report["faults"].get("killed tasks", 0) >= 1, report["faults"]
    platform = sum(n for kind, n in report["faults"].items() if kind.startswith("platform "))
    assert platform >= 5 and report["send_unknown"] >= 1, report
    assert report["max_sends_per_message"] <= 5
