# baton on Google Cloud: producers publish to a Pub/Sub topic with the room as
# ordering key; an ordered push subscription calls `enqueue`; the head message
# of each room is sent to WhatsApp and a Cloud Tasks timer is armed for its
# ack timeout (`timeout`); WhatsApp's signed status webhooks reach `webhook`.
# Room state lives in Firestore. Delivery events go to Cloud Logging, and a
# sink copies them to Cloud Storage for the PySpark analytics on Dataproc
# Serverless.

data "google_project" "this" {
  project_id = var.project_id
}

locals {
  functions = toset(["enqueue", "webhook", "timeout"])

  # Cloud Run gives every service a deterministic URL,
  # https://SERVICE-PROJECT_NUMBER.REGION.run.app
  # (https://cloud.google.com/run/docs/triggering/https-request#deterministic).
  # Every function, `timeout` itself included (it arms resend timers), needs
  # the URL of `timeout`; computing it here avoids a dependency cycle.
  timeout_url = "https://${var.name_prefix}-timeout-${data.google_project.this.number}.${var.region}.run.app/"

  tasks_queue_prefix = "${var.name_prefix}-ack-timeouts"

  # Settings read by shared/config.py, the same on every function.
  function_env = {
    GOOGLE_CLOUD_PROJECT     = var.project_id
    FIRESTORE_DATABASE       = google_firestore_database.main.name
    TASKS_LOCATION           = var.region
    TASKS_QUEUE_PREFIX       = local.tasks_queue_prefix
    TASKS_QUEUE_COUNT        = tostring(var.tasks_queue_count)
    TIMEOUT_URL              = local.timeout_url
    TASKS_SERVICE_ACCOUNT    = google_service_account.tasks_invoker.email
    ACK_TIMEOUT_MS           = tostring(var.ack_timeout_ms)
    SEND_TIMEOUT_MS          = tostring(var.send_timeout_ms)
    MAX_SEND_ATTEMPTS        = tostring(var.max_send_attempts)
    SEND_RETRY_BASE_MS       = tostring(var.send_retry_base_ms)
    DEDUP_WINDOW             = tostring(var.dedup_window)
    MAX_PENDING_BYTES        = tostring(var.max_pending_bytes)
    RETENTION_HOURS          = tostring(var.retention_hours)
    WHATSAPP_API_BASE        = var.whatsapp_api_base
    WHATSAPP_API_VERSION     = var.whatsapp_api_version
    WHATSAPP_PHONE_NUMBER_ID = var.whatsapp_phone_number_id
    PUBSUB_TOPIC             = google_pubsub_topic.outbound.name
    # Read by functions-framework, not by baton: gunicorn threads per instance.
    THREADS = tostring(var.function_threads)
  }
}

resource "google_project_service" "apis" {
  for_each = toset([
    "artifactregistry.googleapis.com", # Cloud Functions 2nd gen stores built images here
    "cloudbuild.googleapis.com",       # builds the functions from the source archive
    "cloudfunctions.googleapis.com",
    "cloudtasks.googleapis.com",
    "dataproc.googleapis.com", # Dataproc Serverless batches of the analytics pipeline
    "firebaserules.googleapis.com",
    "firestore.googleapis.com",
    "iam.googleapis.com",
    "logging.googleapis.com",
    "pubsub.googleapis.com",
    "run.googleapis.com", # 2nd gen functions run as Cloud Run services
    "secretmanager.googleapis.com",
    "storage.googleapis.com",
  ])
  project = var.project_id
  service = each.value

  disable_on_destroy = false
}
