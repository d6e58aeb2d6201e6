# baton on Google Cloud, end to end:
#
#   producer --publish(ordering_key = room)--> Pub/Sub topic        (pubsub.tf)
#     --ordered push, OIDC--> function `enqueue`                    (functions.tf)
#        room state in Firestore                                    (firestore.tf)
#        send the room's head message to WhatsApp (secrets.tf), then
#        arm an ack timer in Cloud Tasks ----------> function `timeout` (tasks.tf)
#   WhatsApp --signed status webhook--> function `webhook` (public) --> next head
#     (webhook_mode = "queued": webhook --publish--> statuses topic --ordered
#      push, OIDC--> function `status` --> next head; errors --> error queue)
#   push failed dead_letter_max_attempts times --> dead-letter topic
#     --ordered push, OIDC--> function `deadletter`: parks it in its room (pubsub.tf)
#   Cloud Scheduler, every minute, OIDC --> function `sweep`: re-drives rooms
#     whose wake-up is overdue (the watchdog)                       (scheduler.tf)
#   a message with a `prepare` attribute (a media upload) --> prepare task
#     (Cloud Tasks, tasks.tf) --OIDC--> function `prepare`: uploads while the
#     messages ahead of it are sent, stores the result in its room
#   delivery events --Logging sink--> bucket --> PySpark on Dataproc Serverless
#                                                                   (analytics.tf)
# Identities and their roles: iam.tf. Buckets: storage.tf.
#
# A first `terraform apply` on a new project comes up in this order
# (docs/deploy.md, "The order things come up in"): the APIs; the Google
# service agents (google_project_service_identity) and baton's service
# accounts, then a wait while they propagate (time_sleep, iam.tf); the IAM
# grants, then a wait while those propagate; the functions; what needs a
# function's URL (push subscriptions, the scheduler job, invoker grants).
#
# No Eventarc: every function is an HTTP function (Pub/Sub pushes, Cloud
# Tasks and Cloud Scheduler call their URLs), so neither the Eventarc API nor
# its service agent is enabled or granted anything.

data "google_project" "this" {
  project_id = var.project_id
}

