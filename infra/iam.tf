# Identities, one per caller, each holding only what it needs. Every role
# below says what it is for. The IAM grants that belong to one resource
# (secrets, buckets, the dead-letter topic) sit beside that resource.

# ------------------------------------------------------- service accounts --

# One per function, so a function's grants (which secrets, which queues)
# never widen another's.
resource "google_service_account" "function" {
  for_each     = local.functions
  account_id   = "${var.name_prefix}-fn-${each.key}"
  display_name = "baton ${each.key} function"
  depends_on   = [google_project_service.apis]
}

# The identity Pub/Sub presents (OIDC) when it pushes to `enqueue` (the
# outbound topic) and to `deadletter` (the dead-letter topic).
resource "google_service_account" "pubsub_push" {
  account_id   = "${var.name_prefix}-pubsub-push"
  display_name = "baton Pub/Sub push identity (invokes enqueue, deadletter, status)"
  depends_on   = [google_project_service.apis]
}

# The identity Cloud Tasks presents (OIDC) when it calls `timeout`
# (TASKS_SERVICE_ACCOUNT: the code names it on every task it creates).
resource "google_service_account" "tasks_invoker" {
  account_id   = "${var.name_prefix}-tasks-invoker"
  display_name = "baton Cloud Tasks identity (invokes timeout)"
  depends_on   = [google_project_service.apis]
}

# The identity Cloud Scheduler presents (OIDC) when it calls `sweep` every
# minute (scheduler.tf). Google's Cloud Scheduler service agent mints the
# token; it holds roles/cloudscheduler.serviceAgent from the moment the API
# is enabled (https://cloud.google.com/scheduler/docs/http-target-auth), so
# nothing is granted to it here.
resource "google_service_account" "scheduler" {
  account_id   = "${var.name_prefix}-scheduler"
  display_name = "baton Cloud Scheduler identity (invokes sweep)"
  depends_on   = [google_project_service.apis]
}

# Cloud Build runs the functions' builds as this account. Since mid-2024 new
# projects give the default build identity too few rights to build a
# function, so a first deploy with the default fails; a dedicated one works
# everywhere (https://cloud.google.com/run/docs/configuring/services/build-service-account).
resource "google_service_account" "build" {
  account_id   = "${var.name_prefix}-build"
  display_name = "baton functions build (Cloud Build)"
  depends_on   = [google_project_service.apis]
}

# The identity of the Dataproc Serverless batches of the analytics pipeline.
resource "google_service_account" "dataproc" {
  account_id   = "${var.name_prefix}-analytics"
  display_name = "baton delivery analytics (Dataproc Serverless)"
  depends_on   = [google_project_service.apis]
}

# ---------------------------------------------------------------- functions --

# roles/datastore.user: read and write room documents (every function;
# sweep also runs the watchdog's query on `wake_at_us`). Firestore grants
# data access per database at the finest, and the functions own this
# database.
resource "google_project_iam_member" "function_firestore" {
  for_each = local.functions
  project  = var.project_id
  role     = "roles/datastore.user"
  member   = "serviceAccount:${google_service_account.function[each.key].email}"
}

# roles/cloudtasks.enqueuer on each ack-timeout queue, not the project: every
# function arms timers. enqueue and webhook start sends (each with its ack
# timer); timeout arms resend timers and the rest of an early timer; sweep
# re-drives overdue rooms, which resends or arms a new wake-up. deadletter
# only parks a message, and a parked message at the head blocks its room
# rather than starting a send; but parking runs through the same room rules
# and effect runner as every other event, so any timer those rules decide
# there must be armable: without the grant, arming would fail, the push would
# be answered 503 and retried until someone noticed. Same rights as enqueue,
# to be safe.
resource "google_cloud_tasks_queue_iam_member" "function_enqueuer" {
  for_each = { for pair in setproduct(tolist(local.functions), range(var.tasks_queue_count)) : "${pair[0]}-${pair[1]}" => pair }
  project  = var.project_id
  location = var.region
  name     = google_cloud_tasks_queue.ack_timeouts[each.value[1]].name
  role     = "roles/cloudtasks.enqueuer"
  member   = "serviceAccount:${google_service_account.function[each.value[0]].email}"
}

# roles/iam.serviceAccountUser on the Cloud Tasks identity only: creating a
# task whose OIDC token is minted as that account needs actAs on it (every
# function, for the reasons just above).
resource "google_service_account_iam_member" "function_acts_as_tasks_invoker" {
  for_each           = local.functions
  service_account_id = google_service_account.tasks_invoker.name
  role               = "roles/iam.serviceAccountUser"
  member             = "serviceAccount:${google_service_account.function[each.key].email}"
}

# ---------------------------------------------------------------- invokers --

