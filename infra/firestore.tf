# Room state (native mode): one document per room (`rooms/{room}`: its queue,
# the message in flight, send outcomes, de-duplication ids, and the pushes
# Pub/Sub dead-lettered, parked with their body at their place in the queue),
# pushes kept as invalid (`rejected_messages`) and messages baton gave up on
# (`dead_letters`).
#
# var.firestore_database: "(default)" for the first (or only) deployment in a
# project; a named database for a second one beside it, so each keeps its
# own rooms, rules and TTL policies (docs/deploy.md, "Two deployments in one
# project"). The functions' grant is limited to this database (iam.tf).
resource "google_firestore_database" "main" {
  project     = var.project_id
  name        = var.firestore_database
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

# TTL on `expire_at`, per collection group: a document is deleted within
# about 24 h after the time there (https://cloud.google.com/firestore/docs/ttl).
# The code sets it RETENTION_HOURS after the last change, and on a room only
# while the room is idle: a room that holds a message (in flight, queued,
# parked or awaited) has `expire_at = null`, and TTL never deletes a document
# whose field is null or missing. A parked message lives in its room's queue,
# so its room keeps no expiry until an operator has resolved it. Rooms live
# up to an hour.
resource "google_firestore_field" "ttl" {
  for_each   = toset(["rooms", "rejected_messages", "dead_letters", "status_failures", "scheduled_cancels"])
  project    = var.project_id
  database   = google_firestore_database.main.name
  collection = each.value
  field      = "expire_at"

  ttl_config {}
  # No single-field index on a timestamp nobody queries: an index on a
  # steadily increasing value is also a write hotspot.
  index_config {}
}

# Single-field index exemptions on the room document's large fields, which
# nothing queries: every write of a room would otherwise update an index
# entry per array element and map subfield of its queue, its ended list and
# its counts, paying for them and bringing a full room towards Firestore's
# 40,000 index entries per document
# (https://cloud.google.com/firestore/quotas#indexes). An empty index_config
# turns off every single-field index of a field, its subfields included.
# `accepted` (send acceptances written blind, one new key per attempt) and
# `echoes` (Messenger and Instagram echoes, and WhatsApp `sent` statuses of
# attempts whose send outcome is not known when whatsapp_sent_proof is on,
# written blind the same way) are
# exempt for the same reason, and so is `outbox` (shared/outbox.py: the
# last write's event lines, `{write key: [record, ...]}`, a new key every
# write, each record holding the room's `incarnation`, a time; read back
# with the document, never queried). `recent_ids` is no longer written, but rooms
# stored by an older version keep it (the code updates a room field by
# field) until TTL deletes them.
#
# Also exempt: every top-level scalar of a room that no query reads
# (`incarnation` is the room's creation time, `gap_due_us` a due time,
# `pace.at_us` a time: indexed, each would be a sequential index). And the
# time-valued fields the queries do read (shared/shards.py: `wake_at_us`
# for the watchdog, `head_since_us` and `paused_at_us` for the operators'
# listings) lose their single-field index too: they are indexed only behind
# the room's `shard`, by the composite indexes below. tests/infra holds this
# list to the code: a room field written with near-sequential values must be
# exempt or sharded.
#
# Indexed: `parked` (a small count: its writes spread over every room's id,
# no sequential range) and `in_flight_to` (`{provider}:{recipient}` of the
# message in flight: a Messenger or Instagram receipt names only the
# recipient, and finds its rooms by an equality query on it), and
# `in_flight_from` (the WhatsApp phone-number id of the attempt in flight: a
# handful of values, each index range spread over the rooms' ids; the
# console counts and lists the rooms per sending number by equality), and
# `last_receipt` (shared/outbox.py RECEIPT: a hash of the receipt the room's
# last write applied, or null: random values, no sequential range; a
# receipt's lookup is one OR query, `in_flight_to == key OR last_receipt ==
# digest`, each equality served by its field's automatic single-field index,
# https://firebase.google.com/docs/firestore/query-data/queries#or_queries,
# so its redelivery finds the idle room whose last write it made), and
# `swept_at_us` (shared/outbox.py SWEPT: when a watchdog sweep's write left
# the room idle, epoch us; absent from every other write, so only those
# rooms are in its index; each sweep asks `swept_at_us >= now -
# SWEEP_REREAD_S` on its automatic single-field index, shared/swept_rooms.py,
# so a dead sweep's idle rooms are read again and their lines logged). A time,
# left unsharded: written at most at the sweep's rate (SWEEP_CONCURRENCY
# rooms at a time, 64 at most, ~210 writes/s after a regional incident), below the
# 500 writes/s of a sequential range (tests/infra/test_sequential_indexes.py).
resource "google_firestore_field" "room_unindexed" {
  for_each = toset([
    "pending", "recent_ids", "ended", "counts", "in_flight", "awaiting", "accepted", "echoes", "held",
    "incarnation", "next_seq", "blocked_reason", "paused_by", "paused_reason", "pace", "next_sequence",
    "gap_due_us", "write_id", "shard", "wake_at_us", "head_since_us", "paused_at_us", "outbox",
  ])
  project    = var.project_id
  database   = google_firestore_database.main.name
  collection = "rooms"
  field      = each.value

  index_config {}
}

# The sharded indexes (shared/shards.py): (shard, field), each shard its own
# index range with Firestore's 500 writes/s of a sequential index
# (https://cloud.google.com/firestore/docs/solutions/shard-timestamp). A query
# asks `shard == i` with a range on the field, ordered by the field and the
# document id (which every index ends with:
# https://cloud.google.com/firestore/docs/query-data/index-overview).
resource "google_firestore_index" "room_sharded" {
  for_each    = toset(["wake_at_us", "head_since_us", "paused_at_us"])
  project     = var.project_id
  database    = google_firestore_database.main.name
  collection  = "rooms"
  query_scope = "COLLECTION"

  fields {
    field_path = "shard"
    order      = "ASCENDING"
  }
  fields {
    field_path = each.value
    order      = "ASCENDING"
  }
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

# The release named `cloud.firestore` is what the (default) database
# enforces; a named database enforces `cloud.firestore/DATABASE`.
resource "google_firebaserules_release" "firestore" {
  project      = var.project_id
  name         = google_firestore_database.main.name == "(default)" ? "cloud.firestore" : "cloud.firestore/${google_firestore_database.main.name}"
  ruleset_name = "projects/${var.project_id}/rulesets/${google_firebaserules_ruleset.deny_all.name}"

  lifecycle {
    # A changed ruleset is a new one; the release must move to it before the
    # old ruleset can be deleted.
    replace_triggered_by = [google_firebaserules_ruleset.deny_all]
  }
}

# The per-sender window documents (shared/sender_window.py): `last_us`, when a
# slot was last taken, is written up to the number's rate per second and never
# queried; indexed, every number's sends would write the head of one
# sequential index range (500 writes/s).
resource "google_firestore_field" "sender_window_unindexed" {
  project    = var.project_id
  database   = google_firestore_database.main.name
  collection = "sender_windows"
  field      = "last_us"

  index_config {}
}
