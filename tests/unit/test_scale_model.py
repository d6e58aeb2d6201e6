"""The scale model's index accounting (tools/scale_model/meter.py): which
index range a room write lands in, read from infra/firestore.tf."""

from __future__ import annotations

from pathlib import Path

from tools.scale_model.meter import IndexLayout, Meter, peak_and_p99

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
    from tools.scale_model.__main__ import ROOT, main

    small = ["--sample", "0.004", "--duration-s", "40", "--burst-s", "20", "--tasks-queues", "100"]
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