# roles/run.invoker on `enqueue` only: Pub/Sub push calls it with an OIDC
# token of the push identity. (2nd gen functions are Cloud Run services of
# the same name; run.invoker is the role Cloud Run checks.)
resource "google_cloud_run_service_iam_member" "pubsub_invokes_enqueue" {
  project  = var.project_id
  location = var.region
  service  = google_cloudfunctions2_function.fn["enqueue"].name
  role     = "roles/run.invoker"
  member   = "serviceAccount:${google_service_account.pubsub_push.email}"
}

# roles/run.invoker on `deadletter` only: Pub/Sub pushes the dead-letter
# topic to it with an OIDC token of the same push identity.
resource "google_cloud_run_service_iam_member" "pubsub_invokes_deadletter" {
  project  = var.project_id
  location = var.region
  service  = google_cloudfunctions2_function.fn["deadletter"].name
  role     = "roles/run.invoker"
  member   = "serviceAccount:${google_service_account.pubsub_push.email}"
}

# roles/run.invoker on `status`: Pub/Sub pushes the statuses topic to it
# (webhook_mode = "queued") with an OIDC token of the same push identity.
resource "google_cloud_run_service_iam_member" "pubsub_invokes_status" {
  project  = var.project_id
  location = var.region
  service  = google_cloudfunctions2_function.fn["status"].name
  role     = "roles/run.invoker"
  member   = "serviceAccount:${google_service_account.pubsub_push.email}"
}

# roles/run.invoker on `sweep` only: Cloud Scheduler calls it every minute
# with an OIDC token of the scheduler identity.
resource "google_cloud_run_service_iam_member" "scheduler_invokes_sweep" {
  project  = var.project_id
  location = var.region
  service  = google_cloudfunctions2_function.fn["sweep"].name
  role     = "roles/run.invoker"
  member   = "serviceAccount:${google_service_account.scheduler.email}"
}

# roles/run.invoker on `timeout` only: Cloud Tasks calls it with an OIDC
# token of the tasks identity.
resource "google_cloud_run_service_iam_member" "tasks_invoke_timeout" {
  project  = var.project_id
  location = var.region
  service  = google_cloudfunctions2_function.fn["timeout"].name
  role     = "roles/run.invoker"
  member   = "serviceAccount:${google_service_account.tasks_invoker.email}"
}

# roles/run.invoker for allUsers on `webhook` only: Meta cannot present a
# Google identity. The function authenticates every POST itself
# (X-Hub-Signature-256, HMAC-SHA256 with the app secret) and the GET
# handshake with the verify token.
resource "google_cloud_run_service_iam_member" "public_webhook" {
  # checkov:skip=CKV_GCP_102:Meta's webhooks cannot carry a Google identity; the function rejects any POST without a valid X-Hub-Signature-256
  project  = var.project_id
  location = var.region
  service  = google_cloudfunctions2_function.fn["webhook"].name
  role     = "roles/run.invoker"
  member   = "allUsers"
}

# -------------------------------------------------------------------- build --

# roles/run.builder: exactly what building a Cloud Run function needs (read
# the staged source, push the image to Artifact Registry, write build logs).
resource "google_project_iam_member" "build_builds_functions" {
  project = var.project_id
  role    = "roles/run.builder"
  member  = "serviceAccount:${google_service_account.build.email}"
}

# ---------------------------------------------------------- service agents --

locals {
  # Google-managed identity of Pub/Sub in this project; it exists once the
  # API is enabled, hence the depends_on of the grants that name it.
  pubsub_service_agent = "serviceAccount:service-${data.google_project.this.number}@gcp-sa-pubsub.iam.gserviceaccount.com"
}

# roles/iam.serviceAccountTokenCreator for the Pub/Sub service agent on the
# push identity only: Pub/Sub mints the push's OIDC token as that account
# (needed by projects created before April 2021, harmless after).
resource "google_service_account_iam_member" "pubsub_agent_mints_push_tokens" {
  service_account_id = google_service_account.pubsub_push.name
  role               = "roles/iam.serviceAccountTokenCreator"
  member             = local.pubsub_service_agent
  depends_on         = [google_project_service.apis]
}

# ---------------------------------------------------------------- analytics --

# roles/dataproc.worker: what a Dataproc Serverless batch's own identity
# needs to run. Google's role also reads and writes objects project-wide (for
# the staging buckets Dataproc creates itself); analytics.tf still grants the
# two buckets the batch uses, so its needs stay visible and survive a
# narrower custom role.
resource "google_project_iam_member" "dataproc_worker" {
  project = var.project_id
  role    = "roles/dataproc.worker"
  member  = "serviceAccount:${google_service_account.dataproc.email}"
}
