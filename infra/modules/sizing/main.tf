# Sizing from the target peak: the queue counts, the functions' maximum
# instances, the index shards' load and the senders' capacity follow from the
# message rate the deployment must carry (docs/scale.md, whose table
# `make scale-table` writes from this module's outputs), and the
# preconditions below refuse a configuration that cannot carry it within
# Google's and Meta's documented limits. Any count can still be set by hand;
# the same preconditions then hold it to the target.
#
# This module has no provider, so Terraform itself evaluates it offline:
# tests/infra/test_sizing.py plans it for the defaults, the example tfvars,
# 1,000 / 10,000 / 30,000 msg/s and inputs it must refuse.

locals {
  # Per message at the peak (docs/scale.md, from make scale-model and make
  # bench-core): invocations of each function, timer tasks, and index-entry
  # writes of the busiest sharded field (wake_at_us).
  per_message = {
    enqueue    = 1.0
    webhook    = 3.0 # sent, delivered, read
    status     = var.webhook_mode == "queued" ? 3.0 : 0.0
    timeout    = 1.1
    prepare    = 1.1 * var.target_prepared_share
    deadletter = 0.01
    sweep      = 0.0
  }
  # Timer task creates (every one a create, most also a dispatch): `make
  # scale-model` at the users' burst counts 1.18 a message (2026-11-28: an ack
  # timer per send, a wake-up per send that waits for its number's slot).
  timer_tasks_per_message  = 1.2
  index_writes_per_message = 3.0
  # Seconds one request of each function takes on the cloud path (a
  # Firestore commit of 20-60 ms, a platform send of 100-300 ms), rounded up.
  seconds_per_request = { enqueue = 0.3, webhook = 0.15, status = 0.15, timeout = 0.1, prepare = 1.0, deadletter = 0.1, sweep = 60 }
  # Headroom: timer waves (one ack timeout after a burst starts) reach about
  # 1.4 times the mean per queue in make scale-model, so queues are sized
  # for 60% of their limit; instances for the autoscaler's 60% target
  # utilisation (https://cloud.google.com/run/docs/about-instance-autoscaling).
  limit_share   = 0.6
  instance_util = 0.6

  # Cloud Tasks: 500 dispatches/s per queue, 1,000 queues per project and
  # region (https://cloud.google.com/tasks/docs/quotas); baton has one more
  # queue, the scheduled messages'. Creates count too: a queue taking 500
  # created or dispatched tasks/s is "high-TPS" and a cold one should not
  # pass 500 ops/s without a ramp (500/50/5,
  # https://cloud.google.com/tasks/docs/manage-cloud-task-scaling); a timer
  # queue's creates are its busier side, as some timers are deleted unrun.
  queue_dispatch_limit = 500
  queues_per_region    = 1000
  # Firestore: 500 writes/s to a range of a sequential index
  # (https://cloud.google.com/firestore/docs/solutions/shard-timestamp).
  sequential_index_limit = 500
  # Cloud Run: a service's maximum instances may be set up to 1000 without a
  # quota increase (https://cloud.google.com/run/docs/configuring/max-instances).
  max_instances_limit = 1000
  # WhatsApp: 80 msg/s per business number by default, up to 1,000 after
  # Meta's upgrade; baton's WHATSAPP_SENDER_RATE stays a little below
  # (https://developers.facebook.com/documentation/business-messaging/whatsapp/throughput).
  whatsapp_default_tier  = 80
  whatsapp_upgraded_tier = 1000
  whatsapp_default_rate  = 75
  whatsapp_upgraded_rate = 950
  # baton's send window (shared/sender_window.py) lets one send through per
  # slot per second, and frees a slot GUARD_US (50 ms) after its second: a
  # saturated number sends its configured rate x 1 / 1.05.
  sender_window_s       = 1.0
  sender_window_guard_s = 0.05
  sender_efficiency     = local.sender_window_s / (local.sender_window_s + local.sender_window_guard_s)
  # Numbers are kept at most 70% busy at the peak: near its rate a number's
  # slots are mostly taken, most sends wait for the soonest one, and each
  # wait is one more timer task and more reads. `make scale-model` at the
  # 11,000 msg/s peak (2026-11-27): 13 numbers at 950 (93% busy) made 2.54
  # timer tasks a message and passed 500 dispatches/s per queue; 18 (68%)
  # made 1.25 and passed (docs/scale.md).
  sender_limit_share = 0.7
  # Messenger and Instagram: 300 Send API calls/s per Page or professional
  # account for text, links, reactions and stickers
  # (https://developers.facebook.com/documentation/business-messaging/messenger-platform/overview/rate-limiting).
  meta_page_text_calls_per_s = 300

  # ------------------------------------------------------------ senders --
  # WHATSAPP_SENDERS as shared/senders.py reads it: id[:rate], comma-separated;
  # empty: the one number WHATSAPP_PHONE_NUMBER_ID at WHATSAPP_SENDER_RATE.
  # A rate of 0 (not limited by baton) counts as Meta's default tier.
  sender_specs          = [for s in split(",", replace(var.whatsapp_senders, " ", "")) : s if s != ""]
  sender_rates_given    = [for s in local.sender_specs : length(split(":", s)) > 1 ? tonumber(split(":", s)[1]) : var.whatsapp_sender_rate]
  sender_rates_in_order = length(local.sender_specs) == 0 ? [var.whatsapp_sender_rate] : local.sender_rates_given
  whatsapp_number_rates = [for r in local.sender_rates_in_order : r == 0 ? local.whatsapp_default_tier : r]
  sender_capacity = {
    whatsapp  = contains(var.platforms, "whatsapp") ? sum(local.whatsapp_number_rates) * local.sender_efficiency : 0
    messenger = contains(var.platforms, "messenger") ? local.meta_page_text_calls_per_s : 0
    instagram = contains(var.platforms, "instagram") ? local.meta_page_text_calls_per_s : 0
  }
  shares = {
    whatsapp  = var.target_platform_shares.whatsapp
    messenger = var.target_platform_shares.messenger
    instagram = var.target_platform_shares.instagram
  }
  # Unset target: what the configured senders carry at the given shares.
  usable_capacity = {
    whatsapp  = local.sender_capacity.whatsapp * local.sender_limit_share
    messenger = local.sender_capacity.messenger
    instagram = local.sender_capacity.instagram
  }
  capacity_at_shares = min([for p, share in local.shares : local.usable_capacity[p] / share if share > 0]...)
  target             = var.target_peak_messages_per_s == null ? local.capacity_at_shares : var.target_peak_messages_per_s
  platform_demand    = { for p, share in local.shares : p => local.target * share }
  whatsapp_shortfall = max(0, local.platform_demand.whatsapp - local.usable_capacity.whatsapp)

  # ------------------------------------------------ queues and instances --
  derived_tasks_queue_count   = max(1, ceil(local.target * local.timer_tasks_per_message / (local.queue_dispatch_limit * local.limit_share)))
  derived_prepare_queue_count = max(1, ceil(local.target * local.per_message.prepare / (local.queue_dispatch_limit * local.limit_share)))
  tasks_queue_count           = var.tasks_queue_count == null ? local.derived_tasks_queue_count : var.tasks_queue_count
  prepare_queue_count         = var.prepare_queue_count == null ? local.derived_prepare_queue_count : var.prepare_queue_count
  queues_in_all               = local.tasks_queue_count + var.tasks_queues_retired + local.prepare_queue_count + var.prepare_queues_retired + 1

  # Requests in flight at the peak, per function, and the instances they need.
  in_flight_at_peak = { for f, n in local.per_message : f => local.target * n * local.seconds_per_request[f] }
  derived_max_instances = { for f, load in local.in_flight_at_peak :
    f => max(f == "sweep" ? 2 : 5, ceil(load / (var.function_threads * local.instance_util)))
  }
  max_instances = var.max_instances == null ? local.derived_max_instances : var.max_instances

  # What the configuration asks of each limit at the target peak.
  dispatches_per_timer_queue   = local.target * local.timer_tasks_per_message / local.tasks_queue_count
  dispatches_per_prepare_queue = local.target * local.per_message.prepare / local.prepare_queue_count
  writes_per_index_shard       = local.target * local.index_writes_per_message / var.index_shards

  # Per component: its load at the target, what it carries, in the same unit.
  components = merge(
    { for f, load in local.in_flight_at_peak : "function ${f}" => {
      unit     = "requests in flight", per_message = local.per_message[f], at_target = load,
      capacity = local.max_instances[f] * var.function_threads, limit = "max_instances ${local.max_instances[f]} x ${var.function_threads} threads (Cloud Run: 1,000 instances)"
    } if local.per_message[f] > 0 },
    {
      "timer queues" = {
        unit     = "task creates/s", per_message = local.timer_tasks_per_message, at_target = local.target * local.timer_tasks_per_message,
        capacity = local.tasks_queue_count * local.queue_dispatch_limit, limit = "${local.tasks_queue_count} queues x 500/s"
      }
      "prepare queues" = {
        unit     = "dispatches/s", per_message = local.per_message.prepare, at_target = local.target * local.per_message.prepare,
        capacity = local.prepare_queue_count * local.queue_dispatch_limit, limit = "${local.prepare_queue_count} queues x 500/s"
      }
      "index shards (wake_at_us)" = {
        unit     = "index writes/s", per_message = local.index_writes_per_message, at_target = local.target * local.index_writes_per_message,
        capacity = var.index_shards * local.sequential_index_limit, limit = "${var.index_shards} shards x 500/s"
      }
    },
    { for p, demand in local.platform_demand : "${p} senders" => {
      unit  = "messages/s", per_message = local.shares[p], at_target = demand, capacity = local.sender_capacity[p],
      limit = p == "whatsapp" ? "${length(local.whatsapp_number_rates)} number(s), ${join(" + ", [for r in local.whatsapp_number_rates : tostring(r)])} msg/s" : "one ${p == "messenger" ? "Page" : "account"} x 300 calls/s"
    } if demand > 0 },
  )
  headroom = { for name, c in local.components : name => c.at_target > 0 ? c.capacity / c.at_target : null }

  # The highest target these threads, shards, senders and retired queues
  # can be sized for: past it a derived max_instances passes 1,000, a shard
  # 500 writes/s, the senders their rates, or the queues 1,000 per region.
  sizable_up_to = min(concat(
    [for f, n in local.per_message : local.max_instances_limit * var.function_threads * local.instance_util / (n * local.seconds_per_request[f]) if n > 0],
    [var.index_shards * local.sequential_index_limit / local.index_writes_per_message],
    [for p, share in local.shares : local.usable_capacity[p] / share if share > 0],
    [(local.queues_per_region - 1 - var.tasks_queues_retired - var.prepare_queues_retired) * local.queue_dispatch_limit * local.limit_share / (local.timer_tasks_per_message + local.per_message.prepare)],
  )...)
}

