# Delivery analytics: Cloud Logging routes the functions' delivery events
# (jsonPayload.log_type = "baton.delivery", shared/events.py) to a bucket as
# hourly JSON files, BUCKET/run.googleapis.com/stdout/YYYY/MM/DD/HH:00:00_...;
# the PySpark pipeline reads them on Dataproc Serverless (`make report-cloud`).
# Per-invocation cost lines ("baton.invocation") stay out.
resource "google_logging_project_sink" "delivery_events" {
  # checkov:skip=CKV2_GCP_4:retention is a lifecycle rule (log_retention_days); a locked retention policy could never be shortened or the bucket torn down
  name        = "${var.name_prefix}-delivery-events"
  destination = "storage.googleapis.com/${google_storage_bucket.bucket["delivery-log"].name}"
  # This deployment's delivery events only: its seven Cloud Run services by
  # exact name (local.delivery_events_filter, main.tf), so a second
  # deployment in the project keeps its own events in its own bucket.
  filter = local.delivery_events_filter
  # A writer identity of this sink's own, granted on this bucket only.
  unique_writer_identity = true

  depends_on = [google_project_service.apis]
}

# roles/storage.objectCreator on the log bucket: the sink writes new files,
# nothing else.
resource "google_storage_bucket_iam_member" "sink_writes_log" {
  bucket = google_storage_bucket.bucket["delivery-log"].name
  role   = "roles/storage.objectCreator"
  member = google_logging_project_sink.delivery_events.writer_identity
  # The writer identity is new with the sink: wait until IAM knows it.
  depends_on = [time_sleep.identities_propagate]
}

# The delivery events go to the _Default log bucket as well, unless
# keep_delivery_events_in_default_bucket is false: then this exclusion on the
# _Default sink drops them there (an exclusion on _Default does not touch
# other sinks, https://cloud.google.com/logging/docs/reference/v2/rest/v2/exclusions),
# the sink above still writes them to its bucket, and the log-based metrics
# of operations.tf still count them ("calculated from all logs received by
# the Logging API, regardless of inclusion and exclusion filters",
# https://cloud.google.com/logging/docs/logs-based-metrics). Ingestion into
# _Default is billed per GiB: docs/cost.md says how much this saves.
resource "google_logging_project_exclusion" "delivery_events_from_default" {
  count       = var.keep_delivery_events_in_default_bucket ? 0 : 1
  name        = "${var.name_prefix}-delivery-events"
  description = "baton (${var.name_prefix}): delivery events are kept by the ${var.name_prefix}-delivery-events sink's bucket"
  filter      = local.delivery_events_filter
  depends_on  = [google_storage_bucket_iam_member.sink_writes_log]
}

# The routine status lines stay out of _Default unless
# keep_routine_statuses_in_default_bucket (or all delivery events are out):
# WhatsApp's `sent` of every message and the statuses after its ack
# (`status_ignored` with reason `sent_status` or `after_acked`, the reasons
# tools/bench/cost.py prices) change nothing in a room, and are a third of the
# delivery events. The sink above still writes them to its bucket for the
# analytics; Logs Explorer shows every line that changed a room.
resource "google_logging_project_exclusion" "routine_statuses_from_default" {
  count       = var.keep_delivery_events_in_default_bucket && !var.keep_routine_statuses_in_default_bucket ? 1 : 0
  name        = "${var.name_prefix}-routine-statuses"
  description = "baton (${var.name_prefix}): routine status lines (sent, after the ack) are kept by the ${var.name_prefix}-delivery-events sink's bucket"
  filter      = "${local.delivery_events_filter} AND jsonPayload.event=\"status_ignored\" AND jsonPayload.reason=(\"sent_status\" OR \"after_acked\")"
  depends_on  = [google_storage_bucket_iam_member.sink_writes_log]
}

