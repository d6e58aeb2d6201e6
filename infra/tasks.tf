# Ack-timeout and resend timers: after each send the code creates a task
# that calls `timeout` (TIMEOUT_URL) at now + ACK_TIMEOUT_MS, with an OIDC
# token of the tasks identity. One queue dispatches at most 500 tasks/s
# (https://cloud.google.com/tasks/docs/quotas), so rooms are spread over
# tasks_queue_count queues, PREFIX-0 .. PREFIX-(N-1), by a hash of the room
# id (shared/tasks.py). A deleted queue's name cannot be reused for 7 days.
resource "google_cloud_tasks_queue" "ack_timeouts" {
  count    = var.tasks_queue_count
  name     = "${local.tasks_queue_prefix}-${count.index}"
  location = var.region

  rate_limits {
    max_dispatches_per_second = 500
    # Bounds the load a timer burst puts on `timeout` (and its instances).
    max_concurrent_dispatches = 1000
  }

  # A timer whose call failed (timeout unavailable, cold start) is retried
  # quickly at first: a late timer holds its room. `timeout` applies a timer
  # only to the exact (message, attempt) it was made for, so retries and
  # duplicates are harmless; after an hour the room's messages have expired
  # from the product's point of view anyway.
  retry_config {
    max_attempts       = 20
    min_backoff        = "0.5s"
    max_backoff        = "30s"
    max_doublings      = 5
    max_retry_duration = "3600s"
  }

  depends_on = [google_project_service.apis]
}
