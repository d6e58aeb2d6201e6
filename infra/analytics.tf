# Delivery analytics: Cloud Logging routes the functions' delivery events
# (jsonPayload.log_type = "baton.delivery", shared/events.py) to a bucket as
# hourly JSON files, BUCKET/run.googleapis.com/stdout/YYYY/MM/DD/HH:00:00_...;
# the PySpark pipeline reads them on Dataproc Serverless (`make report-cloud`).
# Per-invocation cost lines ("baton.invocation") stay out.
resource "google_logging_project_sink" "delivery_events" {
  # checkov:skip=CKV2_GCP_4:retention is a lifecycle rule (log_retention_days); a locked retention policy could never be shortened or the bucket torn down
  name        = "${var.name_prefix}-delivery-events"
  destination = "storage.googleapis.com/${google_storage_bucket.bucket["delivery-log"].name}"
  # On log_type alone: the resource type of 2nd gen functions' logs
  # (cloud_run_revision) is an implementation detail the events do not need.
  filter = "jsonPayload.log_type=\"baton.delivery\""
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
