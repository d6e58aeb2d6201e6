# Producers publish here: ordering_key = room id; attributes room_id,
# provider, recipient, message_id (the push JSON of the emulator drops
# orderingKey, so the room travels as an attribute as well).
resource "google_pubsub_topic" "outbound" {
  # checkov:skip=CKV_GCP_83:Google-managed encryption at rest; the message bodies go to the platform anyway, CMEK is an option, not a need
  name                       = "${var.name_prefix}-outbound"
  labels                     = var.labels
  message_retention_duration = "86400s" # lets an operator seek the subscription back a day
  depends_on                 = [google_project_service.apis]
}

# roles/pubsub.publisher on the outbound topic for each producer identity in
# outbound_publishers, and nothing else: producers publish, they do not read
# subscriptions or administer the topic.
resource "google_pubsub_topic_iam_member" "producers_publish" {
  for_each   = toset(var.outbound_publishers)
  topic      = google_pubsub_topic.outbound.id
  role       = "roles/pubsub.publisher"
  member     = each.value
  depends_on = [time_sleep.identities_propagate]
}

# Pushes that failed dead_letter_max_attempts times land here, so a message
# that keeps failing frees its room's ordering key instead of blocking it;
# `deadletter` then parks it in its room (push["deadletter"] below).
resource "google_pubsub_topic" "dead_letter" {
  # checkov:skip=CKV_GCP_83:Google-managed encryption at rest; the message bodies go to the platform anyway, CMEK is an option, not a need
  name                       = "${var.name_prefix}-outbound-dead-letter"
  labels                     = var.labels
  message_retention_duration = "604800s"
  depends_on                 = [google_project_service.apis]
}

# The three ordered push subscriptions, one per function Pub/Sub pushes to,
# keyed by that function (google_pubsub_subscription.push below): what
# differs between them is here, with why; what they share is in the
# resource. Every one is ordered (one outstanding message per ordering key,
# in publish order), pushes the default wrapped JSON envelope ({"message":
# {...}, "subscription": ...}, which the functions parse) with an OIDC token
# of pubsub_push (the functions are not public; that identity is their
# invoker), backs off up to 600 s, the documented maximum
# (https://cloud.google.com/pubsub/docs/handling-failures), and never
# expires when idle. `name_suffix` and `topic` must never change for an existing
# key: Pub/Sub cannot rename a subscription or move it to another topic, so
# Terraform would replace it and its backlog would be lost.
locals {
  push_subscriptions = {
    # Ordered push to `enqueue`: the system's intake from the outbound topic.
    # A nack (enqueue answers 503 when a room holds MAX_QUEUED_MESSAGES or
    # MAX_ROOM_BYTES, or when it fails) is retried with exponential backoff
    # instead of at once, up to 600 s. With dead_letter_max_attempts at 100,
    # a room under back-pressure is retried for hours, not dead-lettered
    # within minutes; a message that keeps failing then frees its room's
    # ordering key (it goes to the dead-letter topic, below).
    enqueue = {
      name_suffix                = "enqueue-push"
      topic                      = google_pubsub_topic.outbound.id
      minimum_backoff            = "1s"
      dead_letter_topic          = google_pubsub_topic.dead_letter.id
      max_delivery_attempts      = var.dead_letter_max_attempts
      message_retention_duration = null # Pub/Sub's default, 7 days
    }

    # The dead-letter topic's consumer: ordered push to `deadletter`, which
    # parks each message at its place in its room; the room then waits,
    # blocked with a visible reason, until an operator redrives or skips it.
    # A message Pub/Sub dead-letters must never be skipped: it was accepted
    # from the producer, and the room's later messages must not overtake it
    # unnoticed. Pub/Sub dead-letters on a best-effort basis and may forward
    # the same message more than once (DeadLetterPolicy,
    # https://cloud.google.com/pubsub/docs/reference/rest/v1/projects.subscriptions#deadletterpolicy);
    # `deadletter` recognises a copy it already parked and acks it. Ordered,
    # so dead letters with their room as ordering key reach `deadletter` one
    # at a time per room and in order; where a message goes does not depend
    # on it (the room keeps a placeholder at the place of a push it refused).
    # Without a subscription, messages published to the dead-letter topic
    # would be lost. Retried with back-off up to 600 s, and never
    # dead-lettered again (no dead-letter topic): a message that cannot be
    # parked yet waits here. Unacknowledged messages are kept 7 days
    # (Pub/Sub allows up to 31): time for an operator to bring `deadletter`
    # back if it keeps failing.
    deadletter = {
      name_suffix                = "outbound-dead-letter-push"
      topic                      = google_pubsub_topic.dead_letter.id
      minimum_backoff            = "1s"
      dead_letter_topic          = null
      max_delivery_attempts      = null
      message_retention_duration = "604800s"
    }

    # The status queue's consumer (webhook_mode = "queued"): ordered push to
    # `status`. Transient failures (503) are retried with backoff for as long
    # as the dead-letter policy allows: 100 attempts at up to 600 s is many
    # hours; then Pub/Sub forwards the message to the error queue, the last
    # resort when `status` cannot be reached at all (status_max_attempts,
    # counted by the function itself, comes first).
    status = {
      name_suffix                = "status-push"
      topic                      = google_pubsub_topic.statuses.id
      minimum_backoff            = "10s"
      dead_letter_topic          = google_pubsub_topic.statuses_dead_letter.id
      max_delivery_attempts      = var.status_dead_letter_max_attempts
      message_retention_duration = null # Pub/Sub's default, 7 days
    }
  }
}

