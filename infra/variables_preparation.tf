# Preparation: messages with a `prepare` attribute (a media upload),
# prepared by the `prepare` function while the messages ahead of them are
# sent, and the producer `sequence` attribute (shared/config.py,
# docs/configuration.md).

variable "prepare_ahead" {
  description = "PREPARE_AHEAD: messages behind the head of line whose preparation may run while the head is sent, per room; 0: only the head is prepared, one message after another."
  type        = number
  default     = 8

  validation {
    condition     = var.prepare_ahead >= 0 && var.prepare_ahead == floor(var.prepare_ahead)
    error_message = "prepare_ahead must be a whole number, 0 or more."
  }
}

variable "prepare_timeout_ms" {
  description = "PREPARE_TIMEOUT_MS: ms the head of line waits for its preparation before asking for it again (a lost or stuck prepare task); counts as one of max_prepare_attempts. Above media_timeout_ms."
  type        = number
  default     = 30000

  validation {
    condition     = var.prepare_timeout_ms >= 1 && var.prepare_timeout_ms <= 2592000000
    error_message = "prepare_timeout_ms must be 1..2592000000 (a timer task is scheduled at most 30 days ahead)."
  }
}

variable "max_prepare_attempts" {
  description = "MAX_PREPARE_ATTEMPTS: preparation attempts of one message before prepare_poison applies."
  type        = number
  default     = 4

  validation {
    condition     = var.max_prepare_attempts >= 1 && var.max_prepare_attempts == floor(var.max_prepare_attempts)
    error_message = "max_prepare_attempts must be a whole number, at least 1."
  }
}

variable "prepare_retry_base_ms" {
  description = "PREPARE_RETRY_BASE_MS: ms before the first retry of a failed preparation (x4 per attempt)."
  type        = number
  default     = 1000

  validation {
    condition     = var.prepare_retry_base_ms >= 1
    error_message = "prepare_retry_base_ms must be at least 1."
  }
}

variable "prepare_poison" {
  description = "PREPARE_POISON: what a message whose preparation keeps failing does when it reaches the head: \"dead_letter\" (it ends, kept for `baton dead-letters redrive`; the room moves on) or \"park\" (it blocks its room until an operator redrives or skips it)."
  type        = string
  default     = "dead_letter"

  validation {
    condition     = contains(["dead_letter", "park"], var.prepare_poison)
    error_message = "prepare_poison must be dead_letter or park."
  }
}

variable "prepare_queue_count" {
  description = "Number of prepare Cloud Tasks queues the functions write to (PREPARE_QUEUE_COUNT): 500 dispatches/s each; a room's consecutive messages go to consecutive queues. Unset (null): derived from target_peak_messages_per_s and target_prepared_share (scale.tf). To lower it, keep the old queues as prepare_queues_retired until they are empty (docs/deploy.md, \"Fewer timer queues\")."
  type        = number
  default     = null

  validation {
    condition     = var.prepare_queue_count == null || (coalesce(var.prepare_queue_count, 1) >= 1 && coalesce(var.prepare_queue_count, 1) == floor(coalesce(var.prepare_queue_count, 1)))
    error_message = "prepare_queue_count must be a whole number, 1 or more (modules/sizing holds every queue count, set or derived, to Cloud Tasks' 1,000 queues per region)."
  }
}

variable "prepare_queues_retired" {
  description = "Prepare queues kept after the prepare_queue_count active ones, written to by nobody, so the tasks already on them still run. Set it to the old count minus the new one when lowering prepare_queue_count, apply, wait until those queues are empty, then set it back to 0."
  type        = number
  default     = 0

  validation {
    condition     = var.prepare_queues_retired >= 0 && var.prepare_queues_retired <= 999 && var.prepare_queues_retired == floor(var.prepare_queues_retired)
    error_message = "prepare_queues_retired must be a whole number 0..999."
  }
}

variable "media_max_bytes" {
  description = "MEDIA_MAX_BYTES: largest media file (bytes) a preparation fetches and uploads (WhatsApp images: 5 MB; its largest type, documents: 100 MB). The file passes through the prepare instance's memory (function_memory)."
  type        = number
  default     = 5242880

  validation {
    condition     = var.media_max_bytes >= 1 && var.media_max_bytes <= 104857600 && var.media_max_bytes == floor(var.media_max_bytes)
    error_message = "media_max_bytes must be a whole number of bytes, 1..104857600 (100 MiB)."
  }
}

variable "media_timeout_ms" {
  description = "MEDIA_TIMEOUT_MS: ms one preparation's fetch and upload may take in all. Below prepare_timeout_ms, and at least 10 s below function_timeout_seconds (the room's transaction runs in the same request)."
  type        = number
  default     = 20000

  validation {
    condition     = var.media_timeout_ms >= 1
    error_message = "media_timeout_ms must be at least 1."
  }
}

variable "sequence_gap_timeout_ms" {
  description = "SEQUENCE_GAP_TIMEOUT_MS: ms a message with a producer `sequence` attribute waits for a missing predecessor before the gap is logged and given up (the room moves on)."
  type        = number
  default     = 30000

  validation {
    condition     = var.sequence_gap_timeout_ms >= 1 && var.sequence_gap_timeout_ms <= 2592000000
    error_message = "sequence_gap_timeout_ms must be 1..2592000000 (a timer task is scheduled at most 30 days ahead)."
  }
}
