# Producers publish here: ordering_key = room id; attributes room_id,
# provider, recipient, message_id (see README "Publishing").
resource "google_pubsub_topic" "outbound" {
  # checkov:skip=CKV_GCP_83:Google-managed encryption at rest; message bodies are chat text the platform receives anyway, CMEK is an option, not a need
  name                       = "${var.name_prefix}-outbound"
  labels                     = var.labels
  message_retention_duration = "86400s"
  depends_on                 = [google_project_service.apis]
}

# Pushes that failed dead_letter_max_attempts times land here, so a message
# that keeps failing frees its ordering key instead of blocking the room.
resource "google_pubsub_topic" "dead_letter" {
  # checkov:skip=CKV_GCP_83:Google-managed encryption at rest; message bodies are chat text the platform receives anyway, CMEK is an option, not a need
  name                       = "${var.name_prefix}-outbound-dead-letter"
  labels                     = var.labels
  message_retention_duration = "604800s"
  depends_on                 = [google_project_service.apis]
}

# Ordered push to `enqueue`: one outstanding message per room, in publish order.
resource "google_pubsub_subscription" "enqueue_push" {
  name                    = "${var.name_prefix}-enqueue-push"
  topic                   = google_pubsub_topic.outbound.id
  labels                  = var.labels
  enable_message_ordering = true
  ack_deadline_seconds    = var.push_ack_deadline_seconds

  push_config {
    push_endpoint = google_cloudfunctions2_function.fn["enqueue"].service_config[0].uri
    oidc_token {
      service_account_email = google_service_account.pubsub_push.email
      audience              = google_cloudfunctions2_function.fn["enqueue"].service_config[0].uri
    }
  }

  retry_policy {
    minimum_backoff = "1s"
    maximum_backoff = "60s"
  }

  dead_letter_policy {
    dead_letter_topic     = google_pubsub_topic.dead_letter.id
    max_delivery_attempts = var.dead_letter_max_attempts
  }

  expiration_policy {
    ttl = "" # never expires
  }
}

# Keeps dead letters (7 days) for inspection and redrive.
resource "google_pubsub_subscription" "dead_letter_keep" {
  name                       = "${var.name_prefix}-outbound-dead-letter-keep"
  topic                      = google_pubsub_topic.dead_letter.id
  labels                     = var.labels
  message_retention_duration = "604800s"
  ack_deadline_seconds       = 60

  expiration_policy {
    ttl = ""
  }
}

# The Pub/Sub service agent forwards dead letters: it must publish to the
# dead-letter topic and acknowledge on the source subscription
# (https://cloud.google.com/pubsub/docs/handling-failures#grant_forwarding_permissions).
resource "google_pubsub_topic_iam_member" "agent_publishes_dead_letters" {
  topic  = google_pubsub_topic.dead_letter.id
  role   = "roles/pubsub.publisher"
  member = local.pubsub_service_agent
}

resource "google_pubsub_subscription_iam_member" "agent_acks_source" {
  subscription = google_pubsub_subscription.enqueue_push.id
  role         = "roles/pubsub.subscriber"
  member       = local.pubsub_service_agent
}
