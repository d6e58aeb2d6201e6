# The buckets, all private (uniform access, public access prevention) and
# versioned, so an overwrite or a delete can be undone for
# noncurrent_version_days:
# - source: the functions' source archives (functions.tf);
# - delivery-log: the delivery events the Logging sink writes, as hourly JSON
#   files, deleted after log_retention_days (analytics.tf);
# - analytics: the pipeline's staged code and its output (tables, report).
locals {
  bucket_expiry_days = {
    source         = null
    "delivery-log" = var.log_retention_days
    analytics      = null
  }
}

resource "google_storage_bucket" "bucket" {
  # checkov:skip=CKV_GCP_62:access is IAM-only (uniform access, public access prevented) and recorded by Cloud Audit Logs; a second log bucket adds cost, not control
  for_each = local.bucket_expiry_days
  # Bucket names are global: the project id makes them unique.
  name                        = "${var.project_id}-${var.name_prefix}-${each.key}"
  location                    = var.region
  labels                      = var.labels
  uniform_bucket_level_access = true
  public_access_prevention    = "enforced"
  force_destroy               = !var.deletion_protection

  versioning {
    enabled = true
  }

  dynamic "lifecycle_rule" {
    for_each = each.value == null ? [] : [each.value]
    content {
      condition {
        age = lifecycle_rule.value
      }
      action {
        type = "Delete"
      }
    }
  }

  # With versioning on, a delete (or the rule above) only makes an object
  # noncurrent: remove noncurrent versions too, or they are kept forever.
  lifecycle_rule {
    condition {
      days_since_noncurrent_time = var.noncurrent_version_days
      with_state                 = "ARCHIVED"
    }
    action {
      type = "Delete"
    }
  }

  depends_on = [google_project_service.apis]
}
