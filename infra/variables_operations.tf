# Alerts (operations.tf): who they notify and their thresholds.

variable "alert_notification_channels" {
  description = "Notification channel ids (projects/P/notificationChannels/N) the alert policies notify; empty: alerts show in the console only."
  type        = list(string)
  default     = []
}

variable "alert_watchdog_rescues" {
  description = "Watchdog rescues in 10 minutes above which the watchdog alert fires (a few are normal after an outage)."
  type        = number
  default     = 5
}

variable "alert_timed_out_share" {
  description = "Share (0-1) of ended messages that timed out over 15 minutes above which the timed-out alert fires."
  type        = number
  default     = 0.05
  validation {
    condition     = var.alert_timed_out_share > 0 && var.alert_timed_out_share < 1
    error_message = "alert_timed_out_share is a share between 0 and 1."
  }
}

variable "alert_oldest_unacked_s" {
  description = "Age in seconds of the oldest unacked message of the enqueue subscription above which its alert fires."
  type        = number
  default     = 300
}

variable "alert_function_5xx_per_s" {
  description = "5xx answers per second of any baton function (5-minute rate) above which the 5xx alert fires."
  type        = number
  default     = 0.1
}
