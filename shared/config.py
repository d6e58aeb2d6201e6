"""The one place that reads baton's configuration from the environment.

Every setting has a default that works on the local emulator stack (`make up`);
in the cloud, Terraform (infra/) sets each of them on the functions. Secrets
(`WHATSAPP_ACCESS_TOKEN`, `WHATSAPP_APP_SECRET`, `WHATSAPP_VERIFY_TOKEN`) come
from Secret Manager as secret environment variables, never plain ones.

The Google client libraries read `FIRESTORE_EMULATOR_HOST` and
`PUBSUB_EMULATOR_HOST` themselves; baton reads `CLOUD_TASKS_EMULATOR_HOST`
because the Cloud Tasks client has no emulator switch of its own.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, fields

from shared.events import quiet_rules
from shared.senders import SenderSpec, parse_senders

# Names of every environment variable the code reads, with its default and what
# it means. infra/ and docs/configuration.md are checked against it.
ENV_VARS: dict[str, tuple[str, str]] = {
    "GOOGLE_CLOUD_PROJECT": ("baton-local", "GCP project id (Firestore, Pub/Sub, Cloud Tasks)"),
    "FIRESTORE_DATABASE": ("(default)", "Firestore database id"),
    "CLOUD_TASKS_EMULATOR_HOST": ("", "host:port of gcloud-tasks-emulator; empty in the cloud"),
    "TASKS_LOCATION": ("us-central1", "Cloud Tasks location of the ack-timeout queues"),
    "TASKS_QUEUE_PREFIX": ("baton-ack-timeouts", "queue name prefix; queues are PREFIX-0 .. PREFIX-(N-1)"),
    "TASKS_QUEUE_COUNT": ("1", "number of ack-timeout queues, rooms spread over them by hash (500 dispatches/s each)"),
    "TIMEOUT_URL": ("http://127.0.0.1:8082/", "URL of the `timeout` function that Cloud Tasks calls"),
    "TASKS_SERVICE_ACCOUNT": ("", "service account whose OIDC token Cloud Tasks attaches; empty locally"),
    "ACK_TIMEOUT_MS": ("3000", "ms a sent message holds its room after its send call returned, unless acked or failed first"),
    "SEND_TIMEOUT_MS": ("2000", "ms one send call may take in all (in-call reconnects included); below ACK_TIMEOUT_MS"),
    "SEND_START_DEADLINE_MS": ("2000", "ms after the room's decision by which a send call must have started; later it is not made"),
    "FIRST_TIMER_SLACK_MS": ("0", "ms added to an attempt's first timer past decision + ACK_TIMEOUT_MS (0: at the deadline; a send that returned later re-arms it)"),
    "MAX_SEND_ATTEMPTS": ("5", "send attempts of one message before it is dead-lettered"),
    "SEND_RETRY_BASE_MS": ("1000", "ms before the first resend after a transient platform error; x4 per attempt"),
    "DEDUP_RETENTION": ("1000", "ended message ids remembered per room for de-duplication, besides every message it holds"),
    "MAX_QUEUED_MESSAGES": ("1000", "messages a room may hold before enqueue pushes back (503)"),
    "MAX_ROOM_BYTES": ("900000", "Firestore storage size (bytes) of a room document before enqueue pushes back; limit 1 MiB"),
    "WATCHDOG_GRACE_MS": ("60000", "ms a room's wake-up may be overdue before the watchdog sweep re-drives it"),
    "SWEEP_BATCH_SIZE": ("500", "overdue rooms one query of the watchdog sweep takes up (oldest first); it asks for the next page (after the rooms the last one gave, rescued or not) until none is left or its budget is spent"),
    "SWEEP_CONCURRENCY": ("16", "rooms one watchdog sweep re-drives at a time"),
    "INDEX_SHARDS": ("16", "shards of the rooms' time-valued indexes (wake_at_us, head_since_us, paused_at_us): a room's "
                     "`shard` is a hash of its id modulo this; each shard takes Firestore's 500 writes/s of a "
                     "sequential index (shared/shards.py). Raise only"),
    "SWEEP_REREAD_S": ("180", "s back a watchdog sweep looks for rooms earlier sweeps left idle (their last write, "
                       "`swept_at_us`), to read them again: a sweep that died after its commit is not redelivered, "
                       "and the read logs the lines it left (shared/outbox.py); a few sweep intervals (1 min)"),
    "SWEEP_BUDGET_S": ("45", "s a watchdog sweep works before it leaves the rest for the next one (below the function timeout)"),
    "RETENTION_HOURS": ("48", "hours after its last change that a document's TTL field points to"),
    "WHATSAPP_API_BASE": ("http://127.0.0.1:8090", "base URL of the WhatsApp Cloud API (https://graph.facebook.com)"),
    "WHATSAPP_API_VERSION": ("v21.0", "Graph API version in the send path"),
    "WHATSAPP_PHONE_NUMBER_ID": ("100000000000001", "sending phone-number id when WHATSAPP_SENDERS is empty"),
    "WHATSAPP_SENDERS": ("", "the WhatsApp business numbers this deployment sends from: comma-separated "
                         "`phone_number_id[:rate]` (rate in messages/s, default WHATSAPP_SENDER_RATE); rooms are "
                         "spread over them by rendezvous hash (shared/senders.py); empty: WHATSAPP_PHONE_NUMBER_ID"),
    "WHATSAPP_SENDER_RATE": ("75", "messages/s one WhatsApp number may send, shared by every instance "
                             "(shared/sender_window.py): a little below the platform's 80/s (130429 above it); "
                             "0: not limited by baton"),
    "WHATSAPP_SENT_PROOF": ("on", "`on`: a WhatsApp `sent` status records its attempt as taken by the platform "
                            "when its send outcome is not known to be accepted (a read of the room only for a `sent` "
                            "its webhook instance does not know to be settled, a blind write only then), so an attempt whose send outcome was unknown times out "
                            "instead of being sent again; `off`: `sent` is only logged"),
    "WHATSAPP_ACCESS_TOKEN": ("local-access-token", "secret: bearer token for the send call"),
    "WHATSAPP_APP_SECRET": ("local-app-secret", "secret: HMAC-SHA256 key of X-Hub-Signature-256"),
    "WHATSAPP_VERIFY_TOKEN": ("local-verify-token", "secret: token of the GET hub.verify_token handshake"),
    "PROVIDERS": ("whatsapp,messenger,instagram", "comma-separated platforms this deployment sends to and takes "
                  "webhooks from; a push for another is kept as rejected, a webhook signed by another app's "
                  "secret is refused (401)"),
    "MESSENGER_PAGE_ID": ("200000000000002", "the Facebook Page that sends Messenger messages (Send API path)"),
    "MESSENGER_ACCESS_TOKEN": ("local-messenger-token", "secret: Page access token for the Messenger Send API"),
    "MESSENGER_APP_SECRET": ("local-messenger-secret", "secret: the Messenger app's key of X-Hub-Signature-256"),
    "INSTAGRAM_ACCOUNT_ID": ("300000000000003", "the Instagram professional account that sends (Send API path)"),
    "INSTAGRAM_ACCESS_TOKEN": ("local-instagram-token", "secret: access token for Instagram messaging"),
    "INSTAGRAM_APP_SECRET": ("local-instagram-secret", "secret: the Instagram app's key of X-Hub-Signature-256"),
    "ACK_LEVEL_WHATSAPP": ("delivered", "what acks a WhatsApp message: `delivered` (or read), `read`, `accepted` (the "
                           "send's 2xx); the ack timeout is always the backstop"),
    "ACK_LEVEL_MESSENGER": ("delivered", "what acks a Messenger message (delivery watermark or mids by default)"),
    "ACK_LEVEL_INSTAGRAM": ("read", "what acks an Instagram message: `read` (messaging_seen; Instagram has no delivery "
                            "receipt), or `accepted` for rooms that must move fast"),
    "WATERMARK_MARGIN_MS": ("0", "ms past a send's return a Messenger watermark must be to ack it (the platform's clock "
                            "may run ahead of ours by this much); 0 or more"),
    "PACE_INTERVAL_MS_WHATSAPP": ("6000", "ms per token of a room's pair-rate bucket for WhatsApp (about one message "
                                  "every 6 s to one user, error 131056); 0 turns pacing off"),
    "PACE_BURST_WHATSAPP": ("45", "tokens a room's WhatsApp bucket holds at most (Meta lets a burst of up to 45 "
                            "borrow against later time)"),
    "PACE_INTERVAL_MS_MESSENGER": ("0", "ms per token for Messenger rooms; 0: off (no documented pair rate)"),
    "PACE_BURST_MESSENGER": ("45", "tokens a Messenger room's bucket holds at most"),
    "PACE_INTERVAL_MS_INSTAGRAM": ("0", "ms per token for Instagram rooms; 0: off"),
    "PACE_BURST_INSTAGRAM": ("45", "tokens an Instagram room's bucket holds at most"),
    "SCHEDULED_QUEUE": ("baton-scheduled", "Cloud Tasks queue (in TASKS_LOCATION) where messages with `deliver_at` or "
                        "`delay_s` wait for their time (shared/scheduled.py)"),
    "ENQUEUE_URL": ("http://127.0.0.1:8080/", "URL of the `enqueue` function that a scheduled message's task calls "
                    "when its time comes"),
    "PREPARE_AHEAD": ("8", "messages behind the head of line whose preparation (`prepare` attribute, e.g. a media "
                      "upload) may run while the head is sent, per room; 0: only the head is prepared, one after another"),
    "PREPARE_TIMEOUT_MS": ("30000", "ms the head of line waits for its preparation before asking for it again (a lost or "
                           "stuck prepare task); counts as one of MAX_PREPARE_ATTEMPTS"),
    "MAX_PREPARE_ATTEMPTS": ("4", "preparation attempts of one message before PREPARE_POISON applies"),
    "PREPARE_RETRY_BASE_MS": ("1000", "ms before the first retry of a failed preparation; x4 per attempt"),
    "PREPARE_POISON": ("dead_letter", "what a message whose preparation keeps failing does when it reaches the head: "
                       "`dead_letter` (ends, kept for `baton dead-letters redrive`; the room moves on) or `park` (blocks its room "
                       "until an operator redrives or skips it)"),
    "PREPARE_QUEUE_PREFIX": ("baton-prepare", "Cloud Tasks queue name prefix of the prepare tasks; queues are "
                             "PREFIX-0 .. PREFIX-(N-1)"),
    "PREPARE_QUEUE_COUNT": ("1", "number of prepare queues; a room's consecutive messages go to consecutive queues"),
    "PREPARE_URL": ("http://127.0.0.1:8087/", "URL of the `prepare` function that Cloud Tasks calls"),
    "MEDIA_MAX_BYTES": ("5242880", "largest media file (bytes) a preparation fetches and uploads (WhatsApp images: 5 MB)"),
    "MEDIA_TIMEOUT_MS": ("20000", "ms one preparation's fetch and upload may take in all"),
    "SEQUENCE_GAP_TIMEOUT_MS": ("30000", "ms a message with a producer `sequence` attribute waits for a missing "
                                "predecessor before the gap is logged and given up (the room moves on)"),
    "EVENT_LOG_PATH": ("", "file the delivery event lines are appended to as well as stdout; empty: stdout only"),
    "QUIET_EVENTS": ("", "event lines not written, as `event` or `event:reason`, comma-separated (e.g. status_ignored:sent_status,timeout_ignored); empty: all"),
    "METRICS_LOG_PATH": ("", "file the per-invocation operation counts are appended to (benchmarks); empty: not written"),
    "PUBSUB_TOPIC": ("baton-outbound", "topic producers publish outbound messages to"),
    "WEBHOOK_MODE": ("direct", "`direct`: webhook applies the statuses itself. `queued`: webhook verifies, publishes them "
                     "to STATUS_TOPIC and answers; the `status` function applies them (docs/architecture.md, Status webhooks)"),
    "STATUS_MAX_ATTEMPTS": ("5", "deliveries of one status-queue message that fail with a non-transient error before it "
                            "is moved to the error queue (transient failures are retried without limit)"),
    "STATUS_TOPIC": ("baton-statuses", "topic the webhook publishes statuses to (queued mode), ordering key = room id; its "
                     "error queue is the topic STATUS_TOPIC-dead-letter"),
    "INBOUND_TOPIC": ("baton-inbound", "topic the webhook forwards every signed post holding items baton does not "
                      "consume to (messages people wrote, reactions, postbacks, other fields), the body unchanged "
                      "(shared/service/inbound.py); empty: not forwarded"),
    "OUTCOMES": ("on", "`on`: each message's end (acked, timed out, failed, dead-lettered, skipped, cancelled) is "
                 "published to OUTCOMES_TOPIC, ordering key = room id (shared/outcomes.py); `off`: not published"),
    "OUTCOMES_TOPIC": ("baton-outcomes", "topic of the delivery outcomes (OUTCOMES=on)"),
}

# Read by the code but meaningful only on the local stack: Terraform sets none.
LOCAL_ONLY_ENV_VARS = frozenset({"CLOUD_TASKS_EMULATOR_HOST", "EVENT_LOG_PATH", "METRICS_LOG_PATH"})
# Set from Secret Manager as secret environment variables, never plain ones.
SECRET_ENV_VARS = frozenset({"WHATSAPP_ACCESS_TOKEN", "WHATSAPP_APP_SECRET", "WHATSAPP_VERIFY_TOKEN",
                             "MESSENGER_ACCESS_TOKEN", "MESSENGER_APP_SECRET", "INSTAGRAM_ACCESS_TOKEN",
                             "INSTAGRAM_APP_SECRET"})
# Whole numbers that may be 0 (every other numeric setting must be at least 1).
ZERO_ALLOWED = frozenset({"whatsapp_sender_rate", "prepare_ahead", "watermark_margin_ms", "first_timer_slack_ms", "pace_interval_ms_whatsapp", "pace_interval_ms_messenger",
                          "pace_interval_ms_instagram"})
PROVIDERS = ("whatsapp", "messenger", "instagram")


WEBHOOK_MODES = ("queued", "direct")
PREPARE_POISON_POLICIES = ("dead_letter", "park")
ON_OFF = ("on", "off")


def _env(name: str) -> str:
    return os.environ.get(name, ENV_VARS[name][0])


@dataclass(frozen=True)
class Settings:
    """Typed view of the environment. Durations are in ms, as their names say."""

    project: str
    firestore_database: str
    tasks_emulator_host: str
    tasks_location: str
    tasks_queue_prefix: str
    tasks_queue_count: int
    timeout_url: str
    tasks_service_account: str
    ack_timeout_ms: int
    send_timeout_ms: int
    send_start_deadline_ms: int
    first_timer_slack_ms: int
    max_send_attempts: int
    send_retry_base_ms: int
    dedup_retention: int
    max_queued_messages: int
    max_room_bytes: int
    watchdog_grace_ms: int
    sweep_batch_size: int
    sweep_concurrency: int
    sweep_budget_s: int
    sweep_reread_s: int
    index_shards: int
    retention_hours: int
    whatsapp_api_base: str
    whatsapp_api_version: str
    whatsapp_phone_number_id: str
    whatsapp_senders: str
    whatsapp_sender_rate: int
    whatsapp_sent_proof: str
    whatsapp_access_token: str
    whatsapp_app_secret: str
    whatsapp_verify_token: str
    providers: str
    messenger_page_id: str
    messenger_access_token: str
    messenger_app_secret: str
    instagram_account_id: str
    instagram_access_token: str
    instagram_app_secret: str
    ack_level_whatsapp: str
    ack_level_messenger: str
    ack_level_instagram: str
    watermark_margin_ms: int
    scheduled_queue: str
    enqueue_url: str
    pace_interval_ms_whatsapp: int
    pace_burst_whatsapp: int
    pace_interval_ms_messenger: int
    pace_burst_messenger: int
    pace_interval_ms_instagram: int
    pace_burst_instagram: int
    prepare_ahead: int
    prepare_timeout_ms: int
    max_prepare_attempts: int
    prepare_retry_base_ms: int
    prepare_poison: str
    prepare_queue_prefix: str
    prepare_queue_count: int
    prepare_url: str
    media_max_bytes: int
    media_timeout_ms: int
    sequence_gap_timeout_ms: int
    event_log_path: str
    quiet_events: str
    metrics_log_path: str
    pubsub_topic: str
    webhook_mode: str
    status_max_attempts: int
    status_topic: str
    inbound_topic: str
    outcomes: str
    outcomes_topic: str

    @property
    def enabled_providers(self) -> frozenset[str]:
        """PROVIDERS as a set."""
        return frozenset(p.strip() for p in self.providers.split(",") if p.strip())

    @property
    def whatsapp_sender_specs(self) -> tuple[SenderSpec, ...]:
        """WHATSAPP_SENDERS parsed (shared/senders.py); load() has checked it."""
        return parse_senders(self.whatsapp_senders, self.whatsapp_phone_number_id, self.whatsapp_sender_rate)

    @property
    def sent_proof(self) -> bool:
        """WHATSAPP_SENT_PROOF is `on`."""
        return self.whatsapp_sent_proof == "on"

    @property
    def pacing(self) -> dict[str, tuple[int, int]]:
        """provider -> (ms per token, burst) of a room's pair-rate bucket; 0 ms: off."""
        return {p: (getattr(self, f"pace_interval_ms_{p}"), getattr(self, f"pace_burst_{p}")) for p in PROVIDERS}

    @property
    def ack_levels(self) -> dict[str, str]:
        """provider -> ack level (`delivered`, `read`, `accepted`)."""
        return {p: getattr(self, f"ack_level_{p}") for p in PROVIDERS}

    @property
    def status_error_topic(self) -> str:
        """The status queue's error queue (dead-letter topic): STATUS_TOPIC-dead-letter."""
        return f"{self.status_topic}-dead-letter"


