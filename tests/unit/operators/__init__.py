"""What operators use: the console, the admin function's parts, the statuses replay, the metrics infra/operations.tf derives from event lines."""
