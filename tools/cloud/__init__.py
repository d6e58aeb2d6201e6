"""What users run against their own Google Cloud project: the functions' source archive Terraform uploads, and the cloud load test."""