_FIELD_TO_ENV = {
    "project": "GOOGLE_CLOUD_PROJECT",
    "tasks_emulator_host": "CLOUD_TASKS_EMULATOR_HOST",
    "tasks_service_account": "TASKS_SERVICE_ACCOUNT",
}


def load() -> Settings:
    """Read every setting from the environment.

    Raises:
        ValueError: a numeric setting is not a whole number, or is below 1;
            SEND_TIMEOUT_MS is not below ACK_TIMEOUT_MS; MAX_ROOM_BYTES is over
            1 MiB; WEBHOOK_MODE is neither `queued` nor `direct`; an ACK_LEVEL_*
            is not `delivered`, `read` or `accepted`; PROVIDERS names an unknown
            platform or none; PREPARE_POISON is neither `dead_letter` nor `park`;
            QUIET_EVENTS names an unknown event type; WHATSAPP_SENDERS is
            not a list of `phone_number_id[:rate]`; WHATSAPP_SENT_PROOF is
            neither `on` nor `off`; OUTCOMES is neither `on` nor `off`, or
            `on` with an empty OUTCOMES_TOPIC.
    """
    values: dict[str, object] = {}
    for f in fields(Settings):
        name = _FIELD_TO_ENV.get(f.name, f.name.upper())
        raw = _env(name)
        if f.type == "int":
            try:
                number = int(raw)
            except ValueError:
                raise ValueError(f"{name}={raw!r} is not a whole number") from None
            if number < (0 if f.name in ZERO_ALLOWED else 1):
                raise ValueError(f"{name}={raw!r} must be at least {0 if f.name in ZERO_ALLOWED else 1}")
            values[f.name] = number
        else:
            values[f.name] = raw
    settings = Settings(**values)  # type: ignore[arg-type]
    if settings.send_timeout_ms >= settings.ack_timeout_ms:
        # The send call's own budget must leave the ack window meaningful.
        raise ValueError("SEND_TIMEOUT_MS must be below ACK_TIMEOUT_MS")
    if settings.webhook_mode not in WEBHOOK_MODES:
        raise ValueError(f"WEBHOOK_MODE={settings.webhook_mode!r} must be one of {', '.join(WEBHOOK_MODES)}")
    if not settings.enabled_providers or settings.enabled_providers - set(PROVIDERS):
        raise ValueError(f"PROVIDERS={settings.providers!r} must name some of {', '.join(PROVIDERS)}")
    for provider, level in settings.ack_levels.items():
        if level not in ("delivered", "read", "accepted"):
            raise ValueError(f"ACK_LEVEL_{provider.upper()}={level!r} must be one of delivered, read, accepted")
    if settings.prepare_poison not in PREPARE_POISON_POLICIES:
        raise ValueError(f"PREPARE_POISON={settings.prepare_poison!r} must be one of {', '.join(PREPARE_POISON_POLICIES)}")
    if settings.whatsapp_sent_proof not in ON_OFF:
        raise ValueError(f"WHATSAPP_SENT_PROOF={settings.whatsapp_sent_proof!r} must be `on` or `off`")
    if settings.outcomes not in ON_OFF:
        raise ValueError(f"OUTCOMES={settings.outcomes!r} must be `on` or `off`")
    if settings.outcomes == "on" and not settings.outcomes_topic:
        raise ValueError("OUTCOMES=on needs OUTCOMES_TOPIC")
    settings.whatsapp_sender_specs  # noqa: B018 (raises ValueError for a malformed WHATSAPP_SENDERS)
    quiet_rules(settings.quiet_events)  # raises ValueError for an unknown event type
    if settings.max_room_bytes > 1_048_576:
        raise ValueError("MAX_ROOM_BYTES must not exceed Firestore's 1 MiB document limit (1048576)")
    return settings


