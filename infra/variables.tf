# ---------------------------------------------------------------- project --

variable "project_id" {
  description = "GCP project to deploy baton into (billing enabled)."
  type        = string
}

variable "region" {
  description = "Region of the functions, the Cloud Tasks queues, the buckets and the analytics subnet (a Cloud Run region such as europe-west1)."
  type        = string
  default     = "europe-west1"

  validation {
    condition     = can(regex("^[a-z]+-[a-z]+[0-9]+$", var.region))
    error_message = "region must be a region name such as europe-west1 (not a zone, not a multi-region)."
  }
}

variable "firestore_location" {
  description = "Firestore location: a region such as europe-west1 (cheapest, nearest to the functions) or a multi-region such as eur3."
  type        = string
  default     = "europe-west1"

  validation {
    condition     = can(regex("^([a-z]+-[a-z]+[0-9]+|nam[0-9]+|eur[0-9]+)$", var.firestore_location))
    error_message = "firestore_location must be a region (europe-west1) or a multi-region (nam5, eur3)."
  }
}

variable "firestore_database" {
  description = "Firestore database id of this deployment: \"(default)\" (the free tier applies to one database per project), or a named database (4-63 lowercase letters, digits, hyphens) for a second deployment beside another in the same project (docs/deploy.md, \"Two deployments in one project\")."
  type        = string
  default     = "(default)"

  validation {
    condition     = var.firestore_database == "(default)" || can(regex("^[a-z][a-z0-9-]{2,61}[a-z0-9]$", var.firestore_database))
    error_message = "firestore_database must be \"(default)\" or 4-63 lowercase letters, digits and hyphens, starting with a letter."
  }
}

