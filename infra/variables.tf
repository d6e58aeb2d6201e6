# The root module's variables, one file per concern (terraform-google-modules
# keep variables.tf; a module this size splits it): the project here, then
# variables_functions.tf (Cloud Run sizing of the functions),
# variables_delivery.tf (the room's timing and limits, shared/config.py),
# variables_platforms.tf (WhatsApp, Messenger, Instagram and their acks),
# variables_queues.tf (Pub/Sub and Cloud Tasks), variables_webhook.tf (how
# statuses come in), variables_preparation.tf, variables_analytics.tf (logs,
# buckets, Dataproc) and variables_operations.tf (alerts). The sizing's own
# variables are in scale.tf. tests/infra checks that no other file declares one.

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