locals {
  # The HTTP entry points of functions/main.py; each is a function.
  functions = toset(["enqueue", "deadletter", "webhook", "status", "timeout", "sweep", "prepare"])

  # Relative to this module, so `terraform -chdir=infra` and `cd infra` agree.
  source_archive = coalesce(var.source_archive, "${path.module}/../dist/baton-functions.zip")

  # Every function needs the URL of `timeout` (every one may start a send and
  # arm its timer: enqueue, webhook, `timeout` itself for resends, sweep when
  # it re-drives a room, deadletter through the same rules), so taking it from
  # google_cloudfunctions2_function.fn["timeout"] would make that function
  # depend on itself: a cycle. Cloud Run gives every service a deterministic
  # URL, https://SERVICE-PROJECT_NUMBER.REGION.run.app
  # (https://cloud.google.com/run/docs/triggering/https-request#deterministic),
  # known before the function exists. No trailing slash: the code uses this
  # string as the OIDC audience too, and Cloud Run matches the service URL.
  timeout_url = "https://${var.name_prefix}-timeout-${data.google_project.this.number}.${var.region}.run.app"
  # The same for enqueue, which a scheduled message's task calls at its time.
  enqueue_url = "https://${var.name_prefix}-enqueue-${data.google_project.this.number}.${var.region}.run.app"
  # And for prepare, which every function that applies room transitions asks
  # for (prepare itself included): the same cycle otherwise.
  prepare_url = "https://${var.name_prefix}-prepare-${data.google_project.this.number}.${var.region}.run.app"

  tasks_queue_prefix   = "${var.name_prefix}-ack-timeouts"
  prepare_queue_prefix = "${var.name_prefix}-prepare"

  # The Cloud Run services of this deployment (a 2nd gen function runs as the
  # Cloud Run service of the same name). The delivery-event sink and the
  # _Default exclusion (analytics.tf) match these exact names, so two
  # deployments in one project never take each other's events; a prefix
  # match would not do ("baton-" also matches "baton-2-enqueue").
  # The admin function (admin.tf) logs the operators' actions on rooms as
  # delivery events too: the report's audit needs them.
  service_names          = [for f in sort(concat(tolist(local.functions), ["admin"])) : "${var.name_prefix}-${f}"]
  services_filter        = "resource.type=\"cloud_run_revision\" AND resource.labels.service_name=(${join(" OR ", [for n in local.service_names : "\"${n}\""])})"
  delivery_events_filter = "${local.services_filter} AND jsonPayload.log_type=\"baton.delivery\""
  # Cloud Run writes one request log entry per invocation.
  request_logs_filter = "${local.services_filter} AND logName=\"projects/${var.project_id}/logs/run.googleapis.com%2Frequests\""

  # The settings shared/config.py reads (ENV_VARS), the same on every
  # function. Secrets are not here: secrets.tf mounts them from Secret
  # Manager. tests/infra checks this map against ENV_VARS both ways.
  function_env = {
    GOOGLE_CLOUD_PROJECT       = var.project_id
    FIRESTORE_DATABASE         = google_firestore_database.main.name
    TASKS_LOCATION             = var.region
    TASKS_QUEUE_PREFIX         = local.tasks_queue_prefix
    TASKS_QUEUE_COUNT          = tostring(local.tasks_queue_count)
    TIMEOUT_URL                = local.timeout_url
    ENQUEUE_URL                = local.enqueue_url
    SCHEDULED_QUEUE            = google_cloud_tasks_queue.scheduled.name
    TASKS_SERVICE_ACCOUNT      = google_service_account.tasks_invoker.email
    ACK_TIMEOUT_MS             = tostring(var.ack_timeout_ms)
    SEND_TIMEOUT_MS            = tostring(var.send_timeout_ms)
    SEND_START_DEADLINE_MS     = tostring(var.send_start_deadline_ms)
    FIRST_TIMER_SLACK_MS       = tostring(var.first_timer_slack_ms)
    QUIET_EVENTS               = var.quiet_events
    MAX_SEND_ATTEMPTS          = tostring(var.max_send_attempts)
    SEND_RETRY_BASE_MS         = tostring(var.send_retry_base_ms)
    DEDUP_RETENTION            = tostring(var.dedup_retention)
    MAX_QUEUED_MESSAGES        = tostring(var.max_queued_messages)
    MAX_ROOM_BYTES             = tostring(var.max_room_bytes)
    WATCHDOG_GRACE_MS          = tostring(var.watchdog_grace_ms)
    SWEEP_BATCH_SIZE           = tostring(var.sweep_batch_size)
    SWEEP_CONCURRENCY          = tostring(var.sweep_concurrency)
    SWEEP_BUDGET_S             = tostring(var.sweep_budget_s)
    SWEEP_REREAD_S             = tostring(var.sweep_reread_s)
    INDEX_SHARDS               = tostring(var.index_shards)
    RETENTION_HOURS            = tostring(var.retention_hours)
    WHATSAPP_API_BASE          = var.whatsapp_api_base
    WHATSAPP_API_VERSION       = var.whatsapp_api_version
    WHATSAPP_PHONE_NUMBER_ID   = var.whatsapp_phone_number_id
    WHATSAPP_SENDERS           = var.whatsapp_senders
    WHATSAPP_SENDER_RATE       = tostring(var.whatsapp_sender_rate)
    WHATSAPP_SENT_PROOF        = var.whatsapp_sent_proof
    PROVIDERS                  = join(",", var.platforms)
    MESSENGER_PAGE_ID          = var.messenger_page_id
    INSTAGRAM_ACCOUNT_ID       = var.instagram_account_id
    ACK_LEVEL_WHATSAPP         = var.ack_levels["whatsapp"]
    ACK_LEVEL_MESSENGER        = var.ack_levels["messenger"]
    ACK_LEVEL_INSTAGRAM        = var.ack_levels["instagram"]
    WATERMARK_MARGIN_MS        = tostring(var.watermark_margin_ms)
    PACE_INTERVAL_MS_WHATSAPP  = tostring(var.pacing["whatsapp"].interval_ms)
    PACE_BURST_WHATSAPP        = tostring(var.pacing["whatsapp"].burst)
    PACE_INTERVAL_MS_MESSENGER = tostring(var.pacing["messenger"].interval_ms)
    PACE_BURST_MESSENGER       = tostring(var.pacing["messenger"].burst)
    PACE_INTERVAL_MS_INSTAGRAM = tostring(var.pacing["instagram"].interval_ms)
    PACE_BURST_INSTAGRAM       = tostring(var.pacing["instagram"].burst)
    PUBSUB_TOPIC               = google_pubsub_topic.outbound.name
    WEBHOOK_MODE               = var.webhook_mode
    STATUS_TOPIC               = google_pubsub_topic.statuses.name
    STATUS_MAX_ATTEMPTS        = tostring(var.status_max_attempts)
    INBOUND_TOPIC              = google_pubsub_topic.inbound.name
    OUTCOMES                   = var.publish_outcomes ? "on" : "off"
    OUTCOMES_TOPIC             = google_pubsub_topic.outcomes.name
    PREPARE_AHEAD              = tostring(var.prepare_ahead)
    PREPARE_TIMEOUT_MS         = tostring(var.prepare_timeout_ms)
    MAX_PREPARE_ATTEMPTS       = tostring(var.max_prepare_attempts)
    PREPARE_RETRY_BASE_MS      = tostring(var.prepare_retry_base_ms)
    PREPARE_POISON             = var.prepare_poison
    PREPARE_QUEUE_PREFIX       = local.prepare_queue_prefix
    PREPARE_QUEUE_COUNT        = tostring(local.prepare_queue_count)
    PREPARE_URL                = local.prepare_url
    MEDIA_MAX_BYTES            = tostring(var.media_max_bytes)
    MEDIA_TIMEOUT_MS           = tostring(var.media_timeout_ms)
    SEQUENCE_GAP_TIMEOUT_MS    = tostring(var.sequence_gap_timeout_ms)
    # Read by functions-framework, not by baton: gunicorn threads per
    # instance, kept equal to the instance's request concurrency.
    THREADS = tostring(var.function_threads)
  }
}