variable "name_prefix" {
  description = "Prefix of every resource name: 2-16 lowercase letters, digits or hyphens (service account ids are at most 30 characters). Two deployments in one project need two prefixes and two firestore_database values; everything else (topics, queues, functions, secrets, buckets, sink, log exclusion, roles) is named by the prefix."
  type        = string
  default     = "baton"

  validation {
    # The longest service account ids, PREFIX-tasks-invoker and
    # PREFIX-fn-deadletter, have 14 more characters.
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

# ------------------------------------------- delivery settings (config.py) --

variable "ack_timeout_ms" {
  description = "ACK_TIMEOUT_MS: ms after a send with no delivery webhook before the message counts as sent (timed out) and the room moves on."
  type        = number
  default     = 3000

  validation {
    condition     = var.ack_timeout_ms >= 1 && var.ack_timeout_ms <= 2592000000
    error_message = "ack_timeout_ms must be 1..2592000000 (a timer task is scheduled at most 30 days ahead)."
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

variable "quiet_events" {
  description = "QUIET_EVENTS: event lines not written, as `event` or `event:reason`, comma-separated (e.g. \"status_ignored:sent_status,timeout_ignored\": about one line per message less, docs/event-log.md). Empty: every line."
  type        = string
  default     = ""
}

variable "first_timer_slack_ms" {
  description = "FIRST_TIMER_SLACK_MS: ms added to an attempt's first timer past decision + ACK_TIMEOUT_MS. 0: due at the earliest possible deadline (a send that returned later re-arms it); a slack saves those second timers and adds its length to every timeout."
  type        = number
  default     = 0

  validation {
    condition     = var.first_timer_slack_ms >= 0
    error_message = "first_timer_slack_ms must be at least 0."
  }
}

variable "send_start_deadline_ms" {
  description = "SEND_START_DEADLINE_MS: ms after the room's decision by which a send call must have started; a later one is not made (the attempt counts as refused and is retried)."
  type        = number
  default     = 2000

  validation {
    condition     = var.send_start_deadline_ms >= 1
    error_message = "send_start_deadline_ms must be at least 1."
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

variable "dedup_retention" {
  description = "DEDUP_RETENTION: ended message ids remembered per room to recognise a Pub/Sub redelivery, besides every message the room holds."
  type        = number
  default     = 1000

  validation {
    condition     = var.dedup_retention >= 1
    error_message = "dedup_retention must be at least 1."
  }
}

variable "max_queued_messages" {
  description = "MAX_QUEUED_MESSAGES: messages a room may hold before enqueue pushes back with 503 (Pub/Sub redelivers the push later)."
  type        = number
  default     = 1000

  validation {
    condition     = var.max_queued_messages >= 1
    error_message = "max_queued_messages must be at least 1."
  }
}

variable "max_room_bytes" {
  description = "MAX_ROOM_BYTES: Firestore storage size (bytes) of a room document before enqueue pushes back with 503; at most 1048576 (Firestore's 1 MiB document limit)."
  type        = number
  default     = 900000

  validation {
    condition     = var.max_room_bytes >= 1 && var.max_room_bytes <= 1048576
    error_message = "max_room_bytes must be 1..1048576: a room document cannot exceed Firestore's 1 MiB."
  }
}

variable "watchdog_grace_ms" {
  description = "WATCHDOG_GRACE_MS: ms a room's wake-up (wake_at_us) may be overdue before the every-minute watchdog sweep re-drives the room. A room with a lost timer waits at most about this plus one minute."
  type        = number
  default     = 60000

  validation {
    condition     = var.watchdog_grace_ms >= 1
    error_message = "watchdog_grace_ms must be at least 1."
  }
}

variable "sweep_concurrency" {
  description = "SWEEP_CONCURRENCY: rooms one watchdog sweep re-drives at a time (threads of the sweep function). 48: about 160 rescues/s while a call works, 120/s over its 45 s of each minute (docs/scale.md)."
  type        = number
  default     = 48

  validation {
    condition     = var.sweep_concurrency >= 1 && var.sweep_concurrency <= 64
    error_message = "sweep_concurrency must be from 1 to 64."
  }
}

variable "sweep_budget_s" {
  description = "SWEEP_BUDGET_S: s one watchdog sweep works before it leaves the rest for the next minute's; below function_timeout_seconds."
  type        = number
  default     = 45

  validation {
    condition     = var.sweep_budget_s >= 1
    error_message = "sweep_budget_s must be at least 1."
  }
}

variable "sweep_batch_size" {
  description = "SWEEP_BATCH_SIZE: overdue rooms one query of the watchdog sweep takes up, oldest first; it queries again until none is left or sweep_budget_s is spent."
  type        = number
  default     = 500

  validation {
    condition     = var.sweep_batch_size >= 1
    error_message = "sweep_batch_size must be at least 1."
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

  validation {
    condition     = can(regex("^https://[^/]+$", var.whatsapp_api_base))
    error_message = "whatsapp_api_base must be an https:// URL with no path or trailing slash."
  }
}

variable "whatsapp_api_version" {
  description = "WHATSAPP_API_VERSION: Graph API version of the send path."
  type        = string
  default     = "v21.0"
}

variable "whatsapp_phone_number_id" {
  description = "WHATSAPP_PHONE_NUMBER_ID: id of the sending WhatsApp Business phone number (Meta app dashboard, WhatsApp > API Setup; not a secret)."
  type        = string

  validation {
    condition     = can(regex("^[0-9]{5,20}$", var.whatsapp_phone_number_id))
    error_message = "whatsapp_phone_number_id is the numeric phone-number id of the Meta app dashboard, not the phone number."
  }
}

variable "whatsapp_senders" {
  description = "WHATSAPP_SENDERS: the WhatsApp numbers to send from, comma-separated phone_number_id[:rate] (rate in messages/s, default whatsapp_sender_rate); rooms are spread over them by rendezvous hash. Empty: whatsapp_phone_number_id alone. Add a number at the end; a room keeps its number while it holds messages."
  type        = string
  default     = ""

  validation {
    condition     = can(regex("^([0-9]{1,20}(:[0-9]+)?(,[0-9]{1,20}(:[0-9]+)?)*)?$", replace(var.whatsapp_senders, " ", "")))
    error_message = "whatsapp_senders is a comma-separated list of phone_number_id[:rate], e.g. 1000001:75,1000002:75."
  }
}

variable "whatsapp_sender_rate" {
  description = "WHATSAPP_SENDER_RATE: messages/s one WhatsApp number may send, shared by every instance (a little below the platform's 80/s default tier, or its upgraded 1,000/s tier); 0: not limited by baton."
  type        = number
  default     = 75

  validation {
    condition     = var.whatsapp_sender_rate >= 0 && floor(var.whatsapp_sender_rate) == var.whatsapp_sender_rate
    error_message = "whatsapp_sender_rate is a whole number of messages/s, 0 or more."
  }
}

variable "whatsapp_sent_proof" {
  description = "WHATSAPP_SENT_PROOF: \"on\" (default) lets a WhatsApp `sent` status record its attempt as taken by the platform when the attempt's send outcome is not known to be accepted (one read of the room per WhatsApp message, a blind write only then; docs/cost.md prices it), so an attempt whose send outcome was unknown times out instead of being sent twice; \"off\" only logs `sent`."
  type        = string
  default     = "on"

  validation {
    condition     = contains(["on", "off"], var.whatsapp_sent_proof)
    error_message = "whatsapp_sent_proof must be on or off."
  }
}

variable "platforms" {
  description = "PROVIDERS: the platforms this deployment sends to and takes webhooks from (whatsapp, messenger, instagram). Each one's secrets are created here and need a version before the functions deploy."
  type        = list(string)
  default     = ["whatsapp"]

  validation {
    condition     = length(var.platforms) > 0 && alltrue([for p in var.platforms : contains(["whatsapp", "messenger", "instagram"], p)])
    error_message = "platforms is a non-empty list of whatsapp, messenger, instagram."
  }
}

variable "messenger_page_id" {
  description = "MESSENGER_PAGE_ID: the Facebook Page that sends Messenger messages (not a secret); empty unless platforms has messenger."
  type        = string
  default     = ""

  validation {
    condition     = can(regex("^([0-9]{5,20})?$", var.messenger_page_id))
    error_message = "messenger_page_id is the numeric Page id, or empty."
  }
}

variable "instagram_account_id" {
  description = "INSTAGRAM_ACCOUNT_ID: the Instagram professional account that sends (not a secret); empty unless platforms has instagram."
  type        = string
  default     = ""

  validation {
    condition     = can(regex("^([0-9]{5,20})?$", var.instagram_account_id))
    error_message = "instagram_account_id is the numeric account id, or empty."
  }
}

variable "ack_levels" {
  description = "ACK_LEVEL_*: what acks a message, per platform: delivered (a delivered or read receipt), read, or accepted (the send's 2xx). The ack timeout is the backstop of every level."
  type        = object({ whatsapp = string, messenger = string, instagram = string })
  default     = { whatsapp = "delivered", messenger = "delivered", instagram = "read" }

  validation {
    condition     = alltrue([for level in values(var.ack_levels) : contains(["delivered", "read", "accepted"], level)])
    error_message = "each ack level is delivered, read or accepted."
  }
}

variable "watermark_margin_ms" {
  description = "WATERMARK_MARGIN_MS: ms past a send's return a Messenger watermark must be to ack it without mids (0..60000)."
  type        = number
  default     = 0

  validation {
    condition     = var.watermark_margin_ms >= 0 && var.watermark_margin_ms <= 60000 && floor(var.watermark_margin_ms) == var.watermark_margin_ms
    error_message = "watermark_margin_ms is a whole number of ms from 0 to 60000."
  }
}

variable "pacing" {
  description = "PACE_*: per platform, a room's pair-rate bucket: one token per interval_ms (0: off), at most burst kept. WhatsApp: about one message every 6 s to one user, bursts up to 45 (error 131056)."
  type = object({
    whatsapp  = object({ interval_ms = number, burst = number })
    messenger = object({ interval_ms = number, burst = number })
    instagram = object({ interval_ms = number, burst = number })
  })
  default = {
    whatsapp  = { interval_ms = 6000, burst = 45 }
    messenger = { interval_ms = 0, burst = 45 }
    instagram = { interval_ms = 0, burst = 45 }
  }

  validation {
    condition     = alltrue([for p in values(var.pacing) : p.interval_ms >= 0 && p.burst >= 1 && floor(p.interval_ms) == p.interval_ms && floor(p.burst) == p.burst])
    error_message = "pacing: interval_ms is a whole number of ms, 0 or more; burst a whole number, 1 or more."
  }
}

# ---------------------------------------------------- Pub/Sub, Cloud Tasks --

variable "push_ack_deadline_seconds" {
  description = "Seconds Pub/Sub waits for enqueue's (and deadletter's) answer before it redelivers the push (10..600); at least function_timeout_seconds."
  type        = number
  default     = 60

  validation {
    condition     = var.push_ack_deadline_seconds >= 10 && var.push_ack_deadline_seconds <= 600
    error_message = "push_ack_deadline_seconds must be 10..600 (Pub/Sub's limits)."
  }
}

variable "dead_letter_max_attempts" {
  description = "Push deliveries of one Pub/Sub message to enqueue before it goes to the dead-letter topic, where deadletter parks it in its room (5..100). 100, the maximum: with back-off up to 600 s, a room under back-pressure is retried for hours, not dead-lettered in minutes."
  type        = number
  default     = 100

  validation {
    condition     = var.dead_letter_max_attempts >= 5 && var.dead_letter_max_attempts <= 100
    error_message = "dead_letter_max_attempts must be 5..100 (Pub/Sub's limits)."
  }
}

variable "tasks_queue_count" {
  description = "Number of ack-timeout Cloud Tasks queues the functions write to (TASKS_QUEUE_COUNT). One queue dispatches at most 500 tasks/s; the code spreads rooms over the queues by a hash of the room id. Unset (null): derived from target_peak_messages_per_s (scale.tf). To lower it, keep the old queues as tasks_queues_retired until they are empty (docs/deploy.md, \"Fewer timer queues\")."
  type        = number
  default     = null

  validation {
    condition     = var.tasks_queue_count == null || (coalesce(var.tasks_queue_count, 1) >= 1 && coalesce(var.tasks_queue_count, 1) == floor(coalesce(var.tasks_queue_count, 1)))
    error_message = "tasks_queue_count must be a whole number, 1 or more (modules/sizing holds every queue count, set or derived, to Cloud Tasks' 1,000 queues per region)."
  }
}

variable "tasks_queues_retired" {
  description = "Queues kept after the tasks_queue_count active ones, written to by nobody, so the timers already scheduled on them still fire. Set it to the old count minus the new one when lowering tasks_queue_count, apply, wait until those queues are empty, then set it back to 0."
  type        = number
  default     = 0

  validation {
    condition     = var.tasks_queues_retired >= 0 && var.tasks_queues_retired <= 999 && var.tasks_queues_retired == floor(var.tasks_queues_retired)
    error_message = "tasks_queues_retired must be a whole number 0..999."
  }
}

variable "outbound_publishers" {
  description = "IAM principals (serviceAccount:..., group:..., user:..., principal://..., principalSet://...) that may publish to the outbound topic: the producers. Empty: only project-level roles can publish."
  type        = list(string)
  default     = []

  validation {
    condition     = alltrue([for m in var.outbound_publishers : can(regex("^(serviceAccount|group|user|domain|principal|principalSet):", m))])
    error_message = "outbound_publishers entries must be IAM principals such as serviceAccount:producer@PROJECT.iam.gserviceaccount.com (allUsers and allAuthenticatedUsers are refused)."
  }
}

# -------------------------------------------------------------- analytics --

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

variable "keep_request_logs_in_default_bucket" {
  description = "Keep Cloud Run's request logs of the seven functions (one entry per invocation) in the _Default log bucket, billed per GiB ingested (docs/cost.md). false: dropped there; the request metrics (run.googleapis.com/request_count, request_latencies), the alerts on them and the functions' own logs stay."
  type        = bool
  default     = false
}

variable "webhook_public_access" {
  description = "How the webhook is made public, since Meta cannot present a Google identity: \"all_users\" grants roles/run.invoker to allUsers; \"invoker_iam_check_disabled\" turns Cloud Run's invoker IAM check off on the webhook's service instead, for organisations whose Domain Restricted Sharing policy refuses allUsers (runs gcloud on the applying machine: docs/deploy.md)."
  type        = string
  default     = "all_users"

  validation {
    condition     = contains(["all_users", "invoker_iam_check_disabled"], var.webhook_public_access)
    error_message = "webhook_public_access must be all_users or invoker_iam_check_disabled."
  }
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

variable "webhook_mode" {
  description = "WEBHOOK_MODE: \"direct\" (the webhook applies statuses itself, the measured default: docs/architecture.md, Status webhooks) or \"queued\" (it publishes them to the statuses topic and answers; the `status` function applies them)."
  type        = string
  default     = "direct"

  validation {
    condition     = contains(["direct", "queued"], var.webhook_mode)
    error_message = "webhook_mode must be direct or queued."
  }
}

variable "status_max_attempts" {
  description = "STATUS_MAX_ATTEMPTS: failed deliveries of one status-queue message (errors other than transient ones) before the `status` function moves it to the error queue."
  type        = number
  default     = 5

  validation {
    condition     = var.status_max_attempts >= 1 && var.status_max_attempts <= 100
    error_message = "status_max_attempts must be 1..100."
  }
}

variable "status_dead_letter_max_attempts" {
  description = "Push deliveries of one status-queue message before Pub/Sub itself forwards it to the error queue (5..100): the last resort when the `status` function cannot be reached at all; above status_max_attempts so the function's own count, which keeps the error, comes first."
  type        = number
  default     = 100

  validation {
    condition     = var.status_dead_letter_max_attempts >= 5 && var.status_dead_letter_max_attempts <= 100
    error_message = "status_dead_letter_max_attempts must be 5..100 (Pub/Sub's limits)."
  }
}

# ------------------------------------------------------------ preparation --
# Messages with a `prepare` attribute (a media upload), prepared by the
# `prepare` function while the messages ahead of them are sent, and the
# producer `sequence` attribute (shared/config.py, docs/configuration.md).

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
  description = "PREPARE_POISON: what a message whose preparation keeps failing does when it reaches the head: \"dead_letter\" (it ends, kept for `baton redrive`; the room moves on) or \"park\" (it blocks its room until an operator redrives or skips it)."
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

# ----------------------------------------------------- alerts (operations.tf) --

variable "alert_notification_channels" {
  description = "Notification channel ids (projects/P/notificationChannels/N) the alert policies notify; empty: alerts show in the console only."
  type        = list(string)
  default     = []
}

variable "alert_watchdog_rescues" {
  description = "Watchdog rescues in 10 minutes above which the watchdog alert fires (a few are normal after an outage)."
  type        = number
  default     = 5
}

variable "alert_timed_out_share" {
  description = "Share (0-1) of ended messages that timed out over 15 minutes above which the timed-out alert fires."
  type        = number
  default     = 0.05
  validation {
    condition     = var.alert_timed_out_share > 0 && var.alert_timed_out_share < 1
    error_message = "alert_timed_out_share is a share between 0 and 1."
  }
}

variable "alert_oldest_unacked_s" {
  description = "Age in seconds of the oldest unacked message of the enqueue subscription above which its alert fires."
  type        = number
  default     = 300
}

variable "alert_function_5xx_per_s" {
  description = "5xx answers per second of any baton function (5-minute rate) above which the 5xx alert fires."
  type        = number
  default     = 0.1
}