# The re-logged delivery event lines stay out of _Default unless
# keep_relogged_events_in_default_bucket (or all delivery events are out): a
# room transaction logs again the lines an earlier write of the room left in
# its outbox (shared/outbox.py, `"relogged": true` on each), not knowing
# whether their own process logged them; most are a second copy. The sink
# above still writes them to its bucket, where the analytics keep one line
# per room and event id, so a line whose process died before logging it is
# still there; Logs Explorer shows each line once, without such a line.
resource "google_logging_project_exclusion" "relogged_events_from_default" {
  count       = var.keep_delivery_events_in_default_bucket && !var.keep_relogged_events_in_default_bucket ? 1 : 0
  name        = "${var.name_prefix}-relogged-events"
  description = "baton (${var.name_prefix}): delivery event lines a room's outbox logs again are kept by the ${var.name_prefix}-delivery-events sink's bucket"
  filter      = "${local.delivery_events_filter} AND jsonPayload.relogged=true"
  depends_on  = [google_storage_bucket_iam_member.sink_writes_log]
}

# Cloud Run's request log entries of the seven functions stay out of _Default
# unless keep_request_logs_in_default_bucket: one entry per invocation, about
# as much log volume as the delivery events (docs/cost.md), and what they say
# is in the request metrics (5xx rate, latencies) that operations.tf watches.
resource "google_logging_project_exclusion" "request_logs_from_default" {
  count       = var.keep_request_logs_in_default_bucket ? 0 : 1
  name        = "${var.name_prefix}-request-logs"
  description = "baton (${var.name_prefix}): Cloud Run request logs of the functions; the request metrics stay"
  filter      = local.request_logs_filter
}

# roles/storage.objectViewer on the log bucket: the batch lists and reads the
# events; it cannot write there (iam.tf takes this bucket out of
# roles/dataproc.worker).
resource "google_storage_bucket_iam_member" "dataproc_reads_log" {
  bucket     = google_storage_bucket.bucket["delivery-log"].name
  role       = "roles/storage.objectViewer"
  member     = "serviceAccount:${google_service_account.dataproc.email}"
  depends_on = [time_sleep.identities_propagate]
}

# roles/storage.legacyBucketReader on the log bucket: the bucket's own
# metadata (storage.buckets.get), which the Cloud Storage connector reads.
resource "google_storage_bucket_iam_member" "dataproc_reads_log_bucket" {
  bucket     = google_storage_bucket.bucket["delivery-log"].name
  role       = "roles/storage.legacyBucketReader"
  member     = "serviceAccount:${google_service_account.dataproc.email}"
  depends_on = [time_sleep.identities_propagate]
}

# roles/storage.objectAdmin on the analytics bucket: the batch reads its
# staged code and writes (and overwrites) its tables and report.
resource "google_storage_bucket_iam_member" "dataproc_writes_analytics" {
  bucket     = google_storage_bucket.bucket["analytics"].name
  role       = "roles/storage.objectAdmin"
  member     = "serviceAccount:${google_service_account.dataproc.email}"
  depends_on = [time_sleep.identities_propagate]
}

# Dataproc Serverless runs its workers on private IPs in a VPC subnet that
# must have Private Google Access (to reach Cloud Storage) and let the
# workers talk to each other on every port
# (https://cloud.google.com/dataproc-serverless/docs/concepts/network).
# A project may have no default network (organization policy) or a default
# network whose firewall was tightened, so baton brings its own.
resource "google_compute_network" "analytics" {
  name                    = "${var.name_prefix}-analytics"
  auto_create_subnetworks = false
  depends_on              = [google_project_service.apis]
}

resource "google_compute_subnetwork" "analytics" {
  # checkov:skip=CKV_GCP_26:only short-lived Spark workers without external IPs live here; flow logs would bill for every shuffle byte
  name                     = "${var.name_prefix}-analytics"
  region                   = var.region
  network                  = google_compute_network.analytics.id
  ip_cidr_range            = var.analytics_subnet_cidr
  private_ip_google_access = true
}

# Spark driver and executors exchange shuffle data on arbitrary ports; the
# source is this subnet only, nothing from outside.
resource "google_compute_firewall" "analytics_internal" {
  name               = "${var.name_prefix}-analytics-internal"
  network            = google_compute_network.analytics.id
  direction          = "INGRESS"
  source_ranges      = [var.analytics_subnet_cidr]
  destination_ranges = [var.analytics_subnet_cidr]

  allow {
    protocol = "all"
  }
}
