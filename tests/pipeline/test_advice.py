"""Timeout advice: order-statistic confidence intervals and the recommended X (expected values by hand)."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest

from pipeline.advice import ack_latency_quantiles, candidate_timeouts, quantile_ci_ranks, recommend_timeout

T = datetime(2026, 11, 22, 10, 0)


def test_median_ci_ranks_match_the_textbook():
    # n = 100, median, 95 %: X(40) .. X(61) (Conover, Practical Nonparametric Statistics)
    assert quantile_ci_ranks(100, 0.5, 0.95) == (40, 61)


def test_high_quantile_of_few_samples_has_no_upper_bound():
    # Bin(100, 0.99): P(B <= 96) = 0.018 <= 0.025 < P(B <= 97) = 0.079, and P(B <= 99) = 0.63 < 0.975
    assert quantile_ci_ranks(100, 0.99, 0.95) == (97, None)


def test_normal_approximation_for_large_n():
    # n = 1e6, q = 0.5: sd = 500, z = 1.96 -> 500000 -/+ 980 (and +1 on the upper rank)
    assert quantile_ci_ranks(1_000_000, 0.5, 0.95) == (499_020, 500_981)


@pytest.mark.parametrize("args", [(0, 0.5, 0.95), (10, 1.0, 0.95), (10, 0.5, 0.0)])
def test_ci_ranks_reject_bad_arguments(args):
    with pytest.raises(ValueError):
        quantile_ci_ranks(*args)


def _messages(spark):
    """190 acked (10, 20, ... 1900 ms; the first 95 on WhatsApp, the rest on
    Messenger), 10 timed out after 3 s whose acks came late (3100 .. 4000 ms),
    20 timed out with no ack ever (no provider logged): 200 arriving acks."""
    rows = []
    for i in range(1, 191):
        rows.append((f"r{i % 7}", i, "whatsapp" if i <= 95 else "messenger", "acked", 10.0 * i, T, T))
    for j in range(10):
        rows.append(("late", j, None, "timed_out", 3100.0 + 100 * j, T, T + timedelta(seconds=3)))
    for k in range(20):
        rows.append(("silent", k, None, "timed_out", None, T, T + timedelta(seconds=3)))
    return spark.createDataFrame(
        rows,
        "room_id string, seq long, provider string, outcome string, ack_latency_ms double, "
        "last_sent_at timestamp, ended_at timestamp",
    )


def test_recommend_timeout_by_hand(spark):
    a = recommend_timeout(_messages(spark), target_share=0.99, confidence=0.95)
    assert (a.arriving_acks, a.no_ack) == (200, 20)
    # the 99th percentile of 200 latencies is the 198th smallest: the 8th late ack, 3800 ms
    assert a.recommended_ms == 3800.0
    # Bin(200, 0.99): P(B <= 194) = 0.016 <= 0.025 < P(B <= 195) = 0.052 -> rank 195 = 3500 ms;
    # P(B <= 199) = 0.866 < 0.975 -> no upper bound from 200 acks
    assert (a.ci_low_ms, a.ci_high_ms) == (3500.0, None)
    assert a.observed_timeout_ms == 3000.0
    assert a.share_late_observed == pytest.approx(10 / 200)


def test_recommend_timeout_median(spark):
    a = recommend_timeout(_messages(spark), target_share=0.5, confidence=0.95)
    # n = 200, median: 100th smallest = 1000 ms; 95 % ranks 86 .. 115 -> 860 .. 1150 ms
    assert a.recommended_ms == 1000.0
    assert (a.ci_low_ms, a.ci_high_ms) == (860.0, 1150.0)


def test_cdf_quantiles_come_with_the_advice_overall_and_per_provider(spark):
    a = recommend_timeout(_messages(spark), target_share=0.99, confidence=0.95, cdf_probs=[0.5, 0.1])
    # the advice's own figures are those asked for without the CDF
    assert (a.recommended_ms, a.ci_low_ms, a.share_late_observed) == (3800.0, 3500.0, pytest.approx(10 / 200))
    assert a.latencies.probs == (0.5, 0.1)
    # all 200: the 100th and 20th smallest
    assert a.latencies.overall == (1000.0, 200.0)
    # WhatsApp 10 .. 950 ms and Messenger 960 .. 1900 ms (95 each): the 48th and 10th smallest;
    # the late acks (no provider) 3100 .. 4000 ms: the 5th and 1st; the silent ones have no latency
    assert a.latencies.by_provider == {
        "whatsapp": (480.0, 100.0),
        "messenger": (1430.0, 1050.0),
        "unknown": (3500.0, 3100.0),
    }
    assert "latencies" not in a.as_dict() and a.as_dict()["recommended_ms"] == 3800.0


def test_ack_latency_quantiles_without_advice(spark):
    q = ack_latency_quantiles(_messages(spark), [0.5])
    assert q.overall == (1000.0,) and q.by_provider["messenger"] == (1430.0,)


def test_no_ack_no_advice(spark):
    df = spark.createDataFrame(
        [("r", 1, "timed_out", None, T, T + timedelta(seconds=3))],
        "room_id string, seq long, outcome string, ack_latency_ms double, last_sent_at timestamp, ended_at timestamp",
    )
    a = recommend_timeout(df, cdf_probs=[0.5])
    assert (a.arriving_acks, a.no_ack, a.recommended_ms, a.observed_timeout_ms) == (0, 1, None, 3000.0)
    assert a.latencies.overall == (None,)
    with pytest.raises(ValueError):
        recommend_timeout(df, target_share=1.5)


def test_candidates_include_the_advice(spark):
    a = recommend_timeout(_messages(spark))
    xs = candidate_timeouts(a)
    assert {3800.0, 3500.0, 3000.0, 250.0, 120000.0} <= set(xs) and xs == sorted(xs)
