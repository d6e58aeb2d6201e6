# Identities, one per caller, each holding only what it needs. Every role
# below says what it is for. The IAM grants that belong to one resource
# (secrets, buckets, topics) sit beside that resource. Every grant waits for
# time_sleep.identities_propagate, and every function for
# time_sleep.grants_propagate (bottom of this file), so one `terraform apply`
# works on a new project.

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

# The identity Cloud Tasks presents (OIDC) when it calls `timeout`, `prepare`
# and (scheduled messages) `enqueue` (TASKS_SERVICE_ACCOUNT: the code names it
# on every task it creates).
resource "google_service_account" "tasks_invoker" {
  account_id   = "${var.name_prefix}-tasks-invoker"
  display_name = "baton Cloud Tasks identity (invokes timeout, prepare, enqueue)"
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

# ---------------------------------------------------------- service agents --

# Google's own identities in this project, created up front: a service agent
# may not exist right after its API is enabled (some are made on first use),
# and a grant that names a missing one fails the apply with "Service account
# ... does not exist". generateServiceIdentity creates it and returns its
# email (https://cloud.google.com/service-usage/docs/reference/rest/v1beta1/services/generateServiceIdentity).
# - pubsub: forwards dead letters and mints the push identity's OIDC tokens;
# - cloudtasks: mints the OIDC token of every timer and prepare task (tasks_invoker);
# - cloudscheduler: mints the sweep job's OIDC token (scheduler);
# - run: the Cloud Run service agent pulls the functions' images;
# - dataproc: runs the analytics batches.
resource "google_project_service_identity" "agent" {
  provider   = google-beta
  for_each   = toset(["pubsub.googleapis.com", "cloudtasks.googleapis.com", "cloudscheduler.googleapis.com", "run.googleapis.com", "dataproc.googleapis.com"])
  project    = var.project_id
  service    = each.value
  depends_on = [google_project_service.apis]
}

locals {
  pubsub_service_agent    = google_project_service_identity.agent["pubsub.googleapis.com"].member
  tasks_service_agent     = google_project_service_identity.agent["cloudtasks.googleapis.com"].member
  scheduler_service_agent = google_project_service_identity.agent["cloudscheduler.googleapis.com"].member

  # What each function's code touches (shared/service/). In queued mode
  # the webhook only checks signatures and publishes, "without touching
  # Firestore": no Firestore, no Cloud Tasks, no send token for it then.
  stateless_functions = { direct = [], queued = ["webhook"] }
  stateful_functions  = setsubtract(local.functions, local.stateless_functions[var.webhook_mode])
}

# The provider documents that "creation of service accounts is eventually
# consistent, and that can lead to errors when you try to apply ACLs to
# service accounts immediately after creation"
# (https://registry.terraform.io/providers/hashicorp/google/6.50.0/docs/resources/google_service_account),
# and a service agent made by generateServiceIdentity takes a while to be
# known to IAM as well. Every grant below waits this long after them.
resource "time_sleep" "identities_propagate" {
  create_duration = "60s"
  depends_on = [
    google_project_service_identity.agent,
    google_service_account.function,
    google_service_account.pubsub_push,
    google_service_account.tasks_invoker,
    google_service_account.scheduler,
    google_service_account.build,
    google_service_account.dataproc,
    google_service_account.admin, # admin.tf
    # The sink's writer identity is made with the sink (analytics.tf).
    google_logging_project_sink.delivery_events,
  ]
}

# roles/iam.serviceAccountTokenCreator for the Pub/Sub service agent on the
# push identity only: Pub/Sub mints the push's OIDC token as that account
# (needed by projects created before April 2021, harmless after).
resource "google_service_account_iam_member" "pubsub_agent_mints_push_tokens" {
  service_account_id = google_service_account.pubsub_push.name
  role               = "roles/iam.serviceAccountTokenCreator"
  member             = local.pubsub_service_agent
  depends_on         = [time_sleep.identities_propagate]
}

# roles/iam.serviceAccountTokenCreator for the Cloud Tasks service agent on
# the tasks identity only: it mints each timer task's OIDC token as that
# account (granted through roles/cloudtasks.serviceAgent in new projects;
# explicit here for older ones, on this one account).
resource "google_service_account_iam_member" "tasks_agent_mints_timer_tokens" {
  service_account_id = google_service_account.tasks_invoker.name
  role               = "roles/iam.serviceAccountTokenCreator"
  member             = local.tasks_service_agent
  depends_on         = [time_sleep.identities_propagate]
}

# roles/iam.serviceAccountTokenCreator for the Cloud Scheduler service agent
# on the scheduler identity only: it mints the sweep call's OIDC token
# (https://cloud.google.com/scheduler/docs/http-target-auth).
resource "google_service_account_iam_member" "scheduler_agent_mints_sweep_tokens" {
  service_account_id = google_service_account.scheduler.name
  role               = "roles/iam.serviceAccountTokenCreator"
  member             = local.scheduler_service_agent
  depends_on         = [time_sleep.identities_propagate]
}

# ---------------------------------------------------------------- functions --

# roles/datastore.user: read and write room documents (every function that
# applies room events; sweep also runs the watchdog's query on
# `wake_at_us`), on this deployment's database only: Firestore checks IAM
# conditions on the database name
# (https://cloud.google.com/firestore/docs/security/iam#iam_conditions), so a
# second deployment's functions in the same project cannot reach this one's.
resource "google_project_iam_member" "function_firestore" {
  for_each = local.stateful_functions
  project  = var.project_id
  role     = "roles/datastore.user"
  member   = "serviceAccount:${google_service_account.function[each.key].email}"

  condition {
    title       = "${var.name_prefix} database only"
    description = "Firestore database ${google_firestore_database.main.name} of this deployment"
    expression  = "resource.name == \"projects/${var.project_id}/databases/${google_firestore_database.main.name}\""
  }

  depends_on = [time_sleep.identities_propagate]
}

# roles/cloudtasks.enqueuer on each active ack-timeout queue, not the
# project: every function that applies room events arms timers. enqueue and
# webhook (direct mode) and status start sends (each with its ack timer);
# timeout arms resend timers and the rest of an early timer; sweep re-drives
# overdue rooms, which resends or arms a new wake-up; prepare applies a
# finished preparation, which may start the head's send. deadletter only parks a
# message, and a parked message at the head blocks its room rather than
# starting a send; but parking runs through the same room rules and effect
# runner as every other event, so any timer those rules decide there must be
# armable: without the grant, arming would fail, the push would be answered
# 503 and retried until someone noticed. Retired queues (tasks.tf) get no
# grant: nobody writes to them.
# Why one grant per queue and function (several hundred at scale) and not one
# project-level roles/cloudtasks.enqueuer with an IAM condition on the queue
# name (resource.name.startsWith(local.tasks_queue_prefix)): resource
# attributes in IAM Conditions are recognised only for the services listed on
# https://cloud.google.com/iam/docs/conditions-resource-attributes ("Other
# services and resource types do not recognize resource attributes"), and
# cloudtasks.googleapis.com is not among them. Such a condition would not
# narrow the grant as written; unconditioned, the functions could write to
# every queue of the project, another deployment's included.
resource "google_cloud_tasks_queue_iam_member" "function_enqueuer" {
  for_each   = { for pair in setproduct(tolist(local.stateful_functions), range(local.tasks_queue_count)) : "${pair[0]}-${pair[1]}" => pair }
  project    = var.project_id
  location   = var.region
  name       = google_cloud_tasks_queue.ack_timeouts[each.value[1]].name
  role       = "roles/cloudtasks.enqueuer"
  member     = "serviceAccount:${google_service_account.function[each.value[0]].email}"
  depends_on = [time_sleep.identities_propagate]
}

# roles/cloudtasks.enqueuer on each active prepare queue, for the same
# functions and for the same reason: a `Prepare` effect (a message with a
# `prepare` attribute entering the window of PREPARE_AHEAD behind the head,
# a failed preparation's retry, the head asking again after
# PREPARE_TIMEOUT_MS) comes out of the room rules that every one of them
# applies, `prepare` itself included (a finished preparation moves the
# window on). Without the grant the request is refused, the room's event is
# answered 5xx and retried. No taskDeleter here: nothing deletes a prepare
# task (a stale one is answered and dropped). Retired prepare queues get no
# grant.
resource "google_cloud_tasks_queue_iam_member" "function_prepare_enqueuer" {
  for_each   = { for pair in setproduct(tolist(local.stateful_functions), range(local.prepare_queue_count)) : "${pair[0]}-${pair[1]}" => pair }
  project    = var.project_id
  location   = var.region
  name       = google_cloud_tasks_queue.prepare[each.value[1]].name
  role       = "roles/cloudtasks.enqueuer"
  member     = "serviceAccount:${google_service_account.function[each.value[0]].email}"
  depends_on = [time_sleep.identities_propagate]
}

# roles/cloudtasks.enqueuer on the scheduled queue, for enqueue only: it holds
# a message published with a later `deliver_at` as a task there (a hop that
# comes early is held again by the same function).
resource "google_cloud_tasks_queue_iam_member" "enqueue_holds_scheduled" {
  project    = var.project_id
  location   = var.region
  name       = google_cloud_tasks_queue.scheduled.name
  role       = "roles/cloudtasks.enqueuer"
  member     = "serviceAccount:${google_service_account.function["enqueue"].email}"
  depends_on = [time_sleep.identities_propagate]
}

# roles/cloudtasks.taskDeleter on the same queues: an attempt that ends before
# its timer is due (an ack, mostly) deletes that timer's task (shared/tasks.py,
# TimerScheduler.cancel), saving its dispatch and a `timeout` call
# (docs/cost.md). Without the grant the delete is refused and the timer fires
# and is ignored, as before: nothing breaks.
resource "google_cloud_tasks_queue_iam_member" "function_task_deleter" {
  for_each   = { for pair in setproduct(tolist(local.stateful_functions), range(local.tasks_queue_count)) : "${pair[0]}-${pair[1]}" => pair }
  project    = var.project_id
  location   = var.region
  name       = google_cloud_tasks_queue.ack_timeouts[each.value[1]].name
  role       = "roles/cloudtasks.taskDeleter"
  member     = "serviceAccount:${google_service_account.function[each.value[0]].email}"
  depends_on = [time_sleep.identities_propagate]
}

# roles/iam.serviceAccountUser on the Cloud Tasks identity only: creating a
# task whose OIDC token is minted as that account needs actAs on it (the
# functions that arm timers, as just above).
resource "google_service_account_iam_member" "function_acts_as_tasks_invoker" {
  for_each           = local.stateful_functions
  service_account_id = google_service_account.tasks_invoker.name
  role               = "roles/iam.serviceAccountUser"
  member             = "serviceAccount:${google_service_account.function[each.key].email}"
  depends_on         = [time_sleep.identities_propagate]
}

# ---------------------------------------------------------------- invokers --

# roles/run.invoker on each internal function, for the one identity that
# calls it with an OIDC token: Pub/Sub's push identity for enqueue (the
# outbound topic), deadletter (the dead-letter topic) and status (the status
# queue); the tasks identity for timeout and prepare; the scheduler identity
# for sweep.
# (2nd gen functions are Cloud Run services of the same name; run.invoker is
# the role Cloud Run checks.)
resource "google_cloud_run_service_iam_member" "pubsub_invokes_enqueue" {
  project    = var.project_id
  location   = var.region
  service    = google_cloudfunctions2_function.fn["enqueue"].name
  role       = "roles/run.invoker"
  member     = "serviceAccount:${google_service_account.pubsub_push.email}"
  depends_on = [time_sleep.identities_propagate]
}

resource "google_cloud_run_service_iam_member" "pubsub_invokes_deadletter" {
  project    = var.project_id
  location   = var.region
  service    = google_cloudfunctions2_function.fn["deadletter"].name
  role       = "roles/run.invoker"
  member     = "serviceAccount:${google_service_account.pubsub_push.email}"
  depends_on = [time_sleep.identities_propagate]
}

resource "google_cloud_run_service_iam_member" "pubsub_invokes_status" {
  project    = var.project_id
  location   = var.region
  service    = google_cloudfunctions2_function.fn["status"].name
  role       = "roles/run.invoker"
  member     = "serviceAccount:${google_service_account.pubsub_push.email}"
  depends_on = [time_sleep.identities_propagate]
}

resource "google_cloud_run_service_iam_member" "scheduler_invokes_sweep" {
  project    = var.project_id
  location   = var.region
  service    = google_cloudfunctions2_function.fn["sweep"].name
  role       = "roles/run.invoker"
  member     = "serviceAccount:${google_service_account.scheduler.email}"
  depends_on = [time_sleep.identities_propagate]
}

# The tasks identity also calls enqueue: a scheduled message's task at its time.
resource "google_cloud_run_service_iam_member" "tasks_invoke_enqueue" {
  project    = var.project_id
  location   = var.region
  service    = google_cloudfunctions2_function.fn["enqueue"].name
  role       = "roles/run.invoker"
  member     = "serviceAccount:${google_service_account.tasks_invoker.email}"
  depends_on = [time_sleep.identities_propagate]
}

resource "google_cloud_run_service_iam_member" "tasks_invoke_timeout" {
  project    = var.project_id
  location   = var.region
  service    = google_cloudfunctions2_function.fn["timeout"].name
  role       = "roles/run.invoker"
  member     = "serviceAccount:${google_service_account.tasks_invoker.email}"
  depends_on = [time_sleep.identities_propagate]
}

# The tasks identity calls prepare: the prepare tasks (tasks.tf), and nothing
# else does.
resource "google_cloud_run_service_iam_member" "tasks_invoke_prepare" {
  project    = var.project_id
  location   = var.region
  service    = google_cloudfunctions2_function.fn["prepare"].name
  role       = "roles/run.invoker"
  member     = "serviceAccount:${google_service_account.tasks_invoker.email}"
  depends_on = [time_sleep.identities_propagate]
}

# The webhook is public, since Meta cannot present a Google identity; the
# function authenticates every POST itself (X-Hub-Signature-256,
# HMAC-SHA256 with the app secret) and the GET handshake with the verify
# token. Cloud Run documents two ways
# (https://cloud.google.com/run/docs/authenticating/public), chosen by
# webhook_public_access:
# - "all_users": roles/run.invoker for allUsers on `webhook` only. An
#   organisation policy with Domain Restricted Sharing
#   (constraints/iam.allowedPolicyMemberDomains) refuses this grant.
resource "google_cloud_run_service_iam_member" "public_webhook" {
  # checkov:skip=CKV_GCP_102:Meta's webhooks cannot carry a Google identity; the function rejects any POST without a valid X-Hub-Signature-256
  count      = var.webhook_public_access == "all_users" ? 1 : 0
  project    = var.project_id
  location   = var.region
  service    = google_cloudfunctions2_function.fn["webhook"].name
  role       = "roles/run.invoker"
  member     = "allUsers"
  depends_on = [time_sleep.identities_propagate]
}

# - "invoker_iam_check_disabled": the webhook's Cloud Run service skips the
#   invoker IAM check, which is what Cloud Run recommends where Domain
#   Restricted Sharing applies; no IAM policy names allUsers. The functions
#   API has no such setting, so Terraform runs the documented gcloud command
#   on the applying machine after each deployment of the webhook (a new
#   revision of the function may rewrite its service).
resource "terraform_data" "webhook_invoker_iam_check_disabled" {
  count            = var.webhook_public_access == "invoker_iam_check_disabled" ? 1 : 0
  triggers_replace = [google_cloudfunctions2_function.fn["webhook"].update_time]

  provisioner "local-exec" {
    command = "gcloud run services update ${google_cloudfunctions2_function.fn["webhook"].name} --project=${var.project_id} --region=${var.region} --no-invoker-iam-check --quiet"
  }
}

# -------------------------------------------------------------------- build --

# Cloud Build runs the function builds as google_service_account.build with
# roles/run.builder, "exactly what building a Cloud Run function needs"
# (https://cloud.google.com/run/docs/reference/iam/roles): push and pull
# images in Artifact Registry, write build logs (logging.logEntries.create;
# it reads no logs), and storage.objects.get, which project-wide would read
# every bucket, the delivery events included. The condition keeps the
# storage part to the two buckets a build reads: the functions' source
# archives and the bucket the functions service copies them to,
# gcf-v2-sources-PROJECT_NUMBER-REGION. Other services' permissions in the
# role are not storage.googleapis.com and pass the condition.
resource "google_project_iam_member" "build_builds_functions" {
  project = var.project_id
  role    = "roles/run.builder"
  member  = "serviceAccount:${google_service_account.build.email}"

  condition {
    title       = "function sources only"
    description = "Cloud Storage only in the source buckets of the function builds"
    expression = join(" || ", concat(["resource.service != \"storage.googleapis.com\""], flatten([
      for bucket in [google_storage_bucket.bucket["source"].name, "gcf-v2-sources-${data.google_project.this.number}-${var.region}"] : [
        "resource.name == \"projects/_/buckets/${bucket}\"",
        "resource.name.startsWith(\"projects/_/buckets/${bucket}/\")",
      ]
    ])))
  }

  depends_on = [time_sleep.identities_propagate]
}

# ---------------------------------------------------------------- analytics --

# roles/dataproc.worker: what a Dataproc Serverless batch's own identity
# must hold (https://cloud.google.com/dataproc-serverless/docs/concepts/service-account).
# Google's role also reads and writes objects project-wide (for the staging
# buckets Dataproc creates itself); the condition takes the source and
# delivery-log buckets out of it, so a batch can neither replace the
# functions' code nor rewrite the event log. analytics.tf grants what the
# batch does use on those two buckets (read the events, write its output).
resource "google_project_iam_member" "dataproc_worker" {
  project = var.project_id
  role    = "roles/dataproc.worker"
  member  = "serviceAccount:${google_service_account.dataproc.email}"

  condition {
    title       = "not the source or delivery-log bucket"
    description = "Dataproc worker without Cloud Storage access to baton's source and delivery-log buckets"
    expression = join(" || ", ["resource.service != \"storage.googleapis.com\"", format("!(%s)", join(" || ", flatten([
      for bucket in [google_storage_bucket.bucket["source"].name, google_storage_bucket.bucket["delivery-log"].name] : [
        "resource.name == \"projects/_/buckets/${bucket}\"",
        "resource.name.startsWith(\"projects/_/buckets/${bucket}/\")",
      ]
    ])))])
  }

  depends_on = [time_sleep.identities_propagate]
}

# ------------------------------------------------------------ propagation --

# IAM grants take effect after a delay, "typically 2 minutes, sometimes 7
# minutes or more" (https://cloud.google.com/iam/docs/access-change-propagation).
# A build, a first instance (secrets) or a first request (Firestore, Cloud
# Tasks) that comes before its grant fails the apply or the first messages, so
# the functions wait this long after the grants they use. (Pushes refused
# later, while a new grant propagates, are retried by Pub/Sub with back-off.)
resource "time_sleep" "grants_propagate" {
  create_duration = "120s"
  depends_on = [
    google_project_iam_member.build_builds_functions,
    google_project_iam_member.function_firestore,
    google_cloud_tasks_queue_iam_member.function_enqueuer,
    google_cloud_tasks_queue_iam_member.function_prepare_enqueuer,
    google_cloud_tasks_queue_iam_member.function_task_deleter,
    google_cloud_tasks_queue_iam_member.enqueue_holds_scheduled,
    google_service_account_iam_member.function_acts_as_tasks_invoker,
    google_secret_manager_secret_iam_member.function_reads,
    google_pubsub_topic_iam_member.webhook_publishes_statuses,
    google_pubsub_topic_iam_member.webhook_publishes_inbound,
    google_pubsub_topic_iam_member.functions_publish_outcomes,
    google_service_account_iam_member.tasks_agent_mints_timer_tokens,
    google_service_account_iam_member.pubsub_agent_mints_push_tokens,
    google_service_account_iam_member.scheduler_agent_mints_sweep_tokens,
  ]
}
