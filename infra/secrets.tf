# The platform's credentials. Terraform creates the secrets, never their
# values: add a version in the console or with `gcloud secrets versions add`
# before the functions are deployed (docs/deploy.md, "Secrets first").
locals {
  # Environment variable (shared/config.py SECRET_ENV_VARS) -> secret name.
  secrets = {
    WHATSAPP_ACCESS_TOKEN = "whatsapp-access-token" # bearer token of the send call
    WHATSAPP_APP_SECRET   = "whatsapp-app-secret"   # HMAC key of X-Hub-Signature-256
    WHATSAPP_VERIFY_TOKEN = "whatsapp-verify-token" # token of the GET subscribe handshake
  }
  # Which function reads which secret, and only those are mounted and
  # granted: every function that applies room events may send (access
  # token): sweep re-drives a room, which can resend its message, and
  # deadletter runs the same room rules and effects as enqueue. Only the
  # webhook checks signatures and answers the handshake; in queued mode it
  # sends nothing, so it does not get the access token.
  webhook_secrets = {
    direct = ["WHATSAPP_ACCESS_TOKEN", "WHATSAPP_APP_SECRET", "WHATSAPP_VERIFY_TOKEN"]
    queued = ["WHATSAPP_APP_SECRET", "WHATSAPP_VERIFY_TOKEN"]
  }
  function_secrets = {
    enqueue    = ["WHATSAPP_ACCESS_TOKEN"]
    deadletter = ["WHATSAPP_ACCESS_TOKEN"]
    webhook    = local.webhook_secrets[var.webhook_mode]
    status     = ["WHATSAPP_ACCESS_TOKEN"]
    timeout    = ["WHATSAPP_ACCESS_TOKEN"]
    sweep      = ["WHATSAPP_ACCESS_TOKEN"]
  }
  secret_grants = { for pair in flatten([for fn, names in local.function_secrets : [for n in names : { fn = fn, env = n }]]) : "${pair.fn}-${pair.env}" => pair }
}

resource "google_secret_manager_secret" "platform" {
  for_each  = local.secrets
  secret_id = "${var.name_prefix}-${each.value}"
  labels    = var.labels

  replication {
    auto {}
  }

  depends_on = [google_project_service.apis]
}

# roles/secretmanager.secretAccessor on each secret a function reads, only.
resource "google_secret_manager_secret_iam_member" "function_reads" {
  for_each   = local.secret_grants
  secret_id  = google_secret_manager_secret.platform[each.value.env].id
  role       = "roles/secretmanager.secretAccessor"
  member     = "serviceAccount:${google_service_account.function[each.value.fn].email}"
  depends_on = [time_sleep.identities_propagate]
}
