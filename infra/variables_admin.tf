# Variables of the admin function (admin.tf).

variable "operators" {
  description = "Who may call the admin function (the `baton` CLI): IAM members given roles/run.invoker on it, e.g. [\"group:oncall@example.com\", \"user:alice@example.com\"]. Empty: nobody (the function is deployed, and private). Members of the form user: and serviceAccount: are also written to ADMIN_OPERATORS, which the function checks itself; group: and domain: members are left to IAM (a token does not list its groups)."
  type        = list(string)
  default     = []

  validation {
    condition     = alltrue([for m in var.operators : can(regex("^(user|group|serviceAccount|domain):[^\\s:]+$", m))])
    error_message = "operators: each one user:EMAIL, group:EMAIL, serviceAccount:EMAIL or domain:DOMAIN (never allUsers or allAuthenticatedUsers)."
  }
}

variable "admin_token_audiences" {
  description = "ID-token audiences the admin function accepts besides its own URLs: the OAuth client ids whose tokens a person's gcloud gives (`gcloud auth print-identity-token`: 32555940559.apps.googleusercontent.com; Application Default Credentials: 764086051850-6qr4p6gpi6hn506pt8ejuq83di341hur.apps.googleusercontent.com). Cloud Run's IAM checks the caller first either way."
  type        = list(string)
  default     = ["32555940559.apps.googleusercontent.com", "764086051850-6qr4p6gpi6hn506pt8ejuq83di341hur.apps.googleusercontent.com"]
}
