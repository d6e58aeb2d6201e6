# Operating baton in Cloud Monitoring: log-based metrics from the delivery
# event log (shared/events.py), one dashboard, and alert policies
# (docs/operations.md, "Operating baton"). tests/unit/operators/test_operations_tf.py
# checks every metric filter against event lines the code itself produces.
#
# Resources and arguments as documented by the google provider:
# https://registry.terraform.io/providers/hashicorp/google/latest/docs/resources/logging_metric
# https://registry.terraform.io/providers/hashicorp/google/latest/docs/resources/monitoring_dashboard
# https://registry.terraform.io/providers/hashicorp/google/latest/docs/resources/monitoring_alert_policy
# Filter syntax: https://cloud.google.com/logging/docs/view/logging-query-language
# (log-based metrics) and https://cloud.google.com/monitoring/api/v3/filters
# (time series). Metric types: https://cloud.google.com/monitoring/api/metrics_gcp
#
# Firestore indexes: the room listings of the `baton` CLI on `wake_at_us`,
# `head_since_us` and `paused_at_us` ask each index shard and use the
# composite indexes (shard, field) of firestore.tf; every other query is a
# range or equality on one top-level field of a room (`parked`) or of a kept
# record (`dead_letters.room_id`, `dead_lettered_at`, `rejected_at`), ordered
# by that field and the document id, which Firestore's automatic
# single-field indexes serve
# (https://cloud.google.com/firestore/docs/query-data/index-overview).

# The alerts' variables (alert_*) are in variables_operations.tf.

