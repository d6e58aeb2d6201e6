# Sizing from the target peak: the queue counts, the functions' maximum
# instances and the index shards follow from the message rate the deployment
# must carry (docs/scale.md), and the checks below refuse a configuration
# whose derived rates pass a documented limit. Any of the counts can still be
# set by hand (tasks_queue_count, prepare_queue_count, max_instances,
# index_shards); the same checks then hold it to the target.
#
# Per-message rates: what `make scale-model` and `make bench-core` measure
# per message (docs/scale.md); the seconds per request are the functions'
# request latencies on the cloud path (a Firestore commit of 20-60 ms, a
# platform send of 100-300 ms), rounded up.

variable "target_peak_messages_per_s" {
  description = "Messages per second (all rooms together) the deployment must carry at its peak. Derives the timer and prepare queue counts and each function's maximum instances (docs/scale.md); the checks in scale.tf refuse a configuration that cannot carry it within Google's documented limits."
  type        = number
  default     = 10000

  validation {
    condition     = var.target_peak_messages_per_s >= 1 && var.target_peak_messages_per_s <= 50000
    error_message = "target_peak_messages_per_s must be 1..50000 (above that, docs/scale.md names the limits that bind first)."
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

locals {
  # Per message at the peak (docs/scale.md, from make scale-model):
  # invocations of each function, timer tasks, and index-entry writes of the
  # busiest sharded field (wake_at_us).
  per_message = {
    enqueue    = 1.0
    webhook    = 3.0 # sent, delivered, read
    status     = var.webhook_mode == "queued" ? 3.0 : 0.0
    timeout    = 1.1
    prepare    = 1.1 * var.target_prepared_share
    deadletter = 0.01
    sweep      = 0.0
  }
  timer_tasks_per_message  = 1.1
  index_writes_per_message = 3.0
  # Seconds one request of each function takes on the cloud path.
  seconds_per_request = { enqueue = 0.3, webhook = 0.15, status = 0.15, timeout = 0.1, prepare = 1.0, deadletter = 0.1, sweep = 60 }
  # Headroom: timer waves (one ack timeout after a burst starts) reach about
  # 1.4 times the mean per queue in make scale-model, so queues are sized
  # for 60% of their limit; instances for the autoscaler's 60% target
  # utilisation (https://cloud.google.com/run/docs/about-instance-autoscaling).
  limit_share   = 0.6
  instance_util = 0.6

  # Cloud Tasks: 500 dispatches/s per queue (https://cloud.google.com/tasks/docs/quotas).
  queue_dispatch_limit = 500
  # Firestore: 500 writes/s to a range of a sequential index
  # (https://cloud.google.com/firestore/docs/solutions/shard-timestamp).
  sequential_index_limit = 500
  # Cloud Run: a service's maximum instances may be set up to 1000 without a
  # quota increase (https://cloud.google.com/run/docs/configuring/max-instances).
  max_instances_limit = 1000

  derived_tasks_queue_count   = max(1, ceil(var.target_peak_messages_per_s * local.timer_tasks_per_message / (local.queue_dispatch_limit * local.limit_share)))
  derived_prepare_queue_count = max(1, ceil(var.target_peak_messages_per_s * local.per_message.prepare / (local.queue_dispatch_limit * local.limit_share)))
  # Requests in flight at the peak, per function, and the instances they need.
  in_flight_at_peak = { for f, n in local.per_message : f => var.target_peak_messages_per_s * n * local.seconds_per_request[f] }
  derived_max_instances = { for f, load in local.in_flight_at_peak :
    f => max(f == "sweep" ? 2 : 5, ceil(load / (var.function_threads * local.instance_util)))
  }

  tasks_queue_count   = coalesce(var.tasks_queue_count, local.derived_tasks_queue_count)
  prepare_queue_count = coalesce(var.prepare_queue_count, local.derived_prepare_queue_count)
  max_instances       = var.max_instances == null ? local.derived_max_instances : var.max_instances

  # What the configuration asks of each limit at the target peak.
  dispatches_per_timer_queue   = var.target_peak_messages_per_s * local.timer_tasks_per_message / local.tasks_queue_count
  dispatches_per_prepare_queue = var.target_peak_messages_per_s * local.per_message.prepare / local.prepare_queue_count
  writes_per_index_shard       = var.target_peak_messages_per_s * local.index_writes_per_message / var.index_shards
}

# Nothing to create: the checks run at plan time and refuse the apply.
resource "terraform_data" "scale_check" {
  input = {
    tasks_queue_count   = local.tasks_queue_count
    prepare_queue_count = local.prepare_queue_count
    index_shards        = var.index_shards
  }

  lifecycle {
    precondition {
      condition     = local.dispatches_per_timer_queue <= local.queue_dispatch_limit
      error_message = "At target_peak_messages_per_s the timer queues would dispatch more than Cloud Tasks' 500 tasks/s per queue: raise tasks_queue_count (or leave it unset to derive it)."
    }
    precondition {
      condition     = local.dispatches_per_prepare_queue <= local.queue_dispatch_limit
      error_message = "At target_peak_messages_per_s x target_prepared_share the prepare queues would dispatch more than 500 tasks/s per queue: raise prepare_queue_count (or leave it unset)."
    }
    precondition {
      condition     = local.writes_per_index_shard <= local.sequential_index_limit
      error_message = "At target_peak_messages_per_s each index shard would take more than Firestore's 500 writes/s to a sequential index: raise index_shards."
    }
    precondition {
      condition     = alltrue([for f, n in local.max_instances : n <= local.max_instances_limit])
      error_message = "A function's max_instances passes Cloud Run's 1000 (a quota increase is needed first): raise function_threads or lower target_peak_messages_per_s."
    }
    precondition {
      condition     = alltrue([for f, load in local.in_flight_at_peak : local.max_instances[f] * var.function_threads >= load])
      error_message = "A function's max_instances x function_threads is below the requests in flight at target_peak_messages_per_s (docs/scale.md): raise it, or leave max_instances unset to derive it."
    }
  }
}
