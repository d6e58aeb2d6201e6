# Pub/Sub and Cloud Tasks (pubsub.tf, tasks.tf): push deadlines, dead
# letters, the timer queues, and who may publish.

variable "push_ack_deadline_seconds" {
  description = "Seconds Pub/Sub waits for enqueue's (and deadletter's) answer before it redelivers the push (10..600); at least function_timeout_seconds."
  type        = number
  default     = 60

  validation {
    condition     = var.push_ack_deadline_seconds >= 10 && var.push_ack_deadline_seconds <= 600
    error_message = "push_ack_deadline_seconds must be 10..600 (Pub/Sub's limits)."
  }
}

variable "dead_letter_max_attempts" {
  description = "Push deliveries of one Pub/Sub message to enqueue before it goes to the dead-letter topic, where deadletter parks it in its room (5..100). 100, the maximum: with back-off up to 600 s, a room under back-pressure is retried for hours, not dead-lettered in minutes."
  type        = number
  default     = 100

  validation {
    condition     = var.dead_letter_max_attempts >= 5 && var.dead_letter_max_attempts <= 100
    error_message = "dead_letter_max_attempts must be 5..100 (Pub/Sub's limits)."
  }
}

variable "tasks_queue_count" {
  description = "Number of ack-timeout Cloud Tasks queues the functions write to (TASKS_QUEUE_COUNT). One queue dispatches at most 500 tasks/s; the code spreads rooms over the queues by a hash of the room id. Unset (null): derived from target_peak_messages_per_s (scale.tf). To lower it, keep the old queues as tasks_queues_retired until they are empty (docs/deploy.md, \"Fewer timer queues\")."
  type        = number
  default     = null

  validation {
    condition     = var.tasks_queue_count == null || (coalesce(var.tasks_queue_count, 1) >= 1 && coalesce(var.tasks_queue_count, 1) == floor(coalesce(var.tasks_queue_count, 1)))
    error_message = "tasks_queue_count must be a whole number, 1 or more (modules/sizing holds every queue count, set or derived, to Cloud Tasks' 1,000 queues per region)."
  }
}

variable "tasks_queues_retired" {
  description = "Queues kept after the tasks_queue_count active ones, written to by nobody, so the timers already scheduled on them still fire. Set it to the old count minus the new one when lowering tasks_queue_count, apply, wait until those queues are empty, then set it back to 0."
  type        = number
  default     = 0

  validation {
    condition     = var.tasks_queues_retired >= 0 && var.tasks_queues_retired <= 999 && var.tasks_queues_retired == floor(var.tasks_queues_retired)
    error_message = "tasks_queues_retired must be a whole number 0..999."
  }
}

variable "outbound_publishers" {
  description = "IAM principals (serviceAccount:..., group:..., user:..., principal://..., principalSet://...) that may publish to the outbound topic: the producers. Empty: only project-level roles can publish."
  type        = list(string)
  default     = []

  validation {
    condition     = alltrue([for m in var.outbound_publishers : can(regex("^(serviceAccount|group|user|domain|principal|principalSet):", m))])
    error_message = "outbound_publishers entries must be IAM principals such as serviceAccount:producer@PROJECT.iam.gserviceaccount.com (allUsers and allAuthenticatedUsers are refused)."
  }
}
