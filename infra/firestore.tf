# Room state (native mode): one document per room (`rooms/{room}`), send
# receipts (`rooms/{room}/sends/{seq}-{attempt}`), pushes kept as invalid
# (`rejected_messages`) and messages baton gave up on (`dead_letters`).
resource "google_firestore_database" "main" {
  project     = var.project_id
  name        = "(default)"
  location_id = var.firestore_location
  type        = "FIRESTORE_NATIVE"
  # shared/store.py commits a room with a conditional write (update_time
  # precondition) after a plain read, never a locking transaction: optimistic
  # mode keeps any transaction from taking locks on the rooms' documents.
  concurrency_mode            = "OPTIMISTIC"
  app_engine_integration_mode = "DISABLED"
  delete_protection_state     = var.deletion_protection ? "DELETE_PROTECTION_ENABLED" : "DELETE_PROTECTION_DISABLED"
  # ABANDON: `terraform destroy` leaves a protected database in place.
  deletion_policy = var.deletion_protection ? "ABANDON" : "DELETE"

  depends_on = [google_project_service.apis]
}

# Every document carries `expire_at` (RETENTION_HOURS after its last change);
# a TTL policy per collection group deletes it within about 24 h after that
# (https://cloud.google.com/firestore/docs/ttl). Rooms live up to an hour.
resource "google_firestore_field" "ttl" {
  for_each   = toset(["rooms", "sends", "rejected_messages", "dead_letters"])
  project    = var.project_id
  database   = google_firestore_database.main.name
  collection = each.value
  field      = "expire_at"

  ttl_config {}
  # No single-field index on a timestamp nobody queries: an index on a
  # steadily increasing value is also a write hotspot.
  index_config {}
}

# Client SDKs (web, mobile) get nothing: only the functions' service
# accounts, through IAM, use this database.
resource "google_firebaserules_ruleset" "deny_all" {
  project = var.project_id
  source {
    files {
      name    = "firestore.rules"
      content = <<-RULES
        rules_version = '2';
        service cloud.firestore {
          match /databases/{database}/documents {
            match /{document=**} {
              allow read, write: if false;
            }
          }
        }
      RULES
    }
  }
  depends_on = [google_firestore_database.main]
}

# The release named `cloud.firestore` is what the (default) database enforces.
resource "google_firebaserules_release" "firestore" {
  project      = var.project_id
  name         = "cloud.firestore"
  ruleset_name = "projects/${var.project_id}/rulesets/${google_firebaserules_ruleset.deny_all.name}"

  lifecycle {
    # A changed ruleset is a new one; the release must move to it before the
    # old ruleset can be deleted.
    replace_triggered_by = [google_firebaserules_ruleset.deny_all]
  }
}