resource "google_pubsub_subscription" "push" {
  for_each                   = local.push_subscriptions
  name                       = "${var.name_prefix}-${each.value.name_suffix}"
  topic                      = each.value.topic
  labels                     = var.labels
  enable_message_ordering    = true
  ack_deadline_seconds       = var.push_ack_deadline_seconds
  message_retention_duration = each.value.message_retention_duration

  push_config {
    push_endpoint = google_cloudfunctions2_function.fn[each.key].service_config[0].uri
    # Authenticated push: the function is not public; its invoker is this identity.
    oidc_token {
      service_account_email = google_service_account.pubsub_push.email
      audience              = google_cloudfunctions2_function.fn[each.key].service_config[0].uri
    }
  }

  retry_policy {
    minimum_backoff = each.value.minimum_backoff
    maximum_backoff = "600s"
  }

  dynamic "dead_letter_policy" {
    for_each = each.value.dead_letter_topic == null ? [] : [each.value]
    content {
      dead_letter_topic     = dead_letter_policy.value.dead_letter_topic
      max_delivery_attempts = dead_letter_policy.value.max_delivery_attempts
    }
  }

  # A push subscription is an intake: it must never expire when idle.
  expiration_policy {
    ttl = ""
  }

  lifecycle {
    # A push still running when its deadline passes is pushed again.
    precondition {
      condition     = var.push_ack_deadline_seconds >= var.function_timeout_seconds
      error_message = "push_ack_deadline_seconds must be at least function_timeout_seconds."
    }
  }
}

# The subscriptions were three resources until 2026-11 (enqueue_push,
# dead_letter_push, status_push): these keep an existing deployment's
# subscriptions, and their backlogs, under their new addresses instead of
# destroying and recreating them (https://developer.hashicorp.com/terraform/language/modules/develop/refactoring).
moved {
  from = google_pubsub_subscription.enqueue_push
  to   = google_pubsub_subscription.push["enqueue"]
}

moved {
  from = google_pubsub_subscription.dead_letter_push
  to   = google_pubsub_subscription.push["deadletter"]
}

moved {
  from = google_pubsub_subscription.status_push
  to   = google_pubsub_subscription.push["status"]
}

# The Pub/Sub service agent forwards dead letters: it must publish to the
# dead-letter topic and acknowledge on the source subscription
# (https://cloud.google.com/pubsub/docs/handling-failures#grant_forwarding_permissions).

# roles/pubsub.publisher on the dead-letter topic only.
resource "google_pubsub_topic_iam_member" "agent_publishes_dead_letters" {
  topic      = google_pubsub_topic.dead_letter.id
  role       = "roles/pubsub.publisher"
  member     = local.pubsub_service_agent
  depends_on = [time_sleep.identities_propagate]
}

