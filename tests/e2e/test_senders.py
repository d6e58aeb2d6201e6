"""Several WhatsApp numbers on the emulators (issue 33): `make demo-senders`
at a size for the suite, on a stack of its own. 30 rooms x 2 messages are
published at once over 3 numbers at 3 messages/s each, so every number is
held back by its window in the first second. The fake platform posts a
`delivered` or `failed` status for every message, well inside the 3 s ack
timeout, and refuses (130429) a number's sends past 3 in any second of its
own clock, where the request arrives: 0 refusals means baton's window held
the rate as the platform counts it (before the window's guard, this test saw
2 refusals in 60 sends)"""

from __future__ import annotations

from tools.local import demo_senders


def test_each_room_goes_from_its_number_within_the_rate_and_every_ack_counts(tmp_path):
    run = demo_senders.run(30, 2, 3, 3, tmp_path / "out", tmp_path / "run", fake_config={"ack_prob": 1.0, "ack_sigma": 0.3})

    assert run.summary.lost == [] and run.summary.ended_twice == [] and run.summary.acked_out_of_order == []
    assert run.refusals == 0, "a send passed its number's rate at the platform"
    assert run.verdict.over_rate(run.rates) == {}
    assert run.verdict.rooms_on_several_numbers == [] and run.verdict.rooms_off_their_hash == []
    assert set(run.verdict.sends) == set(run.numbers), "every number sent"
    # 10 rooms a number at 3/s: the window made some wait instead of calling.
    assert run.paced > 0
    # 20 sends a number at 3 a second take at least 6 s.
    assert run.wall_s >= 6.0
    # Each status came from the number its message went out from, so each
    # ended it (a status matched to the wrong number would leave it to time out).
    assert run.summary.timed_out == 0
    assert run.summary.acked + run.summary.failed == run.summary.published == 60
