variable "project_id" {
  description = "GCP project to deploy baton into."
  type        = string
}

variable "region" {
  description = "Region of the functions, the Cloud Tasks queues and the buckets."
  type        = string
  default     = "europe-west1"
}

variable "firestore_location" {
  description = "Firestore location (a region such as europe-west1, or a multi-region such as eur3)."
  type        = string
  default     = "europe-west1"
}

variable "name_prefix" {
  description = "Prefix of every resource name (lowercase letters, digits, hyphens)."
  type        = string
  default     = "baton"

  validation {
    condition     = can(regex("^[a-z][a-z0-9-]{1,20}$", var.name_prefix))
    error_message = "name_prefix: 2-21 characters, lowercase letters, digits and hyphens, starting with a letter."
  }
}

variable "labels" {
  description = "Labels put on every resource that takes them."
  type        = map(string)
  default     = { app = "baton" }
}

variable "source_archive" {
  description = "Path of the functions' source archive built by `make package`."
  type        = string
  default     = "../dist/baton-functions.zip"
}

variable "ack_timeout_ms" {
  description = "ACK_TIMEOUT_MS: ms after a send with no delivery webhook before the message counts as sent (timed out)."
  type        = number
  default     = 3000
}

variable "send_timeout_ms" {
  description = "SEND_TIMEOUT_MS: ms the HTTP send call to the platform may take; must be below ack_timeout_ms."
  type        = number
  default     = 2000
}

variable "max_send_attempts" {
  description = "MAX_SEND_ATTEMPTS: send attempts of one message before baton dead-letters it."
  type        = number
  default     = 5
}

variable "send_retry_base_ms" {
  description = "SEND_RETRY_BASE_MS: ms before the first resend after a transient platform error (x4 per attempt)."
  type        = number
  default     = 1000
}

variable "dedup_window" {
  description = "DEDUP_WINDOW: message ids remembered per room for de-duplication."
  type        = number
  default     = 1000
}

variable "max_pending_bytes" {
  description = "MAX_PENDING_BYTES: bytes of queued messages per room before enqueue pushes back with 503."
  type        = number
  default     = 600000
}

variable "retention_hours" {
  description = "RETENTION_HOURS: hours after their last change that Firestore documents expire (TTL deletes within ~24 h after)."
  type        = number
  default     = 48
}

variable "tasks_queue_count" {
  description = "Number of ack-timeout Cloud Tasks queues; one queue dispatches at most 500 tasks/s, rooms are spread by hash."
  type        = number
  default     = 2

  validation {
    condition     = var.tasks_queue_count >= 1 && var.tasks_queue_count <= 50
    error_message = "tasks_queue_count must be 1..50."
  }
}

variable "dead_letter_max_attempts" {
  description = "Push deliveries of one Pub/Sub message before it goes to the dead-letter topic (5..100)."
  type        = number
  default     = 10

  validation {
    condition     = var.dead_letter_max_attempts >= 5 && var.dead_letter_max_attempts <= 100
    error_message = "dead_letter_max_attempts must be 5..100 (Pub/Sub's limits)."
  }
}

variable "push_ack_deadline_seconds" {
  description = "Seconds Pub/Sub waits for enqueue's answer before it redelivers the push."
  type        = number
  default     = 60
}

variable "function_memory" {
  description = "Memory of each function instance (Cloud Run syntax, e.g. 512Mi)."
  type        = string
  default     = "512Mi"
}

variable "function_cpu" {
  description = "vCPUs of each function instance."
  type        = string
  default     = "1"
}

variable "function_threads" {
  description = "THREADS: requests one instance serves at once (functions-framework's gunicorn threads and the instance's concurrency)."
  type        = number
  default     = 8
}

variable "function_timeout_seconds" {
  description = "Request timeout of each function, s."
  type        = number
  default     = 60
}

variable "min_instances" {
  description = "Minimum instances per function (enqueue, webhook, timeout): warm instances avoid cold starts on the hand-over path."
  type        = map(number)
  default     = { enqueue = 1, webhook = 1, timeout = 0 }
}

variable "max_instances" {
  description = "Maximum instances per function."
  type        = map(number)
  default     = { enqueue = 20, webhook = 40, timeout = 20 }
}

variable "whatsapp_api_base" {
  description = "WHATSAPP_API_BASE: base URL of the WhatsApp Cloud API."
  type        = string
  default     = "https://graph.facebook.com"
}

variable "whatsapp_api_version" {
  description = "WHATSAPP_API_VERSION: Graph API version of the send path."
  type        = string
  default     = "v21.0"
}

variable "whatsapp_phone_number_id" {
  description = "WHATSAPP_PHONE_NUMBER_ID: id of the sending WhatsApp Business phone number (not a secret)."
  type        = string
}

variable "log_retention_days" {
  description = "Days the delivery event log export is kept in its bucket."
  type        = number
  default     = 90
}

variable "deletion_protection" {
  description = "Protect the Firestore database and buckets from `terraform destroy`."
  type        = bool
  default     = true
}
