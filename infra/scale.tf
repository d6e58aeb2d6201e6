# Sizing from the target peak (modules/sizing, docs/scale.md): the queue
# counts and the functions' maximum instances the rest of the configuration
# uses come from the sizing module, whose preconditions refuse a
# configuration that cannot carry the target within Google's and Meta's
# documented limits (the senders' capacity included). The module has no
# provider, so Terraform evaluates it offline (tests/infra/test_sizing.py).

variable "target_peak_messages_per_s" {
  description = "Messages per second (all rooms, all platforms) the deployment must carry at its peak. Derives the timer and prepare queue counts and each function's maximum instances, and must fit the senders (whatsapp_senders' rates, 300 calls/s per Messenger Page or Instagram account). Unset (null): what the configured senders carry at target_platform_shares (docs/scale.md)."
  type        = number
  default     = null

  validation {
    condition     = var.target_peak_messages_per_s == null || (coalesce(var.target_peak_messages_per_s, 1) >= 1 && coalesce(var.target_peak_messages_per_s, 1) <= 50000)
    error_message = "target_peak_messages_per_s must be 1..50000 (above that, docs/scale.md names the limits that bind first), or unset."
  }
}

variable "target_platform_shares" {
  description = "Share (0-1) of the target's messages per platform, adding up to 1; a platform with a share must be in platforms. Sizes the senders each platform needs."
  type        = object({ whatsapp = number, messenger = number, instagram = number })
  default     = { whatsapp = 1, messenger = 0, instagram = 0 }

  validation {
    condition     = alltrue([for share in values(var.target_platform_shares) : share >= 0 && share <= 1])
    error_message = "each of target_platform_shares is a share between 0 and 1."
  }
}

variable "target_prepared_share" {
  description = "Share (0-1) of messages at the peak that carry a `prepare` attribute (media uploaded ahead): sizes the prepare queues and the prepare function."
  type        = number
  default     = 0.25

  validation {
    condition     = var.target_prepared_share >= 0 && var.target_prepared_share <= 1
    error_message = "target_prepared_share is a share between 0 and 1."
  }
}

variable "index_shards" {
  description = "INDEX_SHARDS: shards of the rooms' time-valued indexes (shared/shards.py); each takes Firestore's 500 writes/s of a sequential index range. Raise only: rooms in a dropped shard are not swept until written again."
  type        = number
  default     = 128

  validation {
    condition     = var.index_shards >= 1 && var.index_shards <= 1024 && var.index_shards == floor(var.index_shards)
    error_message = "index_shards must be a whole number 1..1024."
  }
}

module "sizing" {
  source = "./modules/sizing"

  target_peak_messages_per_s = var.target_peak_messages_per_s
  target_platform_shares     = var.target_platform_shares
  target_prepared_share      = var.target_prepared_share
  platforms                  = var.platforms
  whatsapp_senders           = var.whatsapp_senders
  whatsapp_sender_rate       = var.whatsapp_sender_rate
  function_threads           = var.function_threads
  webhook_mode               = var.webhook_mode
  max_instances              = var.max_instances
  tasks_queue_count          = var.tasks_queue_count
  tasks_queues_retired       = var.tasks_queues_retired
  prepare_queue_count        = var.prepare_queue_count
  prepare_queues_retired     = var.prepare_queues_retired
  index_shards               = var.index_shards
}

locals {
  tasks_queue_count   = module.sizing.tasks_queue_count
  prepare_queue_count = module.sizing.prepare_queue_count
  max_instances       = module.sizing.max_instances
}

output "sizing" {
  description = "What the deployment is sized for (modules/sizing): the target, queue counts, max instances, sender capacity, and per component its load at the target, capacity and headroom (docs/scale.md)."
  value       = module.sizing
}
