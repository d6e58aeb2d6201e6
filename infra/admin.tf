# The admin function: every listing and action of the `baton` CLI runs here,
# with this deployment's settings (local.function_env: the index shards, the
# queues, the topics) and the platform tokens (Secret Manager), for a caller
# whose Google identity it verifies (shared/admin/identity.py) and records
# as the actor. The platform tokens never leave Google Cloud; an operator's
# laptop holds no setting and no secret.
#
#   baton --project P --region R --name-prefix N ...
#     --POST, the operator's Google ID token--> N-admin (this file)
#        Cloud Run IAM: roles/run.invoker for var.operators only
#        the function: verifies the token again, runs the action
#
# Private: no allUsers or allAuthenticatedUsers grant; reachable from the
# internet (an operator's laptop) but only with an invoker's token.
#
# The operators' console (docs/console.md) is this same function under
# /console/ (shared/console/): the same IAM (var.operators), the same token
# check and audit, the same actions. A browser reaches it through
# `baton console`, a proxy on the operator's 127.0.0.1 that adds their
# Google ID token; there is no other console service and nothing public.

locals {
  # The deterministic Cloud Run URL (main.tf explains it) and the
  # cloudfunctions.net URL the CLI derives from project, region and prefix
  # (baton_cli/main.py): both are audiences the function accepts.
  admin_url    = "https://${var.name_prefix}-admin-${data.google_project.this.number}.${var.region}.run.app"
  admin_cf_url = "https://${var.region}-${var.project_id}.cloudfunctions.net/${var.name_prefix}-admin"
  # What the function checks itself, besides IAM: the listed people and
  # service accounts (shared/config.py ADMIN_ENV_VARS); groups and domains
  # are IAM's alone.
  admin_checked_operators = [for m in var.operators : m if startswith(m, "user:") || startswith(m, "serviceAccount:")]
  admin_env = merge(local.function_env, {
    ADMIN_AUTH      = "google"
    ADMIN_OPERATORS = length(local.admin_checked_operators) == length(var.operators) ? join(",", local.admin_checked_operators) : ""
    ADMIN_AUDIENCES = join(",", concat([local.admin_url, local.admin_cf_url, "${local.admin_cf_url}/"], var.admin_token_audiences))
  })
  admin_secrets = [for n in local.sending_secrets : n if contains(keys(local.secrets), n)]
}

resource "google_service_account" "admin" {
  account_id   = "${var.name_prefix}-fn-admin"
  display_name = "baton (${var.name_prefix}): the admin function"
  description  = "Runs the operators' listings and actions (baton CLI) with this deployment's settings."
}

resource "google_cloudfunctions2_function" "admin" {
  # checkov:skip=CKV_GCP_124:operators call it from their own machines over the internet; Cloud Run IAM (roles/run.invoker for var.operators only) and the function's own token check keep it private
  name     = "${var.name_prefix}-admin"
  location = var.region
  labels   = var.labels

  build_config {
    runtime         = "python311"
    entry_point     = "admin"
    service_account = google_service_account.build.id
    source {
      storage_source {
        bucket = google_storage_bucket.bucket["source"].name
        object = google_storage_bucket_object.source.name
      }
    }
  }

  service_config {
    service_account_email = google_service_account.admin.email
    available_memory      = var.function_memory
    available_cpu         = var.function_cpu
    timeout_seconds       = var.function_timeout_seconds
    # Operators, not traffic: one instance at most, none when idle.
    max_instance_request_concurrency = var.function_threads
    min_instance_count               = 0
    max_instance_count               = 1
    ingress_settings                 = "ALLOW_ALL"
    all_traffic_on_latest_revision   = true
    environment_variables            = local.admin_env

    # Resume, skip and redrive may send: the access tokens, as the other functions.
    dynamic "secret_environment_variables" {
      for_each = toset(local.admin_secrets)
      content {
        key        = secret_environment_variables.value
        project_id = var.project_id
        secret     = google_secret_manager_secret.platform[secret_environment_variables.value].secret_id
        version    = "latest"
      }
    }
  }

  depends_on = [google_project_service.apis, time_sleep.admin_grants_propagate]
}

# roles/run.invoker for each operator: Cloud Run refuses everyone else
# before the code runs (https://cloud.google.com/run/docs/authenticating/developers).
resource "google_cloud_run_service_iam_member" "operators_invoke_admin" {
  for_each   = toset(var.operators)
  project    = var.project_id
  location   = var.region
  service    = google_cloudfunctions2_function.admin.name
  role       = "roles/run.invoker"
  member     = each.value
  depends_on = [time_sleep.identities_propagate]
}

# ------------------------------------------------- what the function may do --

# roles/datastore.user on this deployment's database only: the rooms, dead
# letters, rejected pushes, scheduled cancellations and the incident switch.
resource "google_project_iam_member" "admin_firestore" {
  project = var.project_id
  role    = "roles/datastore.user"
  member  = "serviceAccount:${google_service_account.admin.email}"

  condition {
    title       = "${var.name_prefix} database only"
    description = "Firestore database ${google_firestore_database.main.name} of this deployment"
    expression  = "resource.name == \"projects/${var.project_id}/databases/${google_firestore_database.main.name}\""
  }

  depends_on = [time_sleep.identities_propagate]
}

# roles/logging.viewer: `baton rooms show` reads a room's last delivery events.
resource "google_project_iam_member" "admin_reads_events" {
  project    = var.project_id
  role       = "roles/logging.viewer"
  member     = "serviceAccount:${google_service_account.admin.email}"
  depends_on = [time_sleep.identities_propagate]
}

