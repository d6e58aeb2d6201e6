# The project's buckets, all private (uniform access, public access
# prevention) and versioned:
# - source: the functions' source archive (functions.tf);
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
  # checkov:skip=CKV_GCP_62:access is IAM-only (uniform access, no public access) and recorded by Cloud Audit Logs; a second log bucket adds cost, not control
  for_each                    = local.bucket_expiry_days
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
}
