# Logs and analytics (analytics.tf, storage.tf): the delivery events' sink
# and buckets, what the _Default log bucket keeps, and Dataproc's subnet.

variable "log_retention_days" {
  description = "Days the delivery-event files are kept in the log bucket."
  type        = number
  default     = 90

  validation {
    condition     = var.log_retention_days >= 1
    error_message = "log_retention_days must be at least 1."
  }
}

variable "noncurrent_version_days" {
  description = "Days an overwritten or deleted object stays recoverable in the versioned buckets before it is removed."
  type        = number
  default     = 7

  validation {
    condition     = var.noncurrent_version_days >= 1
    error_message = "noncurrent_version_days must be at least 1."
  }
}

variable "keep_delivery_events_in_default_bucket" {
  description = "Also keep the delivery events in the _Default log bucket (Logs Explorer, `gcloud logging read`, billed per GiB ingested: docs/cost.md). false: only the sink's bucket keeps them (hourly files, about an hour behind); the log-based metrics and alerts still count them."
  type        = bool
  default     = true
}

variable "keep_routine_statuses_in_default_bucket" {
  description = "Also keep the routine status lines in the _Default log bucket: `status_ignored` with reason `sent_status` (WhatsApp's `sent`, one a message) or `after_acked` (a status after the message's ack, such as `read`), about a third of the delivery events (docs/cost.md). false: only the sink's bucket keeps them (the analytics read them there); Logs Explorer shows every line that changed a room, and the log-based metrics still count them. Moot when keep_delivery_events_in_default_bucket is false."
  type        = bool
  default     = false
}

variable "keep_relogged_events_in_default_bucket" {
  description = "Also keep the re-logged delivery event lines in the _Default log bucket: those marked `\"relogged\": true`, which a room's outbox logs again for an earlier write of the room (shared/outbox.py; most are a second copy of a line already there, about 1.3 a message: docs/cost.md). false: only the sink's bucket keeps them (the analytics keep one line per room and event id there); Logs Explorer then shows each line once, except a line whose process died between its commit and its logging, which only the sink's bucket has. Moot when keep_delivery_events_in_default_bucket is false."
  type        = bool
  default     = false
}

variable "keep_request_logs_in_default_bucket" {
  description = "Keep Cloud Run's request logs of the seven functions (one entry per invocation) in the _Default log bucket, billed per GiB ingested (docs/cost.md). false: dropped there; the request metrics (run.googleapis.com/request_count, request_latencies), the alerts on them and the functions' own logs stay."
  type        = bool
  default     = false
}

variable "analytics_subnet_cidr" {
  description = "IP range of the subnet Dataproc Serverless batches run in (private IPs only; the workers reach Google APIs by Private Google Access)."
  type        = string
  default     = "10.90.0.0/24"

  validation {
    condition     = can(cidrhost(var.analytics_subnet_cidr, 0))
    error_message = "analytics_subnet_cidr must be an IPv4 CIDR range."
  }
}
