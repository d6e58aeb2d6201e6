# Ack-timeout and resend timers: after each send the code creates a task
# that calls `timeout` (TIMEOUT_URL) at now + ACK_TIMEOUT_MS, with an OIDC
# token of the tasks identity. One queue dispatches at most 500 tasks/s
# (https://cloud.google.com/tasks/docs/quotas), so rooms are spread over
# tasks_queue_count queues, PREFIX-0 .. PREFIX-(N-1), by a hash of the room
# id (shared/tasks.py). A deleted queue's name cannot be reused for 7 days.
#
# Lowering tasks_queue_count must not drop the timers already scheduled on
# the queues it removes: a room whose timer is lost waits for the watchdog.
# So the queues beyond the active ones can be kept as tasks_queues_retired:
# the functions stop writing to them (TASKS_QUEUE_COUNT, and their enqueuer
# grants go), their timers still fire, and once they are empty the next
# apply with tasks_queues_retired = 0 deletes them. A queue that still holds
# tasks is never deleted: the destroy-time check below fails the apply
# instead, naming the queue (docs/deploy.md, "Fewer timer queues").
resource "google_cloud_tasks_queue" "ack_timeouts" {
  count    = local.tasks_queue_count + var.tasks_queues_retired
  name     = "${local.tasks_queue_prefix}-${count.index}"
  location = var.region

  rate_limits {
    max_dispatches_per_second = 500
    # Bounds the load a timer burst puts on `timeout` (and its instances).
    max_concurrent_dispatches = 1000
  }

  # A timer task is never dropped: max_attempts = -1 and
  # max_retry_duration = "0s" both mean unlimited
  # (https://cloud.google.com/tasks/docs/reference/rest/v2/projects.locations.queues#RetryConfig).
  # A dropped timer would leave its room with nothing to wake it; the
  # watchdog's sweep (scheduler.tf) would find the room only after
  # watchdog_grace_ms more. The watchdog is a backstop, not the plan. A
  # failed call (timeout unavailable, cold start, a 503 asking for a retry)
  # is retried quickly at first, since a late timer holds its room, then at
  # most every 60 s. `timeout` applies a timer only to the exact (room
  # incarnation, message, attempt) it was made for, so retries and
  # duplicates are harmless.
  retry_config {
    max_attempts       = -1
    min_backoff        = "0.5s"
    max_backoff        = "60s"
    max_doublings      = 5
    max_retry_duration = "0s"
  }

  # Refuse to delete a queue that still holds timers (on a shrink, a
  # replacement, or `terraform destroy`): list one task, and fail if there is
  # one, or if the listing fails. Needs gcloud on the applying machine, like
  # the rest of the guide.
  provisioner "local-exec" {
    when    = destroy
    command = "tasks=$(gcloud tasks list --queue=${self.name} --location=${self.location} --project=${self.project} --limit=1 --format='value(name)') || exit 1; [ -z \"$tasks\" ] || { echo \"queue ${self.name} still holds timers: keep it as tasks_queues_retired until it is empty (docs/deploy.md)\" >&2; exit 1; }"
  }

  depends_on = [google_project_service.apis]
}

# Scheduled messages (`deliver_at` / `delay_s`, shared/scheduled.py) wait
# here as tasks that bring their push envelope back to `enqueue` at their
# time. A queue holds any number of tasks; it dispatches at most 500 a second
# (https://cloud.google.com/tasks/docs/quotas): the bound on how many
# scheduled messages may come due in the same second. Retried like the
# timers, without limit: a task dropped would lose its message.
resource "google_cloud_tasks_queue" "scheduled" {
  name     = "${var.name_prefix}-scheduled"
  location = var.region

  rate_limits {
    max_dispatches_per_second = 500
    max_concurrent_dispatches = 1000
  }

  retry_config {
    max_attempts       = -1
    min_backoff        = "1s"
    max_backoff        = "300s"
    max_doublings      = 8
    max_retry_duration = "0s"
  }

  depends_on = [google_project_service.apis]
}

# Prepare tasks (shared/prepare.py): a message with a `prepare` attribute (a
# media upload to the platform) is prepared while the messages ahead of it are
# sent. Every function that applies room transitions may ask for one (a
# `Prepare` effect): a task that calls `prepare` (PREPARE_URL) with an OIDC
# token of the tasks identity, on PREFIX-0 .. PREFIX-(N-1); a room's
# consecutive messages go to consecutive queues. The same shrink rule as the
# timer queues: lowering prepare_queue_count keeps the old queues as
# prepare_queues_retired until they are empty (docs/deploy.md, "Fewer timer
# queues"). A lost prepare task loses no message (the head of line asks again
# after PREPARE_TIMEOUT_MS), but it costs its room that wait and one of
# MAX_PREPARE_ATTEMPTS, so a queue holding tasks is not deleted either.
resource "google_cloud_tasks_queue" "prepare" {
  count    = local.prepare_queue_count + var.prepare_queues_retired
  name     = "${local.prepare_queue_prefix}-${count.index}"
  location = var.region

  rate_limits {
    # The service's maximum per queue (https://cloud.google.com/tasks/docs/quotas).
    max_dispatches_per_second = 500
    # A preparation waits on its upload (~1 s, at most media_timeout_ms), so
    # the tasks in flight are about the dispatch rate times that: 500 at 1 s,
    # more when the platform slows down. 5,000 is the service's maximum
    # (https://cloud.google.com/tasks/docs/reference/rest/v2/projects.locations.queues#RateLimits):
    # thousands of rooms preparing prepare_ahead messages each are bounded by
    # the dispatch rate, not by this. What `prepare` cannot take at once
    # (max_instances x function_threads) is answered 429 and retried below.
    max_concurrent_dispatches = 5000
  }

  # `prepare` answers 2xx whenever the room took the outcome, a failed upload
  # included (the room retries that with PREPARE_RETRY_BASE_MS and then
  # applies PREPARE_POISON). A 5xx or 429 means Firestore, the platform or
  # the function itself could not be reached: retried without limit
  # (max_attempts = -1, max_retry_duration = "0s", RetryConfig in the page
  # above), from 1 s, doubling up to 60 s apart, so an outage of minutes is
  # ridden out and the upload is ready when the room gets there. So a task
  # whose message has ended meanwhile must be answered 2xx (nothing to do),
  # or it would come back once a minute for ever.
  retry_config {
    max_attempts       = -1
    min_backoff        = "1s"
    max_backoff        = "60s"
    max_doublings      = 6
    max_retry_duration = "0s"
  }

  # Refuse to delete a queue that still holds prepare tasks, as for the
  # timer queues above.
  provisioner "local-exec" {
    when    = destroy
    command = "tasks=$(gcloud tasks list --queue=${self.name} --location=${self.location} --project=${self.project} --limit=1 --format='value(name)') || exit 1; [ -z \"$tasks\" ] || { echo \"queue ${self.name} still holds prepare tasks: keep it as prepare_queues_retired until it is empty (docs/deploy.md)\" >&2; exit 1; }"
  }

  depends_on = [google_project_service.apis]
}