locals {
  # Every metric counts only delivery events (the sink's own filter, logging in main.tf),
  # each once: not the lines the outbox logs again for an earlier write (`relogged`,
  # docs/event-log.md). A line whose first-hand copy died with its process (a crash
  # between a commit and its logging) is then not counted: rare, against counting
  # most ends twice (the sink keeps every line).
  delivery_log = "jsonPayload.log_type=\"baton.delivery\" AND NOT jsonPayload.relogged=true"
  metric_type  = "logging.googleapis.com/user/${var.name_prefix}"
  # This deployment's services only, so a second name_prefix in the project is not counted.
  service_names_quoted = join(", ", [for n in local.service_names : "\"${n}\""])

  # Counters: one per event that needs watching.
  delivery_counters = {
    watchdog_rescues = { event = "watchdog_rescued", description = "Rooms the watchdog sweep re-drove (a timer was lost or never armed)." }
    rejected_pushes  = { event = "rejected", description = "Pushes kept as invalid in rejected_messages/ (baton rejects list)." }
    parked_messages  = { event = "parked", description = "Messages parked in their room, waiting for an operator (baton dead-letters list)." }
  }
  # Distributions (ms): send-to-ack latency on `acked`; head-of-line wait,
  # publish to first send, on `sent` of attempt 1.
  delivery_latencies = {
    send_to_ack_latency = { filter = "jsonPayload.event=\"acked\" AND jsonPayload.send_to_ack_ms>=0", field = "send_to_ack_ms", description = "Send call to the status that acked the message, ms." }
    head_of_line_wait   = { filter = "jsonPayload.event=\"sent\" AND jsonPayload.attempt=1 AND jsonPayload.publish_to_send_ms>=0", field = "publish_to_send_ms", description = "Publish to the message's first send call: its wait behind the head of line, ms." }
  }
  outcomes = ["acked", "timed_out", "failed", "dead_lettered", "skipped"]

  ended_type     = "${local.metric_type}/messages_ended"
  enqueue_sub    = google_pubsub_subscription.push["enqueue"].name
  dead_letter_sb = google_pubsub_subscription.push["deadletter"].name

  # One xyChart tile of the dashboard.
  chart = {
    for name, spec in {
      ended = {
        title  = "Messages ended, by outcome (per minute)", plot = "STACKED_BAR",
        filter = "metric.type=\"${local.metric_type}/messages_ended\"", aligner = "ALIGN_DELTA", reducer = "REDUCE_SUM",
        group  = ["metric.label.outcome"]
      }
      ack_p50 = {
        title  = "Send to ack, p50 and p99 (ms)", plot = "LINE",
        filter = "metric.type=\"${local.metric_type}/send_to_ack_latency\"", aligner = "ALIGN_DELTA", reducer = "REDUCE_PERCENTILE_50", group = []
      }
      wait_p99 = {
        title  = "Head-of-line wait, p99 (ms)", plot = "LINE",
        filter = "metric.type=\"${local.metric_type}/head_of_line_wait\"", aligner = "ALIGN_DELTA", reducer = "REDUCE_PERCENTILE_99", group = []
      }
      rescues = {
        title   = "Watchdog rescues, rejected pushes, parked messages", plot = "STACKED_BAR",
        filter  = "metric.type=starts_with(\"${local.metric_type}/\") AND metric.type!=\"${local.ended_type}\" AND metric.type!=\"${local.metric_type}/send_to_ack_latency\" AND metric.type!=\"${local.metric_type}/head_of_line_wait\"",
        aligner = "ALIGN_DELTA", reducer = "REDUCE_SUM", group = ["metric.type"]
      }
      backlog = {
        title   = "Pub/Sub backlog: enqueue and dead-letter subscriptions (messages)", plot = "LINE",
        filter  = "metric.type=\"pubsub.googleapis.com/subscription/num_undelivered_messages\" AND resource.type=\"pubsub_subscription\" AND resource.label.subscription_id=one_of(\"${local.enqueue_sub}\", \"${local.dead_letter_sb}\")",
        aligner = "ALIGN_MAX", reducer = "REDUCE_SUM", group = ["resource.label.subscription_id"]
      }
      oldest = {
        title   = "Oldest unacked message age (s)", plot = "LINE",
        filter  = "metric.type=\"pubsub.googleapis.com/subscription/oldest_unacked_message_age\" AND resource.type=\"pubsub_subscription\" AND resource.label.subscription_id=one_of(\"${local.enqueue_sub}\", \"${local.dead_letter_sb}\")",
        aligner = "ALIGN_MAX", reducer = "REDUCE_MAX", group = ["resource.label.subscription_id"]
      }
      tasks = {
        title   = "Cloud Tasks queue depth (ack-timeout timers)", plot = "LINE",
        filter  = "metric.type=\"cloudtasks.googleapis.com/queue/depth\" AND resource.type=\"cloud_tasks_queue\" AND resource.label.queue_id=starts_with(\"${local.tasks_queue_prefix}\")",
        aligner = "ALIGN_MAX", reducer = "REDUCE_SUM", group = []
      }
      prepare_tasks = {
        title   = "Cloud Tasks queue depth (prepare tasks: media uploads waiting)", plot = "LINE",
        filter  = "metric.type=\"cloudtasks.googleapis.com/queue/depth\" AND resource.type=\"cloud_tasks_queue\" AND resource.label.queue_id=starts_with(\"${local.prepare_queue_prefix}\")",
        aligner = "ALIGN_MAX", reducer = "REDUCE_SUM", group = []
      }
      errors = {
        title   = "Function answers 5xx (per second)", plot = "LINE",
        filter  = "metric.type=\"run.googleapis.com/request_count\" AND resource.type=\"cloud_run_revision\" AND resource.label.service_name=one_of(${local.service_names_quoted}) AND metric.label.response_code_class=\"5xx\"",
        aligner = "ALIGN_RATE", reducer = "REDUCE_SUM", group = ["resource.label.service_name"]
      }
    } :
    name => {
      title = spec.title
      xyChart = {
        dataSets = [{
          plotType = spec.plot
          timeSeriesQuery = {
            timeSeriesFilter = {
              filter      = spec.filter
              aggregation = { alignmentPeriod = "60s", perSeriesAligner = spec.aligner, crossSeriesReducer = spec.reducer, groupByFields = spec.group }
            }
          }
        }]
      }
    }
  }
}

resource "google_logging_metric" "messages_ended" {
  project     = var.project_id
  name        = "${var.name_prefix}/messages_ended"
  description = "Messages that ended, by outcome (acked, timed_out, failed, dead_lettered, skipped)."
  filter      = "${local.delivery_log} AND jsonPayload.event=(\"acked\" OR \"timed_out\" OR \"failed\" OR \"dead_lettered\" OR \"skipped\")"
  label_extractors = {
    outcome = "EXTRACT(jsonPayload.event)"
  }
  metric_descriptor {
    metric_kind  = "DELTA"
    value_type   = "INT64"
    unit         = "1"
    display_name = "baton messages ended"
    labels {
      key         = "outcome"
      value_type  = "STRING"
      description = "acked, timed_out, failed, dead_lettered or skipped"
    }
  }
}

