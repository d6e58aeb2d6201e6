"""Each message's life, and each room's audit, from the delivery event log.

Pure DataFrame transforms, as in `pipeline.transforms` (which re-exports
these). The rules the audit follows are the room's own
(`shared/room/__init__.py`); written once here and in docs/analytics.md
("The audit's definitions"), and checked against hand-made logs, one per
rule, in tests/pipeline/test_audit_rules.py:

- a message *enters* its room queued (`enqueued`) or parked at its place
  (`parked`: a dead-letter copy or its placeholder); seq numbers are counted
  for gaps over both;
- an attempt is *possibly sent* from its `sent` (the call's start) or its
  `send_unknown` (an outcome never known counts as sent);
- a message's *life* runs from its entry to its first terminal event
  (`acked`, `failed`, `timed_out`, `dead_lettered`, `skipped`); an operator's
  `redriven` after that end (a dead letter released) starts another life,
  which ends at the next terminal event;
- a message is *in flight* in each life from its first possibly-sent attempt
  to the life's end: a skip ends it at the skip, an unknown outcome keeps it
  in flight until the room ends or resends it (its window), an ack kept early
  (`acked_while_resending`) ends it only when the room logs `acked`;
- *ordering*: first sends (a message's first life) go in seq order; a
  redriven dead letter's later sends are not first sends, even when its
  first life had none (every attempt refused): it goes where the operator
  put it;
- *lost*: the last life has no end; *multiple ends*: a life with more than
  one terminal event;
- a *message* is `(room_id, incarnation, seq)`: a room deleted by TTL and
  made again (another incarnation) starts its seqs at 1; its ordering and
  gaps are judged within each incarnation;
- a line logged twice (the room's outbox, shared/outbox.py: the same
  `event_id`) counts once (`distinct_events`);
- *moved*: a placeholder whose push came with a producer `sequence` ahead of
  the room's gave up its place (`sequence_held` under its seq): its message
  enters later under a new seq and ends there, so the placeholder's seq
  ends nothing (outcome `moved`, neither a message nor lost) but did enter
  (no gap).
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from pipeline.schema import LIFECYCLE_EVENTS, SEND_EVENTS, TERMINAL

OUTCOMES = ("acked", "timed_out", "failed", "dead_lettered", "skipped", "lost")
#: The outcome of a placeholder's seq whose message moved to a later seq (module docstring).
MOVED = "moved"
LATE_ACK = "late_ack"

#: The audit's figures and checks, as `ordering_audit` returns them after `room_id`.
AUDIT_COLUMNS = (
    "messages_sent", "ordering_violations", "max_in_flight", "in_flight_violations", "gaps", "lost",
    "multiple_ends", "sends_in_order", "single_in_flight", "none_lost", "no_gaps", "one_end_each", "audit_ok",
)  # fmt: skip


def ms_between(later: Column, earlier: Column) -> Column:
    """Milliseconds (double) from `earlier` to `later`, both timestamps."""
    return (F.unix_micros(later) - F.unix_micros(earlier)) / F.lit(1000.0)


def _lives(sends: Column, ends: Column, redrives: Column) -> Column:
    """Per message, one struct per life: `start` (first possibly-sent attempt
    of the life, or null), `end` (its first terminal event: `ts`, `event`,
    `actor`, `reason`; null if none) and `ends` (terminal events in it).

    `sends` is the sorted array of the message's possibly-sent times, `ends`
    its terminal events sorted by time, `redrives` its sorted `redriven`
    times. A redrive after the first end (a dead letter released) starts a
    life; one before it (a parked message released) does not.
    """
    first_end = F.try_element_at(ends, F.lit(1)).getField("ts")
    reopens = F.filter(redrives, lambda r: r > first_end)
    bounds = F.concat(F.array(F.lit(None).cast("timestamp")), reopens)

    def life(b: Column, i: Column) -> Column:
        nb = F.try_element_at(bounds, i + 2)

        def within(t: Column) -> Column:
            return (b.isNull() | (t >= b)) & (nb.isNull() | (t < nb))

        in_life = F.filter(ends, lambda e: within(e.getField("ts")))
        return F.struct(
            F.array_min(F.filter(sends, within)).alias("start"),
            F.try_element_at(in_life, F.lit(1)).alias("end"),
            F.size(in_life).alias("ends"),
        )

    # Most messages are never redriven: one life, built without the
    # higher-order functions (the same struct the general case gives)
    one_life = F.array(
        F.struct(
            F.array_min(sends).alias("start"),
            F.try_element_at(ends, F.lit(1)).alias("end"),
            F.size(ends).alias("ends"),
        )
    )
    return F.when(F.size(redrives) == 0, one_life).otherwise(F.transform(bounds, life))


def distinct_events(events: DataFrame) -> DataFrame:
    """`events` with one row per (`room_id`, `event_id`): a room transaction's
    event may be logged twice (shared/outbox.py), with the same id; rows
    without an id are all kept. Clustered by `room_id` already (as
    `message_lifecycle` gives it), it needs no shuffle of its own."""
    once = F.coalesce(F.col("event_id"), F.concat(F.lit("#"), F.monotonically_increasing_id().cast("string")))
    return events.withColumn("_once", once).dropDuplicates(["room_id", "_once"]).drop("_once")


def message_lifecycle(events: DataFrame) -> DataFrame:
    """One row per message `(room_id, incarnation, seq)`: how it went from its entry to its end.

    Input: valid events (`valid_events`). Only `LIFECYCLE_EVENTS` with a
    `seq` and late acks count here (see the module docstring for the rules).

    Output columns: `room_id`, `incarnation` (null in a log written before
    events carried it), `seq`, `message_id`, `provider`,
    `enqueued_at`, `parked_at` (entered parked), `entered_at` (the earlier),
    `published_at`, `first_sent_at` (first possibly-sent attempt: `sent` or
    `send_unknown`), `last_sent_at` (last `sent`), `ended_at` (the end of
    its last life; null if none), `outcome` (how its last life ended:
    `acked`, `timed_out`, `failed`, `dead_lettered`, `skipped`, `moved`
    (a placeholder's seq given up: its message went on under a later seq),
    or `lost` when it has not ended in the log), `enqueues`, `sends`, `unknown_sends`,
    `attempts` (highest attempt sent), `resends` (`sent` calls beyond the
    first: duplicates sent), `send_failures`, `terminal_events`, `redrives`,
    `lives` (array of `start`, `end` (`ts`, `event`, `actor`, `reason`),
    `ends`), `multiple_ends` (a life with more than one end), `skipped_by`,
    `skip_reason` (the operator and why, on `skipped`),
    `first_send_trigger`, `publish_to_send_ms` and `trigger_to_send_ms` (of
    the first `sent`), `head_of_line_wait_ms` (entered to first sent),
    `in_flight_ms` (first sent to the first life's end), `send_to_ack_ms`
    (on `acked`), `late_ack_ms` (earliest late ack), `ack_latency_ms` (the
    ack that arrived, in time or late), `error_code`, `error_title`
    (platform's, on `failed`), `dead_letter_reason`. All `*_ms` in
    milliseconds.
    """
    ev = F.col("event")
    is_sent = ev == "sent"
    is_send = ev.isin(*SEND_EVENTS)
    is_terminal = ev.isin(*TERMINAL)
    is_late = (ev == "status_ignored") & (F.col("reason") == LATE_ACK)
    # a seq's place given up (the room logs held messages themselves under seq 0)
    is_moved = (ev == "sequence_held") & (F.col("seq") > 0)
    # one shuffle, by room: the aggregate below (its keys include room_id) then
    # needs only a sort within each partition, with no partial aggregate first
    relevant = events.where(
        F.col("room_id").isNotNull() & F.col("seq").isNotNull() & (ev.isin(*LIFECYCLE_EVENTS) | is_late | is_moved)
    ).repartition("room_id")
    relevant = distinct_events(relevant)
    first_send = F.min(F.when(is_sent, F.struct("ts", "publish_to_send_ms", "trigger_to_send_ms", "trigger")))

    def times(cond: Column) -> Column:
        return F.sort_array(F.collect_list(F.when(cond, F.col("ts"))))

    agg = relevant.groupBy("room_id", "incarnation", "seq").agg(
        F.max("message_id").alias("message_id"),
        F.max("provider").alias("provider"),
        F.min(F.when(ev == "enqueued", F.col("ts"))).alias("enqueued_at"),
        F.min(F.when(ev == "parked", F.col("ts"))).alias("parked_at"),
        F.max("published_at").alias("published_at"),
        first_send.alias("_first_send"),
        F.max(F.when(is_sent, F.col("ts"))).alias("last_sent_at"),
        times(is_send).alias("_sends"),
        F.sort_array(F.collect_list(F.when(is_terminal, F.struct("ts", "event", "actor", "reason")))).alias("_ends"),
        times(ev == "redriven").alias("_redrives"),
        F.count(F.when(ev == "enqueued", 1)).alias("enqueues"),
        F.count(F.when(is_moved, 1)).alias("_moved"),
        F.count(F.when(is_sent, 1)).alias("sends"),
        F.count(F.when(ev == "send_unknown", 1)).alias("unknown_sends"),
        F.max(F.when(is_sent, F.col("attempt"))).alias("attempts"),
        F.count(F.when(ev == "send_failed", 1)).alias("send_failures"),
        F.count(F.when(is_terminal, 1)).alias("terminal_events"),
        F.max(F.when(ev == "acked", F.col("send_to_ack_ms"))).alias("send_to_ack_ms"),
        F.min(F.when(is_late, F.col("send_to_ack_ms"))).alias("late_ack_ms"),
        F.max(F.when(ev == "failed", F.col("error_code"))).alias("error_code"),
        F.max(F.when(ev == "failed", F.col("error_title"))).alias("error_title"),
        F.max(F.when(ev == "dead_lettered", F.col("reason"))).alias("dead_letter_reason"),
    )
    lives = agg.select("*", _lives(F.col("_sends"), F.col("_ends"), F.col("_redrives")).alias("lives"))
    first_sent_at = F.array_min("_sends")
    first_life_end = F.col("lives")[0].getField("end").getField("ts")
    last_end = F.try_element_at(F.col("lives"), F.lit(-1)).getField("end")
    outcome = F.coalesce(last_end.getField("event"), F.when(F.col("_moved") > 0, F.lit(MOVED)), F.lit("lost"))
    entered_at = F.least("enqueued_at", "parked_at")
    skipped = outcome == "skipped"
    return lives.select(
        "room_id",
        "incarnation",
        "seq",
        "message_id",
        "provider",
        "enqueued_at",
        "parked_at",
        entered_at.alias("entered_at"),
        "published_at",
        first_sent_at.alias("first_sent_at"),
        "last_sent_at",
        last_end.getField("ts").alias("ended_at"),
        outcome.alias("outcome"),
        "enqueues",
        "sends",
        "unknown_sends",
        "attempts",
        F.greatest(F.col("sends") - 1, F.lit(0)).alias("resends"),
        "send_failures",
        "terminal_events",
        F.size("_redrives").alias("redrives"),
        "lives",
        F.exists("lives", lambda life: life.getField("ends") > 1).alias("multiple_ends"),
        F.when(skipped, last_end.getField("actor")).alias("skipped_by"),
        F.when(skipped, last_end.getField("reason")).alias("skip_reason"),
        F.col("_first_send.trigger").alias("first_send_trigger"),
        F.col("_first_send.publish_to_send_ms").alias("publish_to_send_ms"),
        F.col("_first_send.trigger_to_send_ms").alias("trigger_to_send_ms"),
        ms_between(first_sent_at, entered_at).alias("head_of_line_wait_ms"),
        ms_between(first_life_end, first_sent_at).alias("in_flight_ms"),
        "send_to_ack_ms",
        "late_ack_ms",
        F.coalesce(F.col("send_to_ack_ms"), F.col("late_ack_ms")).alias("ack_latency_ms"),
        "error_code",
        "error_title",
        "dead_letter_reason",
    )


def _changes() -> Column:
    """Over `message_lifecycle` rows: the message's changes of its room's
    in-flight count, as structs `t`, `delta` (+1 at a life's first
    possibly-sent attempt, -1 at that life's end; one row with delta 0 and no
    time for a message never sent), `head` (true on exactly one row per
    message: the send of its first life that has one, or its delta-0 row;
    the row that counts the message once) and `ordered` (true only on a send
    of its first life: the send the ordering check reads)."""
    lives = F.col("lives")
    first_sent_life = F.array_position(F.transform(lives, lambda f: f.getField("start").isNotNull()), True)

    def rows(f: Column, i: Column) -> Column:
        start = f.getField("start")
        # an end and a send at the same microsecond count as end first: -1 sorts before +1
        end_ts = f.getField("end").getField("ts")
        # greatest() alone skips a null: a life never sent has no change at its end
        end = F.when(end_ts.isNotNull() & start.isNotNull(), F.greatest(end_ts, start))
        head = (i + 1) == first_sent_life
        # ordering reads the first life's first send only: a message first sent
        # after a redrive (every send of its first life refused) goes where the
        # operator put it
        ordered = head & (i == 0)
        both = F.array(
            F.struct(start.alias("t"), F.lit(1).alias("delta"), head.alias("head"), ordered.alias("ordered")),
            F.struct(end.alias("t"), F.lit(-1).alias("delta"), F.lit(False).alias("head"), F.lit(False).alias("ordered")),
        )
        return F.filter(both, lambda c: c.getField("t").isNotNull())

    flat = F.flatten(F.transform(lives, rows))
    never = F.array(
        F.struct(
            F.lit(None).cast("timestamp").alias("t"), F.lit(0).alias("delta"), F.lit(True).alias("head"),
            F.lit(False).alias("ordered"),
        )
    )
    return F.when(first_sent_life == 0, never).otherwise(flat)


def room_summary(messages: DataFrame) -> DataFrame:
    """One row per room: counts by outcome, duplicates sent, the ordering
    audit, the longest head-of-line wait and the room's throughput.

    Input: `message_lifecycle` rows. Output columns: `room_id`, `provider`,
    `messages`, `enqueued`, `entered_parked`, `acked`, `timed_out`,
    `failed`, `dead_lettered`, `skipped`, `lost`, `late_acks`,
    `duplicates_sent` (resends), `unknown_sends`, `send_failures`,
    `redrives`, the rest of the audit (`AUDIT_COLUMNS`, see
    `ordering_audit`), `longest_head_of_line_wait_ms`, `mean_in_flight_ms`,
    `first_sent_at`, `last_ended_at`, `active_s` (first send to last end,
    seconds) and `messages_per_s` (ended messages / `active_s`; null when
    `active_s` is 0 or unknown).

    One shuffle, one sort and one aggregate: each message becomes one row per
    change of its room's in-flight count (`_changes`), one window per room in
    time order gives the running in-flight count and the highest seq first
    sent before, and one aggregate per room reads both. Counts and sums read
    each message's `head` row only, so a message counts once.
    """
    m = messages.select(
        "room_id", "incarnation", "seq", "provider", "enqueued_at", "parked_at", "entered_at", "first_sent_at", "ended_at",
        "outcome", "resends", "unknown_sends", "send_failures", "redrives", "multiple_ends", "late_ack_ms",
        "head_of_line_wait_ms", "in_flight_ms", "lives",
    ).repartition("room_id")  # fmt: skip
    # the one shuffle is of the messages, before each becomes two rows: half the
    # bytes (78 MB instead of 151 MB at 10M events; the window keeps this partitioning)
    sweep = Window.partitionBy("room_id").orderBy("_c.t", "_c.delta", "seq")
    upto = sweep.rowsBetween(Window.unboundedPreceding, 0)
    # ordering and gaps are judged within an incarnation (its seqs start at 1)
    before = Window.partitionBy("room_id", "incarnation").orderBy("_c.t", "_c.delta", "seq").rowsBetween(
        Window.unboundedPreceding, -1
    )
    life = Window.partitionBy("room_id", "incarnation")
    is_send = F.col("_c.delta") == 1
    head = F.col("_c.head")
    ordered_send = is_send & F.col("_c.ordered")
    rows = m.select("*", F.explode(_changes()).alias("_c")).select(
        "*",
        F.sum("_c.delta").over(upto).alias("_in_flight"),
        # the highest seq first sent (in its first life) before this send, in (time, seq) order
        F.max(F.when(ordered_send, F.col("seq"))).over(before).alias("_max_seq_before"),
        F.max(F.when(F.col("entered_at").isNotNull(), F.col("seq"))).over(life).alias("_max_entered"),
    )

    def once(cond: Column) -> Column:
        return F.count(F.when(head & cond, 1))

    moved = F.col("outcome") == MOVED

    entered = F.col("entered_at").isNotNull()
    per_room = rows.groupBy("room_id").agg(
        F.max("provider").alias("provider"),
        once(~moved).alias("messages"),  # a moved placeholder's message counts under its later seq
        once(F.col("enqueued_at").isNotNull()).alias("enqueued"),
        once(F.col("parked_at").isNotNull()).alias("entered_parked"),
        *[once(F.col("outcome") == o).alias(o) for o in OUTCOMES],
        once((F.col("outcome") == "timed_out") & F.col("late_ack_ms").isNotNull()).alias("late_acks"),
        F.sum(F.when(head, F.col("resends"))).alias("duplicates_sent"),
        F.sum(F.when(head, F.col("unknown_sends"))).alias("unknown_sends"),
        F.sum(F.when(head, F.col("send_failures"))).alias("send_failures"),
        F.sum(F.when(head, F.col("redrives"))).alias("redrives"),
        F.count(F.when(ordered_send, 1)).alias("messages_sent"),
        F.count(F.when(ordered_send & (F.col("seq") < F.col("_max_seq_before")), 1)).alias("ordering_violations"),
        F.coalesce(F.max("_in_flight"), F.lit(0)).alias("max_in_flight"),
        F.count(F.when(is_send & (F.col("_in_flight") > 1), 1)).alias("in_flight_violations"),
        # seq numbers in 1..max(entered seq) of each incarnation that never entered (queued or parked)
        (
            F.coalesce(F.sum(F.when(head & entered & (F.col("seq") == F.col("_max_entered")), F.col("seq"))), F.lit(0))
            - once(entered)
        ).alias("gaps"),
        once(F.col("multiple_ends")).alias("multiple_ends"),
        once(F.col("ended_at").isNotNull()).alias("_ended"),
        F.max("head_of_line_wait_ms").alias("longest_head_of_line_wait_ms"),
        F.avg(F.when(head, F.col("in_flight_ms"))).alias("mean_in_flight_ms"),
        F.min("first_sent_at").alias("first_sent_at"),
        F.max("ended_at").alias("last_ended_at"),
    )
    checks = {
        "sends_in_order": F.col("ordering_violations") == 0,
        "single_in_flight": F.col("max_in_flight") <= 1,
        "none_lost": F.col("lost") == 0,
        "no_gaps": F.col("gaps") == 0,
        "one_end_each": F.col("multiple_ends") == 0,
    }
    all_ok = F.lit(True)
    for c in checks.values():
        all_ok = all_ok & c
    active_s = ms_between(F.col("last_ended_at"), F.col("first_sent_at")) / F.lit(1000.0)
    return (
        per_room.select("*", *[c.alias(k) for k, c in checks.items()], all_ok.alias("audit_ok"))
        .withColumn("active_s", active_s)
        .select(
            "room_id", "provider", "messages", "enqueued", "entered_parked", *[o for o in OUTCOMES],
            "late_acks", "duplicates_sent", "unknown_sends", "send_failures", "redrives",
            *[c for c in AUDIT_COLUMNS if c != "lost"],
            "longest_head_of_line_wait_ms", "mean_in_flight_ms", "first_sent_at", "last_ended_at", "active_s",
            F.when(F.col("active_s") > 0, F.col("_ended") / F.col("active_s")).alias("messages_per_s"),
        )
    )  # fmt: skip


def ordering_audit(messages: DataFrame) -> DataFrame:
    """Per room, the ordering invariants checked from the log alone: `room_id`
    and `AUDIT_COLUMNS` (a projection of `room_summary`).

    Input: `message_lifecycle` rows. Output, one row per room:

    - `messages_sent`: messages with a possibly-sent attempt in their first life;
    - `ordering_violations`: first sends of a seq lower than a seq already
      first sent in that room (0 when sends went 1, 2, 3, ... in time order);
    - `max_in_flight`: the most messages in flight at once (see the module
      docstring); an end and a send at the same microsecond count as end first;
    - `in_flight_violations`: sends (of any life) made while another message
      was in flight;
    - `gaps`: seq numbers in 1..max(entered seq), per incarnation, that never entered;
    - `lost`: messages whose last life has no end; `multiple_ends`: messages
      with a life of more than one terminal event;
    - `sends_in_order`, `single_in_flight`, `none_lost`, `no_gaps`,
      `one_end_each` (booleans) and `audit_ok` (all of them).
    """
    return room_summary(messages).select("room_id", *AUDIT_COLUMNS)
