# The three functions share one source archive (`make package`: functions/
# main.py at its root, the shared/ package, requirements.txt) and differ by
# entry point. The object name carries the archive's hash, so a new build
# redeploys and an unchanged one does not.
resource "google_storage_bucket_object" "source" {
  name   = "baton-functions-${filesha256(var.source_archive)}.zip"
  bucket = google_storage_bucket.bucket["source"].name
  source = var.source_archive
}

resource "google_cloudfunctions2_function" "fn" {
  # checkov:skip=CKV_GCP_124:only `webhook` allows all ingress, because Meta calls it from the internet (signature-checked); enqueue and timeout are internal-only
  for_each = local.functions
  name     = "${var.name_prefix}-${each.key}"
  location = var.region
  labels   = var.labels

  build_config {
    runtime     = "python311"
    entry_point = each.key
    source {
      storage_source {
        bucket = google_storage_bucket.bucket["source"].name
        object = google_storage_bucket_object.source.name
      }
    }
  }

  service_config {
    service_account_email            = google_service_account.function[each.key].email
    available_memory                 = var.function_memory
    available_cpu                    = var.function_cpu
    timeout_seconds                  = var.function_timeout_seconds
    max_instance_request_concurrency = var.function_threads
    min_instance_count               = var.min_instances[each.key]
    max_instance_count               = var.max_instances[each.key]
    # Pub/Sub push and Cloud Tasks in the same project count as internal
    # traffic (https://cloud.google.com/run/docs/securing/ingress).
    ingress_settings               = each.key == "webhook" ? "ALLOW_ALL" : "ALLOW_INTERNAL_ONLY"
    all_traffic_on_latest_revision = true
    environment_variables          = local.function_env

    # Secrets arrive as environment variables resolved from Secret Manager
    # when an instance starts; their values never pass through Terraform.
    dynamic "secret_environment_variables" {
      for_each = toset(local.function_secrets[each.key])
      content {
        key        = secret_environment_variables.value
        project_id = var.project_id
        secret     = google_secret_manager_secret.platform[secret_environment_variables.value].secret_id
        version    = "latest"
      }
    }
  }

  depends_on = [
    google_project_service.apis,
    google_secret_manager_secret_iam_member.function_reads,
  ]
}