resource "google_logging_metric" "delivery_counter" {
  for_each    = local.delivery_counters
  project     = var.project_id
  name        = "${var.name_prefix}/${each.key}"
  description = each.value.description
  filter      = "${local.delivery_log} AND jsonPayload.event=\"${each.value.event}\""
  metric_descriptor {
    metric_kind  = "DELTA"
    value_type   = "INT64"
    unit         = "1"
    display_name = "baton ${replace(each.key, "_", " ")}"
  }
}

resource "google_logging_metric" "delivery_latency" {
  for_each        = local.delivery_latencies
  project         = var.project_id
  name            = "${var.name_prefix}/${each.key}"
  description     = each.value.description
  filter          = "${local.delivery_log} AND ${each.value.filter}"
  value_extractor = "EXTRACT(jsonPayload.${each.value.field})"
  metric_descriptor {
    metric_kind  = "DELTA"
    value_type   = "DISTRIBUTION"
    unit         = "ms"
    display_name = "baton ${replace(each.key, "_", " ")}"
  }
  # 1 ms to about 10 min: 1 x 1.5^i, i < 34.
  bucket_options {
    exponential_buckets {
      num_finite_buckets = 34
      growth_factor      = 1.5
      scale              = 1
    }
  }
}

resource "google_monitoring_dashboard" "baton" {
  project = var.project_id
  dashboard_json = jsonencode({
    displayName = "baton (${var.name_prefix}): delivery"
    mosaicLayout = {
      columns = 12
      tiles = [
        for i, name in ["ended", "ack_p50", "wait_p99", "rescues", "backlog", "oldest", "tasks", "prepare_tasks", "errors"] : {
          xPos = (i % 2) * 6, yPos = floor(i / 2) * 4, width = 6, height = 4, widget = local.chart[name]
        }
      ]
    }
  })

  depends_on = [google_project_service.apis, google_logging_metric.messages_ended, google_logging_metric.delivery_counter, google_logging_metric.delivery_latency]
}

# Anything that waits for an operator: a message baton dead-lettered, or one
# parked in its room. Fires on the first one.
resource "google_monitoring_alert_policy" "needs_operator" {
  project               = var.project_id
  display_name          = "baton (${var.name_prefix}): a message waits for an operator"
  combiner              = "OR"
  notification_channels = var.alert_notification_channels
  severity              = "ERROR"
  conditions {
    display_name = "a message was dead-lettered"
    condition_threshold {
      filter          = "metric.type=\"${local.ended_type}\" AND metric.label.outcome=\"dead_lettered\""
      comparison      = "COMPARISON_GT"
      threshold_value = 0
      duration        = "0s"
      aggregations {
        alignment_period     = "60s"
        per_series_aligner   = "ALIGN_DELTA"
        cross_series_reducer = "REDUCE_SUM"
      }
    }
  }
  conditions {
    display_name = "a message was parked"
    condition_threshold {
      filter          = "metric.type=\"${local.metric_type}/parked_messages\""
      comparison      = "COMPARISON_GT"
      threshold_value = 0
      duration        = "0s"
      aggregations {
        alignment_period     = "60s"
        per_series_aligner   = "ALIGN_DELTA"
        cross_series_reducer = "REDUCE_SUM"
      }
    }
  }
  documentation {
    mime_type = "text/markdown"
    content   = "Run `baton --project ${var.project_id} dead-letters list`, then redrive or skip each (docs/operations.md, \"A poison message\")."
  }
  depends_on = [google_project_service.apis, google_logging_metric.messages_ended, google_logging_metric.delivery_counter]
}

resource "google_monitoring_alert_policy" "watchdog_rescues" {
  project               = var.project_id
  display_name          = "baton (${var.name_prefix}): watchdog rescues above ${var.alert_watchdog_rescues} in 10 min"
  combiner              = "OR"
  notification_channels = var.alert_notification_channels
  severity              = "WARNING"
  conditions {
    display_name = "watchdog rescues in 10 minutes"
    condition_threshold {
      filter          = "metric.type=\"${local.metric_type}/watchdog_rescues\""
      comparison      = "COMPARISON_GT"
      threshold_value = var.alert_watchdog_rescues
      duration        = "0s"
      aggregations {
        alignment_period     = "600s"
        per_series_aligner   = "ALIGN_DELTA"
        cross_series_reducer = "REDUCE_SUM"
      }
    }
  }
  documentation {
    mime_type = "text/markdown"
    content   = "Timers are lost or not armed: look for `timer_arm_failed` and at the Cloud Tasks queues; `baton rooms list --stuck` (docs/operations.md, \"A stuck room\")."
  }
  depends_on = [google_project_service.apis, google_logging_metric.delivery_counter]
}

