# What baton tells the company's other services (issue 44, items 4 and 5):
# the `inbound` topic (signed webhook posts holding items baton does not
# consume: messages people wrote, reactions, postbacks, other fields; the
# body unchanged, shared/service/inbound.py) and the `outcomes` topic (each
# message's end, ordering key = room id, shared/outcomes.py). Consumers
# attach their own subscriptions (ordered, to keep each person's or each
# room's order): docs/deploy.md, "Moving a webhook consumer onto the
# inbound topic" and "Delivery outcomes".

resource "google_pubsub_topic" "inbound" {
  # checkov:skip=CKV_GCP_83:Google-managed encryption at rest; the bodies are Meta's webhooks, which reached a public URL over TLS
  name                       = "${var.name_prefix}-inbound"
  labels                     = var.labels
  message_retention_duration = "604800s" # a consumer that attaches late can seek back a week
  depends_on                 = [google_project_service.apis]
}

resource "google_pubsub_topic" "outcomes" {
  # checkov:skip=CKV_GCP_83:Google-managed encryption at rest; outcomes carry ids, statuses and timings, no bodies
  name                       = "${var.name_prefix}-outcomes"
  labels                     = var.labels
  message_retention_duration = "604800s"
  depends_on                 = [google_project_service.apis]
}

# roles/pubsub.publisher on the inbound topic for the webhook only (it
# forwards in both webhook modes; in queued mode what the topic does not take
# goes to the status error queue, which it may publish to already).
resource "google_pubsub_topic_iam_member" "webhook_publishes_inbound" {
  topic      = google_pubsub_topic.inbound.id
  role       = "roles/pubsub.publisher"
  member     = "serviceAccount:${google_service_account.function["webhook"].email}"
  depends_on = [time_sleep.identities_propagate]
}

# roles/pubsub.publisher on the outcomes topic for every identity that
# applies room events (a message ends there) and the admin function (an
# operator's skip; `baton outcomes replay`); none when publish_outcomes is off.
resource "google_pubsub_topic_iam_member" "functions_publish_outcomes" {
  for_each = var.publish_outcomes ? merge(
    { for fn in local.stateful_functions : fn => "serviceAccount:${google_service_account.function[fn].email}" },
    { admin = "serviceAccount:${google_service_account.admin.email}" }
  ) : {}
  topic      = google_pubsub_topic.outcomes.id
  role       = "roles/pubsub.publisher"
  member     = each.value
  depends_on = [time_sleep.identities_propagate]
}
