# The functions on Cloud Run (functions.tf): source, size, concurrency and
# instances.

variable "source_archive" {
  description = "Path of the functions' source archive built by `make package`; null means dist/baton-functions.zip at the repository root."
  type        = string
  default     = null
}

variable "function_memory" {
  description = "Memory of each function instance, Cloud Run syntax (e.g. 512Mi)."
  type        = string
  default     = "512Mi"

  validation {
    condition     = can(regex("^[1-9][0-9]*(Mi|Gi)$", var.function_memory))
    error_message = "function_memory must be a whole number of Mi or Gi, e.g. 512Mi or 1Gi."
  }
}

variable "function_cpu" {
  description = "vCPUs of each function instance (at least 1 when function_threads > 1: Cloud Run allows concurrency only from 1 vCPU). docs/cost.md shows what a fraction of a vCPU at one request per instance would cost instead."
  type        = string
  default     = "1"

  validation {
    condition     = try(tonumber(var.function_cpu) >= 0.083 && tonumber(var.function_cpu) <= 8, false)
    error_message = "function_cpu must be a number of vCPUs from 0.083 to 8 (Cloud Run's limits)."
  }
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
  description = "Request timeout of each function, s (15..1800: it is also the attempt deadline of the sweep's Cloud Scheduler job). A request runs one Firestore commit and at most one platform call; a sweep re-drives up to sweep_batch_size rooms."
  type        = number
  default     = 60

  validation {
    condition     = var.function_timeout_seconds >= 15 && var.function_timeout_seconds <= 1800
    error_message = "function_timeout_seconds must be 15..1800: it is also the sweep job's attempt deadline (Cloud Scheduler's limits for HTTP targets)."
  }
}

variable "min_instances" {
  description = "Minimum instances per function (keys enqueue, deadletter, webhook, status, timeout, sweep, prepare): warm instances keep cold starts off the hand-over path, and are billed while idle."
  type        = map(number)
  default     = { enqueue = 1, deadletter = 0, webhook = 1, status = 0, timeout = 0, sweep = 0, prepare = 0 }

  validation {
    condition     = length(setsubtract(["enqueue", "deadletter", "webhook", "status", "timeout", "sweep", "prepare"], keys(var.min_instances))) == 0
    error_message = "min_instances needs a value for each of enqueue, deadletter, webhook, status, timeout, sweep and prepare."
  }

  validation {
    condition     = alltrue([for n in values(var.min_instances) : n >= 0 && n == floor(n)])
    error_message = "min_instances values must be whole numbers, 0 or more."
  }
}

variable "max_instances" {
  description = "Maximum instances per function (keys enqueue, deadletter, webhook, status, timeout, sweep, prepare). Unset (null): derived from target_peak_messages_per_s, the requests each function serves per message and their latency, at function_threads per instance and the autoscaler's 60% (scale.tf, docs/scale.md)."
  type        = map(number)
  default     = null

  validation {
    condition     = var.max_instances == null || length(setsubtract(["enqueue", "deadletter", "webhook", "status", "timeout", "sweep", "prepare"], keys(coalesce(var.max_instances, {})))) == 0
    error_message = "max_instances needs a value for each of enqueue, deadletter, webhook, status, timeout, sweep and prepare."
  }

  validation {
    condition     = var.max_instances == null || alltrue([for n in values(coalesce(var.max_instances, {})) : n >= 1 && n == floor(n)])
    error_message = "max_instances values must be whole numbers, 1 or more."
  }
}