# roles/pubsub.subscriber on the push subscription only.
resource "google_pubsub_subscription_iam_member" "agent_acks_source" {
  subscription = google_pubsub_subscription.push["enqueue"].id
  role         = "roles/pubsub.subscriber"
  member       = local.pubsub_service_agent
  depends_on   = [time_sleep.identities_propagate]
}

# ------------------------------------------------- the status queue --
# webhook_mode = "queued" (docs/architecture.md, "Status webhooks"): the
# webhook publishes one message per room per payload here (ordering key =
# room id) and answers; `status` applies them. Created in both modes, so
# switching the mode is one variable.
resource "google_pubsub_topic" "statuses" {
  # checkov:skip=CKV_GCP_83:Google-managed encryption at rest; statuses carry delivery ids and platform message ids, no bodies
  name                       = "${var.name_prefix}-statuses"
  labels                     = var.labels
  message_retention_duration = "86400s"
  depends_on                 = [google_project_service.apis]
}

# The error queue (STATUS_TOPIC-dead-letter, the name shared/config.py derives):
# status-queue messages the `status` function failed on status_max_attempts
# times (it moves them here with the error), what Pub/Sub itself gives up on,
# and statuses no room can take. Kept 7 days by the pull subscription below;
# `baton statuses list|replay` reads it.
resource "google_pubsub_topic" "statuses_dead_letter" {
  # checkov:skip=CKV_GCP_83:Google-managed encryption at rest; statuses carry delivery ids and platform message ids, no bodies
  name                       = "${var.name_prefix}-statuses-dead-letter"
  labels                     = var.labels
  message_retention_duration = "604800s"
  depends_on                 = [google_project_service.apis]
}

# The error queue's consumer: a pull subscription that keeps what it holds
# for 7 days (the maximum), read by `baton statuses list|replay`. Acked
# messages are retained too, so a replay that went wrong can seek back and
# read them again (`gcloud pubsub subscriptions seek --time=...`).
resource "google_pubsub_subscription" "statuses_error_queue" {
  name                       = "${var.name_prefix}-statuses-error-queue"
  topic                      = google_pubsub_topic.statuses_dead_letter.id
  labels                     = var.labels
  ack_deadline_seconds       = 60
  message_retention_duration = "604800s"
  retain_acked_messages      = true

  expiration_policy {
    ttl = ""
  }
}

# roles/pubsub.publisher on the statuses topic and its error queue: in
# queued mode the webhook publishes statuses (and unroutable ones to the
# error queue); in direct mode it publishes nothing and gets nothing here.
# The `status` function moves failing messages to the error queue.
resource "google_pubsub_topic_iam_member" "webhook_publishes_statuses" {
  for_each = merge(var.webhook_mode == "queued" ? {
    "webhook-statuses"    = { fn = "webhook", topic = google_pubsub_topic.statuses.id }
    "webhook-error-queue" = { fn = "webhook", topic = google_pubsub_topic.statuses_dead_letter.id }
    } : {}, {
    "status-error-queue" = { fn = "status", topic = google_pubsub_topic.statuses_dead_letter.id }
  })
  topic      = each.value.topic
  role       = "roles/pubsub.publisher"
  member     = "serviceAccount:${google_service_account.function[each.value.fn].email}"
  depends_on = [time_sleep.identities_propagate]
}

# The Pub/Sub service agent forwards what it gives up on to the error queue.
resource "google_pubsub_topic_iam_member" "agent_publishes_status_dead_letters" {
  topic      = google_pubsub_topic.statuses_dead_letter.id
  role       = "roles/pubsub.publisher"
  member     = local.pubsub_service_agent
  depends_on = [time_sleep.identities_propagate]
}

resource "google_pubsub_subscription_iam_member" "agent_acks_status_source" {
  subscription = google_pubsub_subscription.push["status"].id
  role         = "roles/pubsub.subscriber"
  member       = local.pubsub_service_agent
  depends_on   = [time_sleep.identities_propagate]
}