# Nothing to create: the checks run at plan time and refuse the apply.
resource "terraform_data" "checks" {
  input = {
    target_peak_messages_per_s = local.target
    tasks_queue_count          = local.tasks_queue_count
    prepare_queue_count        = local.prepare_queue_count
  }

  lifecycle {
    precondition {
      condition     = abs(local.shares.whatsapp + local.shares.messenger + local.shares.instagram - 1) < 0.000001
      error_message = "target_platform_shares must add up to 1 (they add up to ${local.shares.whatsapp + local.shares.messenger + local.shares.instagram})."
    }
    precondition {
      condition     = alltrue([for p, share in local.shares : share == 0 || contains(var.platforms, p)])
      error_message = "target_platform_shares gives a share to a platform not in platforms (${join(", ", var.platforms)}): add it there, or set its share to 0."
    }
    precondition {
      condition     = alltrue([for r in local.whatsapp_number_rates : r <= local.whatsapp_upgraded_tier])
      error_message = "A WhatsApp number's rate passes Meta's highest throughput tier, 1,000 msg/s per number (whatsapp_senders, whatsapp_sender_rate)."
    }
    precondition {
      condition     = local.whatsapp_shortfall == 0
      error_message = "The WhatsApp numbers carry ${format("%.0f", local.sender_capacity.whatsapp)} msg/s (their rates in whatsapp_senders, less the send window's 50 ms guard), ${format("%.0f", local.usable_capacity.whatsapp)} at the 70% busy they are sized for (docs/scale.md): short by ${ceil(local.whatsapp_shortfall)} msg/s of the target's WhatsApp share (${format("%.0f", local.platform_demand.whatsapp)} msg/s). It needs ${ceil(local.platform_demand.whatsapp / (local.whatsapp_default_rate * local.sender_efficiency * local.sender_limit_share))} numbers at 75 msg/s (Meta's default tier) or ${ceil(local.platform_demand.whatsapp / (local.whatsapp_upgraded_rate * local.sender_efficiency * local.sender_limit_share))} at 950 msg/s (upgraded to 1,000/s) in whatsapp_senders, or a lower target_peak_messages_per_s."
    }
    precondition {
      condition     = local.platform_demand.messenger <= local.sender_capacity.messenger && local.platform_demand.instagram <= local.sender_capacity.instagram
      error_message = "The target's Messenger or Instagram share (${format("%.0f", local.platform_demand.messenger)} and ${format("%.0f", local.platform_demand.instagram)} msg/s) passes one Page's or account's 300 Send API calls/s for text: lower target_peak_messages_per_s or the share."
    }
    precondition {
      condition     = local.dispatches_per_timer_queue <= local.queue_dispatch_limit
      error_message = "At the target the timer queues would create ${ceil(local.dispatches_per_timer_queue)} tasks/s each, above Cloud Tasks' 500 per queue: raise tasks_queue_count to at least ${ceil(local.target * local.timer_tasks_per_message / local.queue_dispatch_limit)} (or leave it unset to derive it)."
    }
    precondition {
      condition     = local.dispatches_per_prepare_queue <= local.queue_dispatch_limit
      error_message = "At the target the prepare queues would dispatch ${ceil(local.dispatches_per_prepare_queue)} tasks/s each, above Cloud Tasks' 500 per queue: raise prepare_queue_count (or leave it unset)."
    }
    precondition {
      condition     = local.queues_in_all <= local.queues_per_region
      error_message = "baton would need ${local.queues_in_all} Cloud Tasks queues, above the 1,000 a project has per region: lower target_peak_messages_per_s, or the queue counts set by hand."
    }
    precondition {
      condition     = local.writes_per_index_shard <= local.sequential_index_limit
      error_message = "At the target each index shard would take ${ceil(local.writes_per_index_shard)} writes/s, above Firestore's 500 writes/s to a sequential index: raise index_shards to at least ${ceil(local.target * local.index_writes_per_message / local.sequential_index_limit)}."
    }
    precondition {
      condition     = alltrue([for f, n in local.max_instances : n <= local.max_instances_limit])
      error_message = "A function's max_instances passes Cloud Run's 1000 (${join(", ", [for f, n in local.max_instances : "${f} ${n}" if n > local.max_instances_limit])}): raise function_threads or lower target_peak_messages_per_s."
    }
    precondition {
      condition     = alltrue([for f, load in local.in_flight_at_peak : local.max_instances[f] * var.function_threads >= load])
      error_message = "A function's max_instances x function_threads is below the requests in flight at the target (${join(", ", [for f, load in local.in_flight_at_peak : "${f} ${ceil(load)}" if local.max_instances[f] * var.function_threads < load])}; docs/scale.md): raise it, or leave max_instances unset to derive it."
    }
  }
}
