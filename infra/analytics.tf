# Delivery analytics: Cloud Logging routes the functions' delivery events
# (jsonPayload.log_type = "baton.delivery", see shared/events.py) to a bucket,
# as hourly JSON files; the PySpark pipeline reads them on Dataproc
# Serverless (`make report-cloud`).
resource "google_storage_bucket" "delivery_log" {
  # checkov:skip=CKV_GCP_62:access is IAM-only (uniform access, no public access) and recorded by Cloud Audit Logs; a second log bucket adds cost, not control
  name                        = "${var.project_id}-${var.name_prefix}-delivery-log"
  location                    = var.region
  labels                      = var.labels
  uniform_bucket_level_access = true
  public_access_prevention    = "enforced"
  force_destroy               = !var.deletion_protection

  versioning {
    enabled = true
  }

  lifecycle_rule {
    condition {
      age = var.log_retention_days
    }
    action {
      type = "Delete"
    }
  }
}

resource "google_logging_project_sink" "delivery_events" {
  # checkov:skip=CKV2_GCP_4:retention is a lifecycle rule (log_retention_days); a locked bucket could never be torn down
  name        = "${var.name_prefix}-delivery-events"
  destination = "storage.googleapis.com/${google_storage_bucket.delivery_log.name}"
  filter      = "resource.type=\"cloud_run_revision\" AND jsonPayload.log_type=\"baton.delivery\""
  # A dedicated writer identity, granted on this bucket only.
  unique_writer_identity = true
}

# roles/storage.objectCreator: the sink writes new log files, nothing else.
resource "google_storage_bucket_iam_member" "sink_writes_log" {
  bucket = google_storage_bucket.delivery_log.name
  role   = "roles/storage.objectCreator"
  member = google_logging_project_sink.delivery_events.writer_identity
}

# The pipeline's code (staged by gcloud) and its output (tables, report).
resource "google_storage_bucket" "analytics" {
  # checkov:skip=CKV_GCP_62:access is IAM-only (uniform access, no public access) and recorded by Cloud Audit Logs; a second log bucket adds cost, not control
  name                        = "${var.project_id}-${var.name_prefix}-analytics"
  location                    = var.region
  labels                      = var.labels
  uniform_bucket_level_access = true
  public_access_prevention    = "enforced"
  force_destroy               = !var.deletion_protection

  versioning {
    enabled = true
  }
}

# roles/storage.objectViewer on the log bucket: the batch reads the events.
resource "google_storage_bucket_iam_member" "dataproc_reads_log" {
  bucket = google_storage_bucket.delivery_log.name
  role   = "roles/storage.objectViewer"
  member = "serviceAccount:${google_service_account.dataproc.email}"
}

# roles/storage.objectAdmin on the analytics bucket: the batch reads its
# staged code and writes (and overwrites) its tables and report.
resource "google_storage_bucket_iam_member" "dataproc_writes_analytics" {
  bucket = google_storage_bucket.analytics.name
  role   = "roles/storage.objectAdmin"
  member = "serviceAccount:${google_service_account.dataproc.email}"
}
