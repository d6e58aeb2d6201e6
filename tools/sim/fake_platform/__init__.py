"""The fake platform: a local HTTP server speaking the wire formats of the
WhatsApp Cloud API, the Messenger Send API and Instagram messaging.

The only home-made server of the project. It answers the send call
(`POST /{version}/{phone-number-id}/messages`) with a `wamid`, then posts
signed status webhooks (`X-Hub-Signature-256`) to the webhook URL, the way
Meta does: `sent` at once, then `delivered` and maybe `read` after a
log-normal delivery latency, for a share of messages only (the rest never get
an ack); sometimes `failed`, `read` without `delivered`, duplicated or
reordered webhooks; retried with backoff when the webhook does not answer 200.

Each recipient is a device that "receives" a message at its delivery time.
Messages waiting for the same device are delivered independently, so a burst
can arrive in any order (as Meta documents). The device log is how the demo
and the tests judge ordering: `GET /_fake/stats`.

The package, one module per concern:
- `config.py`: `FakeConfig`, how the fake behaves, and the check of a change;
- `core.py`: the shared state, the timeline of planned actions, signed
  webhook posting, stats and run-time config changes;
- `faults.py`: fault injection of the send call;
- `whatsapp.py`: the WhatsApp Cloud API (send, media upload, status webhooks);
- `meta_messaging.py`: the Messenger and Instagram send calls and their webhooks;
- `assets.py`: the files to fetch (`GET /assets/{name}`);
- `platform.py`: `FakeGraphApi`, the class made of the above;
- `server.py`: the HTTP handler and `main` (`python -m tools.sim.fake_platform`).

Run: `python -m tools.sim.fake_platform --port 8090 --webhook-url http://127.0.0.1:8081/`.
Change behaviour at run time: `POST /_fake/config` with a JSON subset of
`FakeConfig` (checked against its types); `POST /_fake/reset` clears the
records.
"""
