"""The scale model's index accounting (tools/sim/scale_model/meter.py): which
index range a room write lands in, read from infra/firestore.tf."""

from __future__ import annotations

import json
import re
from pathlib import Path

from tools.sim.scale_model.meter import IndexLayout, Meter, peak_and_p99

ROOT = Path(__file__).resolve().parents[3]
NOW = 1_795_000_000_000_000
TF = '''
resource "google_firestore_field" "room_unindexed" {
  for_each = toset(["pending", "head_since_us", "shard"])
  index_config {}
}
resource "google_firestore_index" "room_sharded" {
  for_each    = toset(["head_since_us"])
}
'''


def layout(tmp_path: Path, text: str = TF) -> IndexLayout:
    path = tmp_path / "firestore.tf"
    path.write_text(text)
    return IndexLayout.from_terraform(path)


def test_a_time_in_an_unsharded_single_field_index_is_one_sequential_range(tmp_path):
    ranges = layout(tmp_path).ranges(None, {"wake_at_us": NOW + 3_000_000, "shard": 5}, NOW)
    assert ("wake_at_us", True) in ranges


def test_a_sharded_time_lands_in_its_shards_range_and_an_exempt_field_nowhere(tmp_path):
    ranges = layout(tmp_path).ranges(None, {"head_since_us": NOW, "pending": [NOW], "shard": 5}, NOW)
    assert ranges == [("head_since_us@shard5", True)]


def test_an_unchanged_value_writes_no_index_entry_and_a_count_is_spread(tmp_path):
    lay = layout(tmp_path)
    old = {"wake_at_us": NOW, "parked": 0}
    assert lay.ranges(old, {"wake_at_us": NOW, "parked": 1}, NOW) == [("parked@spread", False)]


def test_without_the_sharded_indexes_the_layout_of_before_the_fix_is_unsharded(tmp_path):
    before = layout(tmp_path, 'resource "google_firestore_field" "room_unindexed" {\n  for_each = toset(["pending"])\n}\n')
    assert before.sharded == frozenset() and ("head_since_us", True) in before.ranges(None, {"head_since_us": NOW}, NOW)


def test_rates_are_per_window_and_scaled_per_key():
    meter = Meter()
    for second in range(10):
        meter.count("c", "a", 5, NOW + second * 1_000_000)
    meter.count("c", "b", 10, NOW)
    assert sorted(meter.rates("c", 10, 2.0)) == [2.0, 10.0]  # a: 50 in 10 s x 2; b: 10 in 10 s x 2
    assert sorted(meter.rates("c", 10, 2.0, {"b": 5.0})) == [5.0, 10.0]
    assert peak_and_p99([1.0, 3.0, 2.0]) == (3.0, 3.0)


def test_the_model_passes_on_this_layout_and_fails_on_the_unsharded_one(tmp_path, capsys):
    """The model itself, small (100 rooms for 40 s of virtual time; seeded, so
    the same every run): today's infra/firestore.tf passes; the layout of
    before the shards (wake_at_us with its single-field index, one shard)
    fails on the sequential index range."""
    from tools.sim.scale_model.__main__ import ROOT, main

    # Numbers to spare: a sample this small gives each number a few slots of
    # its send window, where waits are not the deployment's (sampled_senders).
    senders = ",".join(f"{1000001 + i}:950" for i in range(40))
    small = ["--sample", "0.004", "--duration-s", "40", "--burst-s", "20", "--tasks-queues", "100",
             "--senders", senders]
    assert main(small) == 0
    assert "verdict: PASS" in capsys.readouterr().out
    before = tmp_path / "firestore.tf"
    text = (ROOT / "infra" / "firestore.tf").read_text()
    before.write_text(text.replace('resource "google_firestore_index" "room_sharded"', 'resource "x" "unused"')
                      .replace('"gap_due_us", "write_id", "shard", "wake_at_us", "head_since_us", "paused_at_us",',
                               '"gap_due_us", "write_id", "shard",'))
    assert main([*small, "--index-shards", "1", "--firestore-tf", str(before)]) == 1
    out = capsys.readouterr().out
    assert "index writes per sequential range (10 s) [wake_at_us]" in out and "OVER" in out