# The share of ended messages that timed out over 15 minutes: a ratio
# condition (filter over denominator_filter).
resource "google_monitoring_alert_policy" "timed_out_share" {
  project               = var.project_id
  display_name          = "baton (${var.name_prefix}): timed-out share above ${var.alert_timed_out_share} over 15 min"
  combiner              = "OR"
  notification_channels = var.alert_notification_channels
  severity              = "WARNING"
  conditions {
    display_name = "timed out / ended, 15 minutes"
    condition_threshold {
      filter             = "metric.type=\"${local.ended_type}\" AND metric.label.outcome=\"timed_out\""
      denominator_filter = "metric.type=\"${local.ended_type}\""
      comparison         = "COMPARISON_GT"
      threshold_value    = var.alert_timed_out_share
      duration           = "0s"
      aggregations {
        alignment_period     = "900s"
        per_series_aligner   = "ALIGN_DELTA"
        cross_series_reducer = "REDUCE_SUM"
      }
      denominator_aggregations {
        alignment_period     = "900s"
        per_series_aligner   = "ALIGN_DELTA"
        cross_series_reducer = "REDUCE_SUM"
      }
    }
  }
  documentation {
    mime_type = "text/markdown"
    content   = "The platform's statuses are not coming back in ACK_TIMEOUT_MS: check the webhook (5xx alert) and the platform's status page (docs/operations.md, \"A platform outage\")."
  }
  depends_on = [google_project_service.apis, google_logging_metric.messages_ended]
}

resource "google_monitoring_alert_policy" "oldest_unacked" {
  project               = var.project_id
  display_name          = "baton (${var.name_prefix}): oldest unacked push older than ${var.alert_oldest_unacked_s} s"
  combiner              = "OR"
  notification_channels = var.alert_notification_channels
  severity              = "WARNING"
  conditions {
    display_name = "oldest unacked message age, enqueue subscription"
    condition_threshold {
      filter          = "metric.type=\"pubsub.googleapis.com/subscription/oldest_unacked_message_age\" AND resource.type=\"pubsub_subscription\" AND resource.label.subscription_id=\"${local.enqueue_sub}\""
      comparison      = "COMPARISON_GT"
      threshold_value = var.alert_oldest_unacked_s
      duration        = "300s"
      aggregations {
        alignment_period   = "60s"
        per_series_aligner = "ALIGN_MAX"
      }
    }
  }
  documentation {
    mime_type = "text/markdown"
    content   = "Pushes are refused or failing: full rooms (`backpressure`), Firestore trouble, or enqueue answering 5xx; `baton rooms list --lag` (docs/operations.md)."
  }
  depends_on = [google_project_service.apis]
}

resource "google_monitoring_alert_policy" "function_5xx" {
  project               = var.project_id
  display_name          = "baton (${var.name_prefix}): functions answer 5xx above ${var.alert_function_5xx_per_s}/s"
  combiner              = "OR"
  notification_channels = var.alert_notification_channels
  severity              = "ERROR"
  conditions {
    display_name = "5xx answers per second, by function"
    condition_threshold {
      filter          = "metric.type=\"run.googleapis.com/request_count\" AND resource.type=\"cloud_run_revision\" AND resource.label.service_name=one_of(${local.service_names_quoted}) AND metric.label.response_code_class=\"5xx\""
      comparison      = "COMPARISON_GT"
      threshold_value = var.alert_function_5xx_per_s
      duration        = "300s"
      aggregations {
        alignment_period     = "300s"
        per_series_aligner   = "ALIGN_RATE"
        cross_series_reducer = "REDUCE_SUM"
        group_by_fields      = ["resource.label.service_name"]
      }
    }
  }
  documentation {
    mime_type = "text/markdown"
    content   = "A function fails requests (its callers retry): read its logs at severity>=ERROR (docs/operations.md, \"A platform outage\")."
  }
  depends_on = [google_project_service.apis]
}
