# The watchdog: every minute Cloud Scheduler calls `sweep`, which finds the
# rooms whose stored wake-up (`wake_at_us`) is overdue by more than
# watchdog_grace_ms and re-drives them (at most sweep_batch_size a call,
# oldest first). A room waits on its timer task; this only catches the rare
# room whose timer could not be armed or was lost. The local stack runs the
# same sweep in a loop instead (tools/local/sweeper.py, started by tools/local/stack.py:
# a POST to `sweep` every 60 s by default).
resource "google_cloud_scheduler_job" "sweep" {
  name        = "${var.name_prefix}-sweep"
  description = "baton watchdog: re-drives rooms whose wake-up is overdue"
  region      = var.region
  schedule    = "* * * * *"
  time_zone   = "Etc/UTC"
  # The sweep's request may run as long as the function allows; Cloud
  # Scheduler accepts 15 s to 30 min for HTTP targets.
  attempt_deadline = "${var.function_timeout_seconds}s"

  http_target {
    http_method = "POST"
    uri         = google_cloudfunctions2_function.fn["sweep"].service_config[0].uri
    # Authenticated call: sweep is not public; its invoker is this identity.
    oidc_token {
      service_account_email = google_service_account.scheduler.email
      audience              = google_cloudfunctions2_function.fn["sweep"].service_config[0].uri
    }
  }

  # A failed sweep (503 while Firestore is unreachable, a cold start) is
  # retried twice, 5 s and 10 s later. Retries that run into the next
  # scheduled time make Cloud Scheduler skip it, which is harmless: every
  # sweep looks at every overdue room afresh, and two sweeps at once are
  # harmless too (each room changes only through its own transaction).
  retry_config {
    retry_count          = 2
    min_backoff_duration = "5s"
    max_backoff_duration = "20s"
    max_doublings        = 2
  }

  # function_timeout_seconds is validated to 15..1800 (variables_functions.tf), Cloud
  # Scheduler's limits for an HTTP target's attempt deadline.
  depends_on = [google_project_service.apis, google_cloud_run_service_iam_member.scheduler_invokes_sweep]
}