resource "google_project_service" "apis" {
  for_each = toset([
    "artifactregistry.googleapis.com",     # 2nd gen functions keep their built images here
    "cloudbuild.googleapis.com",           # builds the functions from the source archive
    "cloudfunctions.googleapis.com",       # the seven functions
    "cloudresourcemanager.googleapis.com", # project number and project-level IAM grants
    "cloudscheduler.googleapis.com",       # the watchdog's every-minute call of `sweep`
    "cloudtasks.googleapis.com",           # ack-timeout and resend timers, prepare tasks
    "compute.googleapis.com",              # the analytics subnet (Dataproc Serverless needs a VPC)
    "dataproc.googleapis.com",             # Dataproc Serverless batches of the analytics pipeline
    "firebaserules.googleapis.com",        # Firestore security rules
    "firestore.googleapis.com",            # room state
    "iam.googleapis.com",                  # service accounts
    "logging.googleapis.com",              # the delivery-event sink
    "monitoring.googleapis.com",           # the dashboard and the alert policies (operations.tf)
    "pubsub.googleapis.com",               # outbound topic, ordered push, dead letters
    "run.googleapis.com",                  # 2nd gen functions run as Cloud Run services
    "secretmanager.googleapis.com",        # WhatsApp credentials
    "storage.googleapis.com",              # source archive, event log and analytics buckets
  ])
  project = var.project_id
  service = each.value

  # Other workloads in the project may use these APIs: destroying baton
  # must not switch them off.
  disable_on_destroy = false
}
