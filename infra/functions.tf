# The seven functions share one source archive (`make package`:
# functions/main.py at its root, the shared/ package, requirements.txt) and
# differ by entry point. The object name carries the archive's sha256, so a
# new build redeploys the functions and an unchanged one does not.
resource "google_storage_bucket_object" "source" {
  name   = "baton-functions-${filesha256(local.source_archive)}.zip"
  bucket = google_storage_bucket.bucket["source"].name
  source = local.source_archive
}

resource "google_cloudfunctions2_function" "fn" {
  # checkov:skip=CKV_GCP_124:only webhook allows all ingress (Meta calls it from the internet, signature-checked); enqueue, deadletter, status, timeout, sweep and prepare are internal-only
  for_each = local.functions
  name     = "${var.name_prefix}-${each.key}"
  location = var.region
  labels   = var.labels

  build_config {
    runtime         = "python311"
    entry_point     = each.key
    service_account = google_service_account.build.id
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
    max_instance_count               = local.max_instances[each.key]
    # Pub/Sub push, Cloud Tasks and Cloud Scheduler from the same project
    # count as internal traffic
    # (https://cloud.google.com/run/docs/securing/ingress), so only the
    # webhook, which Meta calls, is reachable from the internet.
    ingress_settings               = each.key == "webhook" ? "ALLOW_ALL" : "ALLOW_INTERNAL_ONLY"
    all_traffic_on_latest_revision = true
    environment_variables          = local.function_env

    # Secrets are resolved from Secret Manager when an instance starts; their
    # values never pass through Terraform or its state.
    dynamic "secret_environment_variables" {
      for_each = toset(local.mounted_secrets[each.key])
      content {
        key        = secret_environment_variables.value
        project_id = var.project_id
        secret     = google_secret_manager_secret.platform[secret_environment_variables.value].secret_id
        version    = "latest"
      }
    }
  }

  lifecycle {
    # shared/config.py refuses to start otherwise: a send still running when
    # its ack timeout fires could land after the next message's send.
    precondition {
      condition     = var.send_timeout_ms < var.ack_timeout_ms
      error_message = "send_timeout_ms must be below ack_timeout_ms."
    }
    precondition {
      condition     = var.send_timeout_ms < var.function_timeout_seconds * 1000
      error_message = "send_timeout_ms must be below function_timeout_seconds: a send call runs inside one request."
    }
    # The sweep stops taking up rooms at its budget; the rooms under way then
    # finish (one transaction and one send each) inside the function's timeout.
    precondition {
      condition     = var.sweep_budget_s * 1000 + var.send_timeout_ms + 10000 <= var.function_timeout_seconds * 1000
      error_message = "sweep_budget_s * 1000 + send_timeout_ms + 10000 must not exceed function_timeout_seconds * 1000."
    }
    # A preparation's fetch and upload (media_timeout_ms) runs inside one
    # `prepare` request, between reading the room and the transaction that
    # stores its result: 10 s are left for those (a Firestore transaction
    # retries on contention). Cloud Tasks' own dispatch deadline of an HTTP
    # task is 10 minutes unless the task sets one
    # (https://cloud.google.com/tasks/docs/reference/rest/v2/projects.locations.queues.tasks#Task),
    # so the function's timeout is the bound that matters.
    precondition {
      condition     = var.media_timeout_ms + 10000 <= var.function_timeout_seconds * 1000
      error_message = "media_timeout_ms + 10000 must not exceed function_timeout_seconds * 1000: a preparation's upload and its room transaction run inside one prepare request."
    }
    # The head of line asks for its preparation again after
    # prepare_timeout_ms; below the upload's own limit it would ask while the
    # first attempt may still be uploading (a second upload of the same file).
    precondition {
      condition     = var.media_timeout_ms < var.prepare_timeout_ms
      error_message = "media_timeout_ms must be below prepare_timeout_ms: the head would ask for a preparation again while its upload may still run."
    }
    # Each request of `prepare` may hold one media file (media_max_bytes) in
    # memory, and an instance serves function_threads of them at once: keep
    # that within half the instance's memory, or a burst of large files
    # kills the instance and every request on it.
    precondition {
      condition     = var.media_max_bytes * var.function_threads <= tonumber(regex("^[0-9]+", var.function_memory)) * (endswith(var.function_memory, "Gi") ? 1024 : 1) * 1048576 / 2
      error_message = "media_max_bytes x function_threads must fit in half of function_memory: each prepare request may hold one media file."
    }
    precondition {
      condition     = var.function_threads == 1 || tonumber(var.function_cpu) >= 1
      error_message = "function_threads > 1 needs function_cpu >= 1 (Cloud Run allows concurrency only from 1 vCPU)."
    }
  }

  # The build identity's role, the secret grants, and the Firestore and
  # Cloud Tasks grants must have propagated before the first build, the
  # first instance start and the first request, or they fail: the functions
  # wait for time_sleep.grants_propagate (iam.tf), which waits for them. The
  # queues come first too: a function given a higher TASKS_QUEUE_COUNT or
  # PREPARE_QUEUE_COUNT must find every queue it hashes rooms to.
  depends_on = [
    google_project_service.apis,
    time_sleep.grants_propagate,
    google_cloud_tasks_queue.ack_timeouts,
    google_cloud_tasks_queue.prepare,
  ]
}