def bench_core_mean_rate(counts: dict) -> float:
    """bench-core's mean rate over its three phases: their messages over
    their durations (tools/bench/core.py: the capacity burst of 3 per room,
    40 s at half capacity, 30 s at the light rate, each in bursts of 3 per
    room), the steady rate that carries as many messages in as long. (A mean
    weighted by messages leaned on the capacity run: with it at 40.8 msgs/s,
    35.2 against this 27.0, and the model's lease renewals grow with the rate.)"""
    phases = [(counts["rooms"] * 3, counts["capacity_msgs_per_s"]),
              (int(counts["half_rate_target_per_s"] * 40 / 3) * 3, counts["half_rate_achieved_per_s"]),
              (int(counts["light_rate_per_s"] * 30 / 3) * 3, counts["light_rate_per_s"])]
    return sum(n for n, _ in phases) / sum(n / rate for n, rate in phases)


def test_the_models_firestore_operations_per_message_agree_with_bench_core(capsys):
    """`make scale-model` runs the real send window (shared/sender_window.py
    over an in-memory client, one per sending function as bench-core's
    stack has one process each) and the sent proof
    (shared/service/webhook.py), and counts their reads and writes with the
    room store's. Given bench-core's load (its rooms, bursts of 3 messages
    per room, its mean rate, one number at 75 msg/s, the fake platform's
    webhooks at its 100 ms median), its per-message counts agree with
    `make bench-core`'s (the snapshot docs/cost-inputs.json keeps) within
    10%: Firestore writes, the send window's writes, the rooms' reads (all
    reads but the window's and the proof's) and the task creates but the
    window's waits. What is left out: the model runs one request at a time
    in virtual time, so it has none of the reads and waits that come from
    requests overlapping in wall time (bench-core's window reads a document
    another process is writing; a `sent` status arrives while its send call
    is still open, and the proof reads): it counts fewer of those, never
    more. The window's writes depend on how many slots each instance holds:
    one window for all functions, or every message sent by enqueue, doubles
    them."""
    from tools.sim.scale_model.__main__ import main

    bench = json.loads((ROOT / "docs" / "cost-inputs.json").read_text())["modes"]["direct"]["counts"]
    rate = bench_core_mean_rate(bench)
    assert main(["--rooms", str(bench["rooms"]), "--sample", "1", "--burst", "0", "--background", f"{rate:.2f}",
                 "--duration-s", "120", "--room-burst", "3", "--ack-median-ms", "100",
                 "--senders", "1000001:75", "--tasks-queues", "10"]) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("per message"))
    match = re.search(r"([\d.]+) Firestore writes \(([\d.]+) of the send window\), ([\d.]+) reads \(([\d.]+) of the "
                      r"send window\).* ([\d.]+) task creates", line)
    assert match, line
    writes, window_writes, reads, window_reads, tasks = map(float, match.groups())
    model = {"firestore writes": writes, "window writes": window_writes,
             "rooms' reads": reads - window_reads,  # the model's proof reads none: see above
             "task creates": tasks}
    measured = {"firestore writes": bench["firestore_writes_per_message"],
                "window writes": bench["window_writes_per_message"],
                "rooms' reads": bench["firestore_reads_per_message"] - bench["window_reads_per_message"]
                - bench["proof_reads_per_message"],
                "task creates": bench["tasks_created_per_message"] - bench["window_waits_per_message"]}
    for name, value in model.items():
        assert abs(value - measured[name]) <= 0.10 * measured[name], (
            f"{name}: model {value:.3f}, bench-core {measured[name]:.3f}")
    # The overlapping requests' window reads: fewer in the model, and few in both.
    assert window_reads <= bench["window_reads_per_message"] + 0.01 and bench["window_reads_per_message"] < 0.3


def test_a_sampled_number_keeps_its_share_of_the_window():
    from tools.sim.scale_model.__main__ import sampled_senders

    assert sampled_senders("1000001:950,1000002", 0.04) == "1000001:38,1000002:3"
    assert sampled_senders("1000001:10", 0.01) == "1000001:1"
