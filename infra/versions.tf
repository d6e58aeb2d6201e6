terraform {
  # Lifecycle preconditions need 1.2, terraform_data 1.4; 1.5 is the oldest
  # release this was written against (terraform fmt of 1.11 runs offline in
  # make test-infra).
  required_version = ">= 1.5.0, < 2.0.0"

  # Exact versions: `make test-infra` checks every resource, argument and
  # block of this module against these versions' schemas (the CDKTF bindings
  # on PyPI, tests/infra/provider_schema.py), and .terraform.lock.hcl pins
  # them with their checksums. 6.50.0 is the last google release with
  # published bindings. Upgrading is deliberate: change the version here, in
  # .terraform.lock.hcl (`terraform init -upgrade`) and in PROVIDERS of
  # tests/infra/provider_schema.py, which the tests keep in step.
  required_providers {
    google = {
      source  = "hashicorp/google"
      version = "6.50.0"
    }
    # Only for google_project_service_identity (iam.tf), which the GA
    # provider does not have: it creates the Google-managed service agents
    # up front, so the grants to them do not fail on a new project.
    google-beta = {
      source  = "hashicorp/google-beta"
      version = "6.50.0"
    }
    # time_sleep (iam.tf): waits the provider and IAM document for new
    # identities and grants to become usable.
    time = {
      source  = "hashicorp/time"
      version = "0.13.1"
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

provider "google-beta" {
  project               = var.project_id
  region                = var.region
  user_project_override = true
  billing_project       = var.project_id
}
