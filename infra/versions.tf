terraform {
  # Lifecycle preconditions need 1.2; 1.5 is the oldest release this was
  # written against (terraform fmt of 1.11 runs offline in make test-infra).
  required_version = ">= 1.5.0, < 2.0.0"

  required_providers {
    google = {
      source = "hashicorp/google"
      # 6.10 is the oldest release with everything used here
      # (build_config.service_account on 2nd gen functions, Firestore
      # deletion_policy, TTL fields). Every argument was checked against the
      # 7.x schema too; 7.0's breaking changes touch none of these resources.
      # A new major version may rename arguments: upgrade on purpose.
      version = ">= 6.10.0, < 8.0.0"
    }
  }
}

provider "google" {
  project = var.project_id
  region  = var.region
  # Firebase Rules (firestore.tf) rejects user credentials without a quota
  # project; bill those calls to this project (docs/deploy.md, prerequisites).
  user_project_override = true
  billing_project       = var.project_id
}
