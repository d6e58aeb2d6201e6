# The status webhook (functions.tf, pubsub.tf): how Meta reaches it, and
# whether it applies statuses itself or through the status queue.

variable "webhook_public_access" {
  description = "How the webhook is made public, since Meta cannot present a Google identity: \"all_users\" grants roles/run.invoker to allUsers; \"invoker_iam_check_disabled\" turns Cloud Run's invoker IAM check off on the webhook's service instead, for organisations whose Domain Restricted Sharing policy refuses allUsers (runs gcloud on the applying machine: docs/deploy.md)."
  type        = string
  default     = "all_users"

  validation {
    condition     = contains(["all_users", "invoker_iam_check_disabled"], var.webhook_public_access)
    error_message = "webhook_public_access must be all_users or invoker_iam_check_disabled."
  }
}

variable "webhook_mode" {
  description = "WEBHOOK_MODE: \"direct\" (the webhook applies statuses itself, the measured default: docs/architecture.md, Status webhooks) or \"queued\" (it publishes them to the statuses topic and answers; the `status` function applies them)."
  type        = string
  default     = "direct"

  validation {
    condition     = contains(["direct", "queued"], var.webhook_mode)
    error_message = "webhook_mode must be direct or queued."
  }
}

variable "status_max_attempts" {
  description = "STATUS_MAX_ATTEMPTS: failed deliveries of one status-queue message (errors other than transient ones) before the `status` function moves it to the error queue."
  type        = number
  default     = 5

  validation {
    condition     = var.status_max_attempts >= 1 && var.status_max_attempts <= 100
    error_message = "status_max_attempts must be 1..100."
  }
}

variable "status_dead_letter_max_attempts" {
  description = "Push deliveries of one status-queue message before Pub/Sub itself forwards it to the error queue (5..100): the last resort when the `status` function cannot be reached at all; above status_max_attempts so the function's own count, which keeps the error, comes first."
  type        = number
  default     = 100

  validation {
    condition     = var.status_dead_letter_max_attempts >= 5 && var.status_dead_letter_max_attempts <= 100
    error_message = "status_dead_letter_max_attempts must be 5..100 (Pub/Sub's limits)."
  }
}

# What baton tells the company's other services (topics_out.tf).
variable "publish_outcomes" {
  description = "OUTCOMES: publish each message's end (acked, timed out, failed, dead-lettered, skipped, cancelled) to the `name_prefix`-outcomes topic (true, the default) or not (false: the topic stays, nothing is published). Priced in `make cost` (docs/cost.md)."
  type        = bool
  default     = true
}
