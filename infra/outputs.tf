output "webhook_url" {
  description = "Paste into the Meta app dashboard (WhatsApp > Configuration > Webhook > Callback URL)."
  value       = google_cloudfunctions2_function.fn["webhook"].service_config[0].uri
}

output "topic" {
  description = "Name of the Pub/Sub topic producers publish outbound messages to (ordering key = room id)."
  value       = google_pubsub_topic.outbound.name
}

output "topic_id" {
  description = "Full resource name of the outbound topic (projects/PROJECT/topics/NAME), for producers in other projects."
  value       = google_pubsub_topic.outbound.id
}

output "dead_letter_subscription" {
  description = "Ordered push subscription that delivers the pushes which failed dead_letter_max_attempts times to the deadletter function, which parks each in its room."
  value       = google_pubsub_subscription.push["deadletter"].name
}

output "sweep_job" {
  description = "Cloud Scheduler job that calls the sweep function (the watchdog) every minute; `gcloud scheduler jobs run NAME --location=REGION` runs it at once."
  value       = google_cloud_scheduler_job.sweep.name
}

output "timeout_url" {
  description = "Deterministic URL of the timeout function that Cloud Tasks calls (TIMEOUT_URL)."
  value       = local.timeout_url
}

output "prepare_url" {
  description = "Deterministic URL of the prepare function that Cloud Tasks calls (PREPARE_URL)."
  value       = local.prepare_url
}

output "source_bucket" {
  description = "Bucket of the functions' source archives."
  value       = google_storage_bucket.bucket["source"].name
}

output "delivery_log_bucket" {
  description = "Bucket the Logging sink writes the delivery events to (LOG_BUCKET of make report-cloud)."
  value       = google_storage_bucket.bucket["delivery-log"].name
}

output "analytics_bucket" {
  description = "Bucket of the pipeline's staged code and output (REPORT_BUCKET of make report-cloud)."
  value       = google_storage_bucket.bucket["analytics"].name
}

output "analytics_service_account" {
  description = "Service account for Dataproc Serverless batches (DATAPROC_SA of make report-cloud)."
  value       = google_service_account.dataproc.email
}

output "analytics_subnet" {
  description = "Subnet with Private Google Access for Dataproc Serverless batches (DATAPROC_SUBNET of make report-cloud)."
  value       = google_compute_subnetwork.analytics.name
}

output "secret_ids" {
  description = "Secrets to add a version to before the functions can start (env var -> secret id)."
  value       = { for env, s in google_secret_manager_secret.platform : env => s.secret_id }
}

output "firestore_database" {
  description = "Firestore database of this deployment (FIRESTORE_DATABASE)."
  value       = google_firestore_database.main.name
}

output "status_topic" {
  description = "Status queue topic the webhook publishes to in queued mode (STATUS_TOPIC)."
  value       = google_pubsub_topic.statuses.name
}

output "status_error_queue" {
  description = "Pull subscription of the status error queue that `baton statuses list|replay` reads (kept 7 days, acked messages too)."
  value       = google_pubsub_subscription.statuses_error_queue.name
}

output "tasks_queues" {
  description = "Cloud Tasks queues: the active ones (TASKS_QUEUE_COUNT) first, then the retired ones still draining."
  value       = { active = [for q in slice(google_cloud_tasks_queue.ack_timeouts, 0, local.tasks_queue_count) : q.name], retired = [for q in slice(google_cloud_tasks_queue.ack_timeouts, local.tasks_queue_count, length(google_cloud_tasks_queue.ack_timeouts)) : q.name] }
}

output "prepare_queues" {
  description = "Cloud Tasks queues of the prepare tasks: the active ones (PREPARE_QUEUE_COUNT) first, then the retired ones still draining."
  value       = { active = [for q in slice(google_cloud_tasks_queue.prepare, 0, local.prepare_queue_count) : q.name], retired = [for q in slice(google_cloud_tasks_queue.prepare, local.prepare_queue_count, length(google_cloud_tasks_queue.prepare)) : q.name] }
}

output "inbound_topic" {
  description = "Topic the webhook forwards the posts baton does not consume to (INBOUND_TOPIC): subscribe the company's webhook consumer here."
  value       = google_pubsub_topic.inbound.name
}

output "outcomes_topic" {
  description = "Topic of the delivery outcomes (OUTCOMES_TOPIC), ordering key = room id; published when publish_outcomes is true."
  value       = google_pubsub_topic.outcomes.name
}
