# ---------------------------------------------------------------- project --

variable "project_id" {
  description = "GCP project to deploy baton into (billing enabled)."
  type        = string
}

variable "region" {
  description = "Region of the functions, the Cloud Tasks queues, the buckets and the analytics subnet."
  type        = string
  default     = "europe-west1"
}

variable "firestore_location" {
  description = "Firestore location: a region such as europe-west1 (cheapest, nearest to the functions) or a multi-region such as eur3."
  type        = string
  default     = "europe-west1"
}

variable "name_prefix" {
  description = "Prefix of every resource name: 2-16 lowercase letters, digits or hyphens (service account ids are at most 30 characters)."
  type        = string
  default     = "baton"

  validation {
    # The longest service account id is PREFIX-tasks-invoker (14 more characters).
    condition     = can(regex("^[a-z][a-z0-9-]{0,14}[a-z0-9]$", var.name_prefix))
    error_message = "name_prefix: 2-16 characters, lowercase letters, digits and hyphens, starting with a letter and not ending with a hyphen."
  }
}

variable "labels" {
  description = "Labels put on every resource that takes them."
  type        = map(string)
  default     = { app = "baton" }
}

variable "deletion_protection" {
  description = "Protect the Firestore database and the buckets from `terraform destroy` (set false before tearing down)."
  type        = bool
  default     = true
}

# -------------------------------------------------------------- functions --

variable "source_archive" {
  description = "Path of the functions' source archive built by `make package`; null means dist/baton-functions.zip at the repository root."
  type        = string
  default     = null
}

variable "function_memory" {
  description = "Memory of each function instance, Cloud Run syntax (e.g. 512Mi)."
  type        = string
  default     = "512Mi"
}

variable "function_cpu" {
  description = "vCPUs of each function instance (at least 1 when function_threads > 1: Cloud Run allows concurrency only from 1 vCPU)."
  type        = string
  default     = "1"
}

variable "function_threads" {
  description = "THREADS: requests one instance serves at once (functions-framework's gunicorn threads and the instance's max request concurrency)."
  type        = number
  default     = 8

  validation {
    condition     = var.function_threads >= 1 && var.function_threads <= 1000
    error_message = "function_threads must be 1..1000 (Cloud Run's concurrency limit)."
  }
}

variable "function_timeout_seconds" {
  description = "Request timeout of each function, s. A request runs one Firestore commit and at most one platform call."
  type        = number
  default     = 60
}

variable "min_instances" {
  description = "Minimum instances per function (keys enqueue, webhook, timeout): warm instances keep cold starts off the hand-over path, and are billed while idle."
  type        = map(number)
  default     = { enqueue = 1, webhook = 1, timeout = 0 }

  validation {
    condition     = length(setsubtract(["enqueue", "webhook", "timeout"], keys(var.min_instances))) == 0
    error_message = "min_instances needs a value for each of enqueue, webhook and timeout."
  }
}

variable "max_instances" {
  description = "Maximum instances per function (keys enqueue, webhook, timeout)."
  type        = map(number)
  default     = { enqueue = 20, webhook = 40, timeout = 20 }

  validation {
    condition     = length(setsubtract(["enqueue", "webhook", "timeout"], keys(var.max_instances))) == 0
    error_message = "max_instances needs a value for each of enqueue, webhook and timeout."
  }
}

# ------------------------------------------- delivery settings (config.py) --

variable "ack_timeout_ms" {
  description = "ACK_TIMEOUT_MS: ms after a send with no delivery webhook before the message counts as sent (timed out) and the room moves on."
  type        = number
  default     = 3000

  validation {
    condition     = var.ack_timeout_ms >= 1
    error_message = "ack_timeout_ms must be at least 1."
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

variable "dedup_window" {
  description = "DEDUP_WINDOW: message ids remembered per room for de-duplication of Pub/Sub redeliveries."
  type        = number
  default     = 1000

  validation {
    condition     = var.dedup_window >= 1
    error_message = "dedup_window must be at least 1."
  }
}

variable "max_pending_bytes" {
  description = "MAX_PENDING_BYTES: bytes of queued messages per room before enqueue pushes back with 503 (Firestore documents hold at most 1 MiB)."
  type        = number
  default     = 600000

  validation {
    condition     = var.max_pending_bytes >= 1 && var.max_pending_bytes < 1048576
    error_message = "max_pending_bytes must be 1..1048575: the room document must stay below Firestore's 1 MiB."
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
  description = "WHATSAPP_PHONE_NUMBER_ID: id of the sending WhatsApp Business phone number (Meta app dashboard, WhatsApp > API Setup; not a secret)."
  type        = string
}

# ---------------------------------------------------- Pub/Sub, Cloud Tasks --

variable "push_ack_deadline_seconds" {
  description = "Seconds Pub/Sub waits for enqueue's answer before it redelivers the push (10..600); at least function_timeout_seconds."
  type        = number
  default     = 60

  validation {
    condition     = var.push_ack_deadline_seconds >= 10 && var.push_ack_deadline_seconds <= 600
    error_message = "push_ack_deadline_seconds must be 10..600 (Pub/Sub's limits)."
  }
}

variable "dead_letter_max_attempts" {
  description = "Push deliveries of one Pub/Sub message before it goes to the dead-letter topic and frees its room's ordering key (5..100)."
  type        = number
  default     = 10

  validation {
    condition     = var.dead_letter_max_attempts >= 5 && var.dead_letter_max_attempts <= 100
    error_message = "dead_letter_max_attempts must be 5..100 (Pub/Sub's limits)."
  }
}

variable "tasks_queue_count" {
  description = "Number of ack-timeout Cloud Tasks queues. One queue dispatches at most 500 tasks/s; the code spreads rooms over the queues by a hash of the room id."
  type        = number
  default     = 2

  validation {
    condition     = var.tasks_queue_count >= 1 && var.tasks_queue_count <= 50
    error_message = "tasks_queue_count must be 1..50."
  }
}

# -------------------------------------------------------------- analytics --

variable "log_retention_days" {
  description = "Days the delivery-event files are kept in the log bucket."
  type        = number
  default     = 90
}

variable "noncurrent_version_days" {
  description = "Days an overwritten or deleted object stays recoverable in the versioned buckets before it is removed."
  type        = number
  default     = 7
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
