output "target_peak_messages_per_s" {
  description = "The rate the deployment is sized for: target_peak_messages_per_s, or what the configured senders carry when it is unset (messages/s)."
  value       = local.target
}

output "tasks_queue_count" {
  description = "Active timer queues: set by hand, or derived from the target."
  value       = local.tasks_queue_count
}

output "prepare_queue_count" {
  description = "Active prepare queues: set by hand, or derived from the target."
  value       = local.prepare_queue_count
}

output "max_instances" {
  description = "Maximum instances per function: set by hand, or derived from the target."
  value       = local.max_instances
}

output "writes_per_index_shard" {
  description = "Index-entry writes/s each shard of the busiest sharded field takes at the target (Firestore: 500)."
  value       = local.writes_per_index_shard
}

output "sender_capacity" {
  description = "Messages/s the configured senders carry, per platform (WhatsApp: the numbers' rates; Messenger, Instagram: 300 calls/s)."
  value       = local.sender_capacity
}

output "usable_sender_capacity" {
  description = "Messages/s the configured senders are sized to carry, per platform: WhatsApp numbers at most 70% busy (their send window's waits), Messenger and Instagram at 300 calls/s."
  value       = local.usable_capacity
}

output "whatsapp_number_rates" {
  description = "Each configured WhatsApp number's rate, messages/s, in WHATSAPP_SENDERS order."
  value       = local.whatsapp_number_rates
}

output "components" {
  description = "Per component: unit, per_message, at_target, capacity, limit (the docs/scale.md table)."
  value       = local.components
}

output "headroom" {
  description = "Per component, capacity / load at the target (1.0: no headroom)."
  value       = local.headroom
}

output "max_messages_per_s" {
  description = "The rate at which the first component reaches its capacity (messages/s)."
  # 1000000000: at least one number for min() when nothing carries load (a target of 0).
  value = local.target * min(concat([for v in values(local.headroom) : v if v != null], [1000000000])...)
}

output "sizable_up_to_messages_per_s" {
  description = "The highest target_peak_messages_per_s these threads, index shards, senders and retired queues can be sized for (messages/s); above it the plan is refused."
  value       = local.sizable_up_to
}
