# Delivery analytics: Cloud Logging routes the functions' delivery events
# (jsonPayload.log_type = "baton.delivery", see shared/events.py) to a bucket,
# as hourly JSON files; the PySpark pipeline reads them on Dataproc
# Serverless (`make report-cloud`).
resource "google_logging_project_sink" "delivery_events" {
  # checkov:skip=CKV2_GCP_4:retention is a lifecycle rule (log_retention_days); a locked bucket could never be torn down
  name        = "${var.name_prefix}-delivery-events"
  destination = "storage.googleapis.com/${google_storage_bucket.bucket["delivery-log"].name}"
  filter      = "resource.type=\"cloud_run_revision\" AND jsonPayload.log_type=\"baton.delivery\""
  # A dedicated writer identity, granted on this bucket only.
  unique_writer_identity = true
}

# roles/storage.objectCreator: the sink writes new log files, nothing else.
resource "google_storage_bucket_iam_member" "sink_writes_log" {
  bucket = google_storage_bucket.bucket["delivery-log"].name
  role   = "roles/storage.objectCreator"
  member = google_logging_project_sink.delivery_events.writer_identity
}

# roles/storage.objectViewer on the log bucket: the batch reads the events.
resource "google_storage_bucket_iam_member" "dataproc_reads_log" {
  bucket = google_storage_bucket.bucket["delivery-log"].name
  role   = "roles/storage.objectViewer"
  member = "serviceAccount:${google_service_account.dataproc.email}"
}

# roles/storage.objectAdmin on the analytics bucket: the batch reads its
# staged code and writes (and overwrites) its tables and report.
resource "google_storage_bucket_iam_member" "dataproc_writes_analytics" {
  bucket = google_storage_bucket.bucket["analytics"].name
  role   = "roles/storage.objectAdmin"
  member = "serviceAccount:${google_service_account.dataproc.email}"
}
