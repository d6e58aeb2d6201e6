"""The `admin` function: every listing and action of the `baton` CLI, run
server-side with the deployment's own settings and secrets, for a caller
whose Google identity it verifies.

- `service.py`: one request: verify the caller, parse, run the action, answer,
  and write the audit line;
- `identity.py`: the caller's verified identity (Google ID token; the local
  stack's stand-in);
- `actions.py`: the actions, by the name the CLI sends;
- `overview.py`: `baton status`;
- `incident.py`: the deployment-wide switch that holds every new send;
- `error_queue.py`: the status error queue (list, replay).

Import `shared.admin.service.AdminService` (this package imports nothing, so
the service's send path can import `incident` alone).
"""