# Read by the `admin` function only (shared/admin/): infra/admin.tf sets them
# on that function, not on the seven others (so not in ENV_VARS).
ADMIN_ENV_VARS: dict[str, tuple[str, str]] = {
    "ADMIN_AUTH": ("google", "how the admin function verifies its caller: `google` (a Google-signed ID token; in the "
                   "cloud) or `local` (the local stack's stand-in token signed with ADMIN_LOCAL_KEY; never in the cloud)"),
    "ADMIN_OPERATORS": ("", "comma-separated e-mail addresses (or `domain:example.com`) allowed to act besides IAM's "
                        "invoker check; empty: every caller IAM lets through"),
    "ADMIN_AUDIENCES": ("", "comma-separated ID-token audiences accepted besides the function's own URL (e.g. the "
                        "OAuth client id of `gcloud auth print-identity-token`)"),
    "ADMIN_LOCAL_KEY": ("", "ADMIN_AUTH=local only: the HMAC key of the stand-in tokens (the local stack makes one)"),
}
ADMIN_AUTH_MODES = ("google", "local")


@dataclass(frozen=True)
class AdminSettings:
    """The admin function's own settings (ADMIN_ENV_VARS)."""

    auth: str
    operators: tuple[str, ...]
    audiences: tuple[str, ...]
    local_key: str


def load_admin() -> AdminSettings:
    """Read ADMIN_ENV_VARS from the environment.

    Raises:
        ValueError: ADMIN_AUTH is neither `google` nor `local`, or `local`
            without ADMIN_LOCAL_KEY.
    """

    def listed(name: str) -> tuple[str, ...]:
        return tuple(p.strip() for p in os.environ.get(name, ADMIN_ENV_VARS[name][0]).split(",") if p.strip())

    auth = os.environ.get("ADMIN_AUTH", ADMIN_ENV_VARS["ADMIN_AUTH"][0])
    key = os.environ.get("ADMIN_LOCAL_KEY", "")
    if auth not in ADMIN_AUTH_MODES:
        raise ValueError(f"ADMIN_AUTH={auth!r} must be one of {', '.join(ADMIN_AUTH_MODES)}")
    if auth == "local" and not key:
        raise ValueError("ADMIN_AUTH=local needs ADMIN_LOCAL_KEY")
    return AdminSettings(auth, listed("ADMIN_OPERATORS"), listed("ADMIN_AUDIENCES"), key)
