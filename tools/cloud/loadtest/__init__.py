"""`make loadtest-cloud PROJECT=...`: prove the numbers on your own project.

Deploys the fake platform (tools/sim/fake_platform, which speaks the Graph API's
wire formats) as a Cloud Run service, points a separate `name_prefix`
deployment of baton at it, publishes ROOMS x MESSAGES at RATE messages/s,
waits for the rooms to drain, and prints the same verdict as `make chaos`
(tools/local/chaos_check.py) from the fake's record and the delivery event log,
plus Cloud Monitoring's figures for the run. Then it tears down what it
made. docs/loadtest.md is the user's guide.

Modules: `plan` (every step as data: the commands and API calls, pure),
`__main__` (arguments; `--dry-run` prints the plan, otherwise runs it),
`publish` (the paced publisher the plan's publish step runs).
"""
