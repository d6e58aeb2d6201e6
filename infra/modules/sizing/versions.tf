terraform {
  # No provider: `terraform init` and `terraform plan` of this module run with
  # no registry at all (tests/infra/test_sizing.py, `make scale-table`).
  # terraform_data needs 1.4; output preconditions 1.2.
  required_version = ">= 1.5.0, < 2.0.0"
}