# roles/cloudtasks.enqueuer on the ack-timeout and prepare queues: a resumed,
# skipped or redriven room may start a send and arm its timer, or ask for a
# preparation (the same room rules as every function).
resource "google_cloud_tasks_queue_iam_member" "admin_enqueuer" {
  for_each   = { for i in range(local.tasks_queue_count) : tostring(i) => i }
  project    = var.project_id
  location   = var.region
  name       = google_cloud_tasks_queue.ack_timeouts[each.value].name
  role       = "roles/cloudtasks.enqueuer"
  member     = "serviceAccount:${google_service_account.admin.email}"
  depends_on = [time_sleep.identities_propagate]
}

resource "google_cloud_tasks_queue_iam_member" "admin_prepare_enqueuer" {
  for_each   = { for i in range(local.prepare_queue_count) : tostring(i) => i }
  project    = var.project_id
  location   = var.region
  name       = google_cloud_tasks_queue.prepare[each.value].name
  role       = "roles/cloudtasks.enqueuer"
  member     = "serviceAccount:${google_service_account.admin.email}"
  depends_on = [time_sleep.identities_propagate]
}

# roles/cloudtasks.viewer on the scheduled queue: `baton scheduled list`
# lists its tasks.
resource "google_cloud_tasks_queue_iam_member" "admin_lists_scheduled" {
  project    = var.project_id
  location   = var.region
  name       = google_cloud_tasks_queue.scheduled.name
  role       = "roles/cloudtasks.viewer"
  member     = "serviceAccount:${google_service_account.admin.email}"
  depends_on = [time_sleep.identities_propagate]
}

# roles/cloudtasks.taskDeleter on the scheduled queue: `baton scheduled
# cancel` deletes the cancelled message's task.
resource "google_cloud_tasks_queue_iam_member" "admin_cancels_scheduled" {
  project    = var.project_id
  location   = var.region
  name       = google_cloud_tasks_queue.scheduled.name
  role       = "roles/cloudtasks.taskDeleter"
  member     = "serviceAccount:${google_service_account.admin.email}"
  depends_on = [time_sleep.identities_propagate]
}

# roles/iam.serviceAccountUser on the tasks identity: tasks carry its OIDC
# token, and creating one needs actAs on it.
resource "google_service_account_iam_member" "admin_acts_as_tasks_invoker" {
  service_account_id = google_service_account.tasks_invoker.name
  role               = "roles/iam.serviceAccountUser"
  member             = "serviceAccount:${google_service_account.admin.email}"
  depends_on         = [time_sleep.identities_propagate]
}

# roles/secretmanager.secretAccessor on the access tokens only: a send.
resource "google_secret_manager_secret_iam_member" "admin_reads" {
  for_each   = toset(local.admin_secrets)
  secret_id  = google_secret_manager_secret.platform[each.value].id
  role       = "roles/secretmanager.secretAccessor"
  member     = "serviceAccount:${google_service_account.admin.email}"
  depends_on = [time_sleep.identities_propagate]
}

# roles/pubsub.publisher: `baton rejects replay` publishes to the outbound
# topic; `baton statuses replay` to the statuses topic.
resource "google_pubsub_topic_iam_member" "admin_publishes" {
  for_each   = { outbound = google_pubsub_topic.outbound.id, statuses = google_pubsub_topic.statuses.id }
  topic      = each.value
  role       = "roles/pubsub.publisher"
  member     = "serviceAccount:${google_service_account.admin.email}"
  depends_on = [time_sleep.identities_propagate]
}

# roles/pubsub.subscriber on the error queue only: `baton statuses
# list|replay` pulls it (list releases what it pulled, replay acks what it
# published again).
resource "google_pubsub_subscription_iam_member" "admin_pulls_error_queue" {
  subscription = google_pubsub_subscription.statuses_error_queue.id
  role         = "roles/pubsub.subscriber"
  member       = "serviceAccount:${google_service_account.admin.email}"
  depends_on   = [time_sleep.identities_propagate]
}

# IAM grants take minutes to propagate (iam.tf, grants_propagate): the
# function's first instance and request wait for its own.
resource "time_sleep" "admin_grants_propagate" {
  create_duration = "120s"
  depends_on = [
    google_project_iam_member.build_builds_functions,
    google_project_iam_member.admin_firestore,
    google_project_iam_member.admin_reads_events,
    google_cloud_tasks_queue_iam_member.admin_enqueuer,
    google_cloud_tasks_queue_iam_member.admin_prepare_enqueuer,
    google_cloud_tasks_queue_iam_member.admin_lists_scheduled,
    google_cloud_tasks_queue_iam_member.admin_cancels_scheduled,
    google_service_account_iam_member.admin_acts_as_tasks_invoker,
    google_secret_manager_secret_iam_member.admin_reads,
    google_pubsub_topic_iam_member.admin_publishes,
    google_pubsub_subscription_iam_member.admin_pulls_error_queue,
  ]
}

output "admin_url" {
  description = "The admin function's URL: `baton --admin-url URL` (or BATON_ADMIN_URL); by default the CLI derives https://REGION-PROJECT.cloudfunctions.net/PREFIX-admin."
  value       = google_cloudfunctions2_function.admin.service_config[0].uri
}

output "console_command" {
  description = "How an operator opens the console (docs/console.md): a local proxy on 127.0.0.1 that adds their Google ID token; the pages are served by the admin function under /console/, for var.operators only."
  value       = "baton --admin-url ${google_cloudfunctions2_function.admin.service_config[0].uri} console"
}
