# Ack-timeout and resend timers. One queue dispatches at most 500 tasks/s
# (https://cloud.google.com/tasks/docs/quotas), so rooms are spread over
# tasks_queue_count queues by a hash of the room id (shared/tasks.py).
# A deleted queue's name cannot be reused for 7 days.
resource "google_cloud_tasks_queue" "ack_timeouts" {
  count    = var.tasks_queue_count
  name     = "${local.tasks_queue_prefix}-${count.index}"
  location = var.region

  rate_limits {
    max_dispatches_per_second = 500
    max_concurrent_dispatches = 1000
  }

  # A timer whose call failed (timeout unavailable) is retried; the function
  # applies a timer only to the exact attempt it was made for, so a retry or a
  # duplicate is harmless.
  retry_config {
    max_attempts       = 20
    min_backoff        = "0.5s"
    max_backoff        = "30s"
    max_doublings      = 5
    max_retry_duration = "3600s"
  }

  depends_on = [google_project_service.apis]
}
