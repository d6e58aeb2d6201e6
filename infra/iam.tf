# One service account per function, one for Pub/Sub push, one for Cloud Tasks
# and one for Dataproc batches, each with only the roles it needs.

resource "google_service_account" "function" {
  for_each     = local.functions
  account_id   = "${var.name_prefix}-fn-${each.key}"
  display_name = "baton ${each.key} function"
}

resource "google_service_account" "pubsub_push" {
  account_id   = "${var.name_prefix}-pubsub-push"
  display_name = "baton Pub/Sub push identity (invokes enqueue)"
}

resource "google_service_account" "tasks_invoker" {
  account_id   = "${var.name_prefix}-tasks-invoker"
  display_name = "baton Cloud Tasks identity (invokes timeout)"
}

resource "google_service_account" "dataproc" {
  account_id   = "${var.name_prefix}-analytics"
  display_name = "baton delivery analytics (Dataproc Serverless)"
}

# roles/datastore.user: read and write the room documents. Firestore has no
# finer-grained role for the server libraries than the database level.
resource "google_project_iam_member" "function_firestore" {
  for_each = local.functions
  project  = var.project_id
  role     = "roles/datastore.user"
  member   = "serviceAccount:${google_service_account.function[each.key].email}"
}

# roles/cloudtasks.enqueuer on each queue only: every function arms timers
# (enqueue and webhook start sends; timeout arms resend timers).
resource "google_cloud_tasks_queue_iam_member" "function_enqueuer" {
  for_each = { for pair in setproduct(tolist(local.functions), range(var.tasks_queue_count)) : "${pair[0]}-${pair[1]}" => pair }
  project  = var.project_id
  location = var.region
  name     = google_cloud_tasks_queue.ack_timeouts[each.value[1]].name
  role     = "roles/cloudtasks.enqueuer"
  member   = "serviceAccount:${google_service_account.function[each.value[0]].email}"
}

# roles/iam.serviceAccountUser on the Cloud Tasks identity: creating a task
# whose OIDC token is minted for that account needs actAs on it.
resource "google_service_account_iam_member" "function_acts_as_tasks_invoker" {
  for_each           = local.functions
  service_account_id = google_service_account.tasks_invoker.name
  role               = "roles/iam.serviceAccountUser"
  member             = "serviceAccount:${google_service_account.function[each.key].email}"
}

# roles/run.invoker on `enqueue` only: Pub/Sub push calls it with an OIDC token.
resource "google_cloud_run_service_iam_member" "pubsub_invokes_enqueue" {
  project  = var.project_id
  location = var.region
  service  = google_cloudfunctions2_function.fn["enqueue"].name
  role     = "roles/run.invoker"
  member   = "serviceAccount:${google_service_account.pubsub_push.email}"
}

# roles/run.invoker on `timeout` only: Cloud Tasks calls it with an OIDC token.
resource "google_cloud_run_service_iam_member" "tasks_invoke_timeout" {
  project  = var.project_id
  location = var.region
  service  = google_cloudfunctions2_function.fn["timeout"].name
  role     = "roles/run.invoker"
  member   = "serviceAccount:${google_service_account.tasks_invoker.email}"
}

# `webhook` is public: Meta cannot present a Google identity. Every request is
# checked against X-Hub-Signature-256 (HMAC-SHA256 with the app secret) instead.
resource "google_cloud_run_service_iam_member" "public_webhook" {
  # checkov:skip=CKV_GCP_102:Meta's status webhooks cannot carry a Google identity; the function refuses any request without a valid X-Hub-Signature-256
  project  = var.project_id
  location = var.region
  service  = google_cloudfunctions2_function.fn["webhook"].name
  role     = "roles/run.invoker"
  member   = "allUsers"
}

locals {
  pubsub_service_agent = "serviceAccount:service-${data.google_project.this.number}@gcp-sa-pubsub.iam.gserviceaccount.com"
}

# roles/iam.serviceAccountTokenCreator for the Pub/Sub service agent on the
# push identity: Pub/Sub mints the push's OIDC token as that account.
resource "google_service_account_iam_member" "pubsub_agent_mints_push_tokens" {
  service_account_id = google_service_account.pubsub_push.name
  role               = "roles/iam.serviceAccountTokenCreator"
  member             = local.pubsub_service_agent
}

# roles/dataproc.worker: what a Dataproc Serverless batch's own identity needs.
resource "google_project_iam_member" "dataproc_worker" {
  project = var.project_id
  role    = "roles/dataproc.worker"
  member  = "serviceAccount:${google_service_account.dataproc.email}"
}
