terraform {
  required_version = ">= 1.5.0, < 2.0.0"

  required_providers {
    google = {
      source = "hashicorp/google"
      # 6.x has google_cloudfunctions2_function with secret env vars,
      # google_firestore_field TTL and Pub/Sub dead-letter policies.
      version = ">= 6.10.0, < 7.0.0"
    }
  }
}

provider "google" {
  project = var.project_id
  region  = var.region
}
