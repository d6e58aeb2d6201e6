"""Timeout advice: which ack timeout X lets a target share of arriving acks in.

The recommended X is the `target_share` quantile of the latencies of acks that
did arrive (in time: `acked`, or after the timeout: a late ack). Its
confidence interval is the distribution-free one from order statistics: the
true quantile q lies between the l-th and u-th smallest of n latencies with
probability P(l <= B < u), B ~ Binomial(n, q). No bootstrap is needed, and the
interval makes no assumption about the latency distribution.

`quantile_ci_ranks` is plain Python; `recommend_timeout` and
`ack_latency_quantiles` run Spark actions on `message_lifecycle` rows.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field, fields
from statistics import NormalDist

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from pipeline.transforms import WAIT_OUTCOMES, ack_waits, observed_timeout_ms, provider_key

#: percentile_approx accuracy: rank error at most n / ACCURACY, exact below that n.
ACCURACY = 1_000_000
#: Above this many acks the binomial is replaced by its normal approximation.
EXACT_BINOMIAL_MAX_N = 20_000


def _binom_cdf_table(n: int, q: float) -> list[float]:
    """P(B <= k) for k = 0..n, B ~ Binomial(n, q), in log space (no overflow)."""
    lq, l1q = math.log(q), math.log1p(-q)
    logs = [
        math.lgamma(n + 1) - math.lgamma(k + 1) - math.lgamma(n - k + 1) + k * lq + (n - k) * l1q for k in range(n + 1)
    ]
    top = max(logs)
    probs = [math.exp(v - top) for v in logs]
    total = sum(probs)
    out, acc = [], 0.0
    for p in probs:
        acc += p / total
        out.append(acc)
    return out


def quantile_ci_ranks(n: int, q: float, confidence: float = 0.95) -> tuple[int | None, int | None]:
    """1-based ranks (l, u) of the order statistics bounding the q-quantile of
    n samples with at least `confidence` coverage: P(X_(l) <= quantile <= X_(u)).

    Exact binomial for n <= EXACT_BINOMIAL_MAX_N, normal approximation above.
    A bound that would need a rank outside 1..n is None (too few samples to
    bound the quantile on that side: e.g. the 99th percentile of 100 latencies
    has no upper bound). Raises ValueError unless n >= 1, 0 < q < 1 and
    0 < confidence < 1.
    """
    if n < 1:
        raise ValueError(f"need at least one sample, got n={n}")
    if not 0.0 < q < 1.0 or not 0.0 < confidence < 1.0:
        raise ValueError(f"q and confidence must be in (0, 1), got q={q}, confidence={confidence}")
    alpha = (1.0 - confidence) / 2.0
    if n <= EXACT_BINOMIAL_MAX_N:
        cdf = _binom_cdf_table(n, q)
        # lower: the largest l with P(B <= l-1) <= alpha
        lower = None
        for l_rank in range(n, 0, -1):
            if cdf[l_rank - 1] <= alpha:
                lower = l_rank
                break
        # upper: the smallest u with P(B <= u-1) >= 1 - alpha
        upper = None
        for u_rank in range(1, n + 1):
            if cdf[u_rank - 1] >= 1.0 - alpha:
                upper = u_rank
                break
        return lower, upper
    z = NormalDist().inv_cdf(1.0 - alpha)
    sd = math.sqrt(n * q * (1.0 - q))
    lo = math.floor(n * q - z * sd)
    hi = math.ceil(n * q + z * sd) + 1
    return (lo if lo >= 1 else None), (hi if hi <= n else None)


@dataclass(frozen=True)
class AckLatencyQuantiles:
    """Quantiles (ms) of arriving-ack latency (acked in time, or acked late)
    at each of `probs` (0..1, in the order given): `overall`, and
    `by_provider` (provider -> quantiles; `unknown` where no event of the
    message logged one). None where no ack arrived. Rank error at most
    n / ACCURACY for n acks (exact below ACCURACY)."""

    probs: tuple[float, ...]
    overall: tuple[float | None, ...]
    by_provider: dict[str, tuple[float | None, ...]]

    def tail(self, skip: int) -> AckLatencyQuantiles:
        """The same quantiles without the first `skip` probabilities."""
        return AckLatencyQuantiles(
            self.probs[skip:], self.overall[skip:], {k: v[skip:] for k, v in self.by_provider.items()}
        )


@dataclass(frozen=True)
class TimeoutAdvice:
    """The recommended ack timeout and what it rests on. All `*_ms` in ms.

    - `arriving_acks`: acks that came (acked + late acks); `no_ack`: timed-out
      messages whose ack never came.
    - `recommended_ms`: the `target_share` quantile of arriving-ack latency;
      `ci_low_ms`/`ci_high_ms` its `confidence` interval (None when the log
      has too few acks to bound that side).
    - `observed_timeout_ms`: median time from last send to `timed_out` in the
      log, i.e. the X in force (plus dispatch delay); `share_late_observed`:
      share of arriving acks slower than it.
    - `latencies`: the quantiles asked for with `recommend_timeout(cdf_probs=...)`
      (`AckLatencyQuantiles`); not part of `as_dict`.
    """

    target_share: float
    confidence: float
    arriving_acks: int
    no_ack: int
    recommended_ms: float | None
    ci_low_ms: float | None
    ci_high_ms: float | None
    observed_timeout_ms: float | None
    share_late_observed: float | None
    latencies: AckLatencyQuantiles | None = field(default=None, repr=False, compare=False)

    def as_dict(self) -> dict:
        """The advice's figures (every field but `latencies`), for summary.json."""
        return {f.name: getattr(self, f.name) for f in fields(self) if f.name != "latencies"}


