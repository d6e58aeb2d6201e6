# Delivery settings (shared/config.py, docs/configuration.md): ack and send
# timeouts, retries, de-duplication, the room's limits, the watchdog's sweep
# and the rooms' retention.

variable "ack_timeout_ms" {
  description = "ACK_TIMEOUT_MS: ms after a send with no delivery webhook before the message counts as sent (timed out) and the room moves on."
  type        = number
  default     = 3000

  validation {
    condition     = var.ack_timeout_ms >= 1 && var.ack_timeout_ms <= 2592000000
    error_message = "ack_timeout_ms must be 1..2592000000 (a timer task is scheduled at most 30 days ahead)."
  }
}

variable "send_timeout_ms" {
  description = "SEND_TIMEOUT_MS: ms the HTTP send call to the platform may take; must be below ack_timeout_ms."
  type        = number
  default     = 2000

  validation {
    condition     = var.send_timeout_ms >= 1
    error_message = "send_timeout_ms must be at least 1."
  }
}

variable "quiet_events" {
  description = "QUIET_EVENTS: event lines not written, as `event` or `event:reason`, comma-separated (e.g. \"status_ignored:sent_status,timeout_ignored\": about one line per message less, docs/event-log.md). Empty: every line."
  type        = string
  default     = ""
}

variable "first_timer_slack_ms" {
  description = "FIRST_TIMER_SLACK_MS: ms added to an attempt's first timer past decision + ACK_TIMEOUT_MS. 0: due at the earliest possible deadline (a send that returned later re-arms it); a slack saves those second timers and adds its length to every timeout."
  type        = number
  default     = 0

  validation {
    condition     = var.first_timer_slack_ms >= 0
    error_message = "first_timer_slack_ms must be at least 0."
  }
}

variable "send_start_deadline_ms" {
  description = "SEND_START_DEADLINE_MS: ms after the room's decision by which a send call must have started; a later one is not made (the attempt counts as refused and is retried)."
  type        = number
  default     = 2000

  validation {
    condition     = var.send_start_deadline_ms >= 1
    error_message = "send_start_deadline_ms must be at least 1."
  }
}

variable "max_send_attempts" {
  description = "MAX_SEND_ATTEMPTS: send attempts of one message before baton dead-letters it."
  type        = number
  default     = 5

  validation {
    condition     = var.max_send_attempts >= 1
    error_message = "max_send_attempts must be at least 1."
  }
}

variable "send_retry_base_ms" {
  description = "SEND_RETRY_BASE_MS: ms before the first resend after a transient platform error (x4 per attempt)."
  type        = number
  default     = 1000

  validation {
    condition     = var.send_retry_base_ms >= 1
    error_message = "send_retry_base_ms must be at least 1."
  }
}

variable "dedup_retention" {
  description = "DEDUP_RETENTION: ended message ids remembered per room to recognise a Pub/Sub redelivery, besides every message the room holds."
  type        = number
  default     = 1000

  validation {
    condition     = var.dedup_retention >= 1
    error_message = "dedup_retention must be at least 1."
  }
}

variable "max_queued_messages" {
  description = "MAX_QUEUED_MESSAGES: messages a room may hold before enqueue pushes back with 503 (Pub/Sub redelivers the push later)."
  type        = number
  default     = 1000

  validation {
    condition     = var.max_queued_messages >= 1
    error_message = "max_queued_messages must be at least 1."
  }
}

variable "max_room_bytes" {
  description = "MAX_ROOM_BYTES: Firestore storage size (bytes) of a room document before enqueue pushes back with 503; at most 1048576 (Firestore's 1 MiB document limit)."
  type        = number
  default     = 900000

  validation {
    condition     = var.max_room_bytes >= 1 && var.max_room_bytes <= 1048576
    error_message = "max_room_bytes must be 1..1048576: a room document cannot exceed Firestore's 1 MiB."
  }
}

variable "watchdog_grace_ms" {
  description = "WATCHDOG_GRACE_MS: ms a room's wake-up (wake_at_us) may be overdue before the every-minute watchdog sweep re-drives the room. A room with a lost timer waits at most about this plus one minute."
  type        = number
  default     = 60000

  validation {
    condition     = var.watchdog_grace_ms >= 1
    error_message = "watchdog_grace_ms must be at least 1."
  }
}

variable "sweep_concurrency" {
  description = "SWEEP_CONCURRENCY: rooms one watchdog sweep re-drives at a time (threads of the sweep function). 48: about 160 rescues/s while a call works, 120/s over its 45 s of each minute (docs/scale.md)."
  type        = number
  default     = 48

  validation {
    condition     = var.sweep_concurrency >= 1 && var.sweep_concurrency <= 64
    error_message = "sweep_concurrency must be from 1 to 64."
  }
}

variable "sweep_budget_s" {
  description = "SWEEP_BUDGET_S: s one watchdog sweep works before it leaves the rest for the next minute's; below function_timeout_seconds."
  type        = number
  default     = 45

  validation {
    condition     = var.sweep_budget_s >= 1
    error_message = "sweep_budget_s must be at least 1."
  }
}

variable "sweep_reread_s" {
  description = "SWEEP_REREAD_S: s back a watchdog sweep looks for rooms earlier sweeps left idle, to read them again and log the lines a dead sweep left (shared/outbox.py); a few sweep intervals."
  type        = number
  default     = 180

  validation {
    condition     = var.sweep_reread_s >= 1
    error_message = "sweep_reread_s must be at least 1."
  }
}

variable "sweep_batch_size" {
  description = "SWEEP_BATCH_SIZE: overdue rooms one query of the watchdog sweep takes up, oldest first; it queries again until none is left or sweep_budget_s is spent."
  type        = number
  default     = 500

  validation {
    condition     = var.sweep_batch_size >= 1
    error_message = "sweep_batch_size must be at least 1."
  }
}

variable "retention_hours" {
  description = "RETENTION_HOURS: hours after their last change that Firestore documents expire (TTL deletes them within about 24 h after that)."
  type        = number
  default     = 48

  validation {
    condition     = var.retention_hours >= 1
    error_message = "retention_hours must be at least 1."
  }
}
