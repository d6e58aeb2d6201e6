# The platform's credentials. Terraform creates the secrets, never their
# values: add a version in the console or with `gcloud secrets versions add`
# before the functions are deployed (docs/deploy.md, "Secrets first").
locals {
  # Environment variable (shared/config.py SECRET_ENV_VARS) -> secret name and
  # the platform it belongs to. Only the platforms in var.platforms get their
  # secrets (and need a version before the functions deploy).
  all_secrets = {
    WHATSAPP_ACCESS_TOKEN  = { name = "whatsapp-access-token", provider = "whatsapp" }   # bearer token of the send call
    WHATSAPP_APP_SECRET    = { name = "whatsapp-app-secret", provider = "whatsapp" }     # HMAC key of X-Hub-Signature-256
    WHATSAPP_VERIFY_TOKEN  = { name = "whatsapp-verify-token", provider = "any" }        # token of the GET subscribe handshake (one webhook URL for every app)
    MESSENGER_ACCESS_TOKEN = { name = "messenger-access-token", provider = "messenger" } # Page access token of the Send API
    MESSENGER_APP_SECRET   = { name = "messenger-app-secret", provider = "messenger" }   # the Messenger app's signing key
    INSTAGRAM_ACCESS_TOKEN = { name = "instagram-access-token", provider = "instagram" } # Instagram messaging token
    INSTAGRAM_APP_SECRET   = { name = "instagram-app-secret", provider = "instagram" }   # the Instagram app's signing key
  }
  secrets = { for env, s in local.all_secrets : env => s.name if contains(concat(var.platforms, ["any"]), s.provider) }
  # Which function reads which secret, and only those are mounted and
  # granted: every function that applies room events may send (access
  # tokens): sweep re-drives a room, which can resend its message, and
  # deadletter runs the same room rules and effects as enqueue. Only the
  # webhook checks signatures and answers the handshake; in queued mode it
  # sends nothing, so it does not get the access tokens. A secret of a
  # platform not in var.platforms is neither created nor mounted (the code
  # then refuses that app's webhooks: PROVIDERS).
  sending_secrets = ["WHATSAPP_ACCESS_TOKEN", "MESSENGER_ACCESS_TOKEN", "INSTAGRAM_ACCESS_TOKEN"]
  webhook_secrets = {
    direct = ["WHATSAPP_ACCESS_TOKEN", "WHATSAPP_APP_SECRET", "WHATSAPP_VERIFY_TOKEN", "MESSENGER_ACCESS_TOKEN", "MESSENGER_APP_SECRET", "INSTAGRAM_ACCESS_TOKEN", "INSTAGRAM_APP_SECRET"]
    queued = ["WHATSAPP_APP_SECRET", "WHATSAPP_VERIFY_TOKEN", "MESSENGER_APP_SECRET", "INSTAGRAM_APP_SECRET"]
  }
  function_secrets = {
    enqueue    = local.sending_secrets
    deadletter = local.sending_secrets
    webhook    = local.webhook_secrets[var.webhook_mode]
    status     = local.sending_secrets
    timeout    = local.sending_secrets
    sweep      = local.sending_secrets
    prepare    = local.sending_secrets # the media upload is a platform call with the access token; it may start a send
  }
  mounted_secrets = { for fn, names in local.function_secrets : fn => [for n in names : n if contains(keys(local.secrets), n)] }
  secret_grants   = { for pair in flatten([for fn, names in local.mounted_secrets : [for n in names : { fn = fn, env = n }]]) : "${pair.fn}-${pair.env}" => pair }
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