def _latency_rollup(
    messages: DataFrame, probs: Sequence[float], slower_than_ms: float | None = None
) -> tuple[AckLatencyQuantiles, int | None]:
    """One Spark action over the acked and timed-out messages, grouped by a
    rollup of the provider (each provider, then all of them): the arriving-ack
    latency quantiles at `probs`, and with `slower_than_ms` how many arriving
    acks were slower than it in all (else None)."""
    lat = F.col("ack_latency_ms")
    waits = ack_waits(messages.withColumn("_p", provider_key()), extra=("_p",))
    aggs = [F.grouping("_p").alias("_all")]
    if probs:
        aggs.append(F.percentile_approx(lat, [float(p) for p in probs], ACCURACY).alias("q"))
    if slower_than_ms is not None:
        aggs.append(F.count(F.when(lat > F.lit(float(slower_than_ms)), 1)).alias("slower"))
    nones = (None,) * len(probs)
    overall: tuple[float | None, ...] = nones
    by_provider: dict[str, tuple[float | None, ...]] = {}
    slower = None if slower_than_ms is None else 0
    for r in waits.rollup("_p").agg(*aggs).collect():
        q = tuple(r["q"]) if probs and r["q"] is not None else nones
        if r["_all"]:
            overall = q
            if slower_than_ms is not None:
                slower = int(r["slower"])
        else:
            by_provider[r["_p"]] = q
    return AckLatencyQuantiles(tuple(float(p) for p in probs), overall, by_provider), slower


def ack_latency_quantiles(messages: DataFrame, probs: Sequence[float]) -> AckLatencyQuantiles:
    """Quantiles (ms) of arriving-ack latency at each of `probs` (each 0..1),
    overall and per provider (`AckLatencyQuantiles`). Input:
    `message_lifecycle` rows. One Spark action."""
    return _latency_rollup(messages, probs)[0]


def recommend_timeout(
    messages: DataFrame, target_share: float = 0.99, confidence: float = 0.95, cdf_probs: Sequence[float] = ()
) -> TimeoutAdvice:
    """Recommend the ack timeout X letting `target_share` of arriving acks in.

    Input: `message_lifecycle` rows. `cdf_probs`: more latency quantiles
    (each 0..1) to compute in the same pass, overall and per provider, given
    back in the advice's `latencies` (the report's CDF asks for 201). Runs two
    Spark actions: the counts with the median observed timeout, then every
    quantile with the count of acks slower than that timeout. Raises
    ValueError unless 0 < target_share < 1 and 0 < confidence < 1. With no
    arriving ack, the recommendation, its interval and every quantile are None.
    """
    if not 0.0 < target_share < 1.0 or not 0.0 < confidence < 1.0:
        raise ValueError(f"target_share and confidence must be in (0, 1), got {target_share}, {confidence}")
    lat = F.col("ack_latency_ms")
    waits = F.col("outcome").isin(*WAIT_OUTCOMES)
    counts = messages.agg(
        F.count(F.when(waits & lat.isNotNull(), 1)).alias("n"),
        F.count(F.when(waits & lat.isNull(), 1)).alias("none"),
        F.percentile_approx(observed_timeout_ms(), 0.5, 10000).alias("x"),
    ).first()
    n, none, obs = int(counts["n"]), int(counts["none"]), counts["x"]
    if n == 0:
        latencies = AckLatencyQuantiles(tuple(float(p) for p in cdf_probs), (None,) * len(cdf_probs), {})
        return TimeoutAdvice(target_share, confidence, 0, none, None, None, None, obs, None, latencies)
    lo, hi = quantile_ci_ranks(n, target_share, confidence)
    rank = max(1, math.ceil(target_share * n - 1e-9))  # the q-quantile is the ceil(q n)-th smallest
    # ask for rank r as (r - 0.5) / n: Spark takes ceil(p n), and r / n can land a hair above r
    own = [(r - 0.5) / n for r in (rank, lo, hi) if r is not None]
    quantiles, slower = _latency_rollup(messages, [*own, *cdf_probs], obs)
    rec, *rest_values = quantiles.overall[: len(own)]
    rest = iter(rest_values)
    ci_low = next(rest) if lo is not None else None
    ci_high = next(rest) if hi is not None else None
    share_late = slower / n if obs is not None and slower is not None else None
    return TimeoutAdvice(
        target_share, confidence, n, none, rec, ci_low, ci_high, obs, share_late, quantiles.tail(len(own))
    )


def candidate_timeouts(advice: TimeoutAdvice, extra_ms: list[float] | None = None) -> list[float]:
    """Candidate X values (ms) for the trade-off table: a fixed ladder from
    250 ms to 120 s, the observed X and the recommendation with its interval."""
    ladder = [
        250.0,
        500.0,
        1000.0,
        2000.0,
        3000.0,
        5000.0,
        7500.0,
        10000.0,
        15000.0,
        20000.0,
        30000.0,
        60000.0,
        120000.0,
    ]
    picks = [advice.recommended_ms, advice.ci_low_ms, advice.ci_high_ms, advice.observed_timeout_ms, *(extra_ms or [])]
    return sorted({round(float(x), 1) for x in ladder + [p for p in picks if p is not None and p > 0]})
