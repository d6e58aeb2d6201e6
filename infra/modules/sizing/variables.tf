# The root module (infra/scale.tf) passes its variables through unchanged and
# holds their validation blocks; the checks that relate several variables are
# the preconditions in main.tf.

variable "target_peak_messages_per_s" {
  description = "Messages per second (all rooms, all platforms) the deployment must carry at its peak; null: what the configured senders carry (sender_capacity_messages_per_s)."
  type        = number
  default     = null
}

variable "target_platform_shares" {
  description = "Share (0-1) of the target's messages per platform; the shares add up to 1."
  type        = object({ whatsapp = number, messenger = number, instagram = number })
  default     = { whatsapp = 1, messenger = 0, instagram = 0 }
}

variable "target_prepared_share" {
  description = "Share (0-1) of the messages at the peak that carry a `prepare` attribute."
  type        = number
  default     = 0.25
}

variable "platforms" {
  description = "The platforms the deployment sends to (whatsapp, messenger, instagram)."
  type        = list(string)
  default     = ["whatsapp"]
}

variable "whatsapp_senders" {
  description = "WHATSAPP_SENDERS: comma-separated phone_number_id[:rate]; empty: one number at whatsapp_sender_rate."
  type        = string
  default     = ""
}

variable "whatsapp_sender_rate" {
  description = "WHATSAPP_SENDER_RATE: messages/s of a number without its own rate; 0 (not limited by baton) counts as Meta's default tier, 80."
  type        = number
  default     = 75
}

variable "function_threads" {
  description = "Requests one function instance serves at once."
  type        = number
  default     = 8
}

variable "webhook_mode" {
  description = "direct or queued (queued adds the `status` function's calls)."
  type        = string
  default     = "direct"
}

variable "max_instances" {
  description = "Maximum instances per function set by hand, or null to derive them."
  type        = map(number)
  default     = null
}

variable "tasks_queue_count" {
  description = "Timer queues set by hand, or null to derive them."
  type        = number
  default     = null
}

variable "tasks_queues_retired" {
  description = "Timer queues kept for their tasks after lowering tasks_queue_count."
  type        = number
  default     = 0
}

variable "prepare_queue_count" {
  description = "Prepare queues set by hand, or null to derive them."
  type        = number
  default     = null
}

variable "prepare_queues_retired" {
  description = "Prepare queues kept for their tasks after lowering prepare_queue_count."
  type        = number
  default     = 0
}

variable "index_shards" {
  description = "Shards of the rooms' time-valued indexes."
  type        = number
  default     = 128
}
