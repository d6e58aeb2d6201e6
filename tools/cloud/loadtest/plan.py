"""The load test as a list of steps: what it creates, calls and deletes.

Pure: building the plan touches nothing, so `--dry-run` prints exactly what
a run would do, and tests/unit/tools/test_loadtest_cloud.py checks it offline.
Each `Step` is a command line (`argv`) run in order; `{fake_url}`,
`{webhook_url}`, `{out}` and `{root}` are filled in when it runs, from what
earlier steps print and where the run writes; the run's random `token` only
ever goes to a step's stdin or a service's environment.

What keeps the run apart from production: Terraform runs in a copy of
infra/ (`{out}/infra`, tools/cloud/loadtest/workdir.py) without the
production `terraform.tfvars`, `*.auto.tfvars` and `backend.tf`, with its own
local state, and every variable the configuration requires (and every one
the load test depends on) is passed on the command line (`REQUIRED_VARS`).

How baton reaches the fake: baton's real send path sends the WhatsApp access
token as a bearer token, never a Google identity token, so the fake platform
is public (`--allow-unauthenticated`) and refuses any send without that
token (tools/sim/fake_platform/whatsapp.py answers 401, as the Graph API
does); its own controls (`/_fake/stats`, `/_fake/config`, `/_fake/reset`)
need the same token (`--control-token`). The token is the run's own random
secret: the fake's access token and app secret, and baton's secrets of the
same names.

Sources of the commands and metric types:
- `gcloud run deploy --source` builds with Google Cloud's buildpacks; the
  build-time variable GOOGLE_ENTRYPOINT sets the container's command
  (https://cloud.google.com/docs/buildpacks/python).
- Monitoring time series: `projects.timeSeries.list`
  (https://cloud.google.com/monitoring/api/ref_v3/rest/v3/projects.timeSeries/list);
  metric types from https://cloud.google.com/monitoring/api/metrics_gcp
  (run.googleapis.com/container/instance_count,
  firestore.googleapis.com/document/write_count,
  cloudtasks.googleapis.com/queue/depth, run.googleapis.com/request_count).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

REGION_PATTERN = re.compile(r"^[a-z]+-[a-z]+[0-9]$")
# infra/'s variables with no default, each passed by every apply and destroy.
REQUIRED_VARS = ("project_id", "whatsapp_phone_number_id")
# The fake's sending numbers: the fake accepts any id; each carries 950 msg/s
# (Meta's upgraded tier, as the sizing counts it: infra/modules/sizing).
FAKE_NUMBER_BASE = 100000000000001
FAKE_NUMBER_RATE = 950
SENDER_LIMIT_SHARE = 0.7  # at most this busy at the peak, as the sizing asks
PROJECT_PATTERN = re.compile(r"^[a-z][a-z0-9-]{4,28}[a-z0-9]$")
PREFIX_PATTERN = re.compile(r"^[a-z][a-z0-9-]{0,14}[a-z0-9]$")
METRICS = ("run.googleapis.com/container/instance_count", "run.googleapis.com/request_count",
           "firestore.googleapis.com/document/write_count", "cloudtasks.googleapis.com/queue/depth")


@dataclass(frozen=True)
class LoadTest:
    """One load test: where, how much, how fast.

    `rate`: messages/s published (all rooms); `ack_timeout_ms`: the
    deployment's ACK_TIMEOUT_MS, which the verdict judges holds by.

    Raises (from `validate`): ValueError with the argument's name.
    """

    project: str
    region: str = "europe-west1"
    name_prefix: str = "baton-lt"
    rooms: int = 1000
    messages: int = 10
    rate: float = 100.0
    ack_timeout_ms: int = 3000
    drain_timeout_s: int = 1800

    def validate(self) -> None:
        if not PROJECT_PATTERN.match(self.project):
            raise ValueError(f"--project {self.project!r} is not a GCP project id")
        if not REGION_PATTERN.match(self.region):
            raise ValueError(f"--region {self.region!r} is not a region (e.g. europe-west1)")
        if not PREFIX_PATTERN.match(self.name_prefix) or self.name_prefix == "baton":
            raise ValueError(f"--name-prefix {self.name_prefix!r}: 2-16 lower-case letters, digits or -, "
                             "and not `baton` (the load test must not touch the production deployment)")
        if self.rooms < 1 or self.messages < 1:
            raise ValueError("--rooms and --messages must be at least 1")
        if not 0 < self.rate <= 50_000:
            raise ValueError("--rate must be above 0 and at most 50000 messages/s (target_peak_messages_per_s's range)")

    @property
    def fake_service(self) -> str:
        return f"{self.name_prefix}-fake-platform"

    @property
    def total(self) -> int:
        return self.rooms * self.messages

    @property
    def senders(self) -> str:
        """WHATSAPP_SENDERS of fake numbers that carry `rate` as the sizing
        asks: through the send window (a number sends its rate x 1 / 1.05),
        at most 70% busy (infra/modules/sizing)."""
        count = max(1, math.ceil(self.rate * 1.05 / (FAKE_NUMBER_RATE * SENDER_LIMIT_SHARE)))
        return ",".join(f"{FAKE_NUMBER_BASE + i}:{FAKE_NUMBER_RATE}" for i in range(count))


@dataclass(frozen=True)
class Step:
    """One thing the run does: `what` it is for, the command it runs."""

    phase: str  # deploy, configure, publish, drain, verdict, monitoring, teardown
    what: str
    argv: tuple[str, ...]
    capture: str | None = None  # the placeholder its stdout (stripped) fills for later steps
    stdin: str | None = None  # the placeholder written to its stdin
    save: str | None = None  # the file its stdout is saved to


def build(test: LoadTest, source_dir: str = ".") -> list[Step]:
    """Every step of `test`, in order. `source_dir`: the repository root the
    fake platform's container is built from."""
    test.validate()
    p, r, prefix = test.project, test.region, test.name_prefix
    gc = ("gcloud", f"--project={p}")
    workdir = "{out}/infra"
    tf = ("terraform", f"-chdir={workdir}")
    tf_vars = (f"-var=project_id={p}", f"-var=whatsapp_phone_number_id={FAKE_NUMBER_BASE}",
               f"-var=whatsapp_senders={test.senders}", f"-var=region={r}", f"-var=name_prefix={prefix}",
               f"-var=firestore_database={prefix}-db", "-var=whatsapp_api_base={fake_url}",
               f"-var=target_peak_messages_per_s={max(1, round(test.rate))}", "-var=deletion_protection=false",
               '-var=platforms=["whatsapp"]', f"-var=ack_timeout_ms={test.ack_timeout_ms}",
               "-var=source_archive={root}/dist/baton-functions.zip", "-var=alert_notification_channels=[]")
    # One random token (made by the run, never printed) is the fake's access
    # token, app secret and control token, and baton's secrets of the same names.
    entry = ("python -m tools.sim.fake_platform --host 0.0.0.0 --port $PORT --webhook-url $WEBHOOK_URL "
             "--app-secret $APP_SECRET --access-token $APP_SECRET --control-token $APP_SECRET")
    since = "{started_at}"
    stats_request = ("curl", "-sf", "-H", "@-", "{fake_url}/_fake/stats")
    return [
        Step("deploy", "enable the APIs the fake platform's build and service need",
             (*gc, "services", "enable", "run.googleapis.com", "cloudbuild.googleapis.com",
              "artifactregistry.googleapis.com", "monitoring.googleapis.com")),
        Step("deploy", "build and deploy the fake platform as a public Cloud Run service: every send needs the "
             "run's access token (baton's real send path), every control call the same token",
             (*gc, "run", "deploy", test.fake_service, f"--source={source_dir}", f"--region={r}",
              "--allow-unauthenticated", "--min-instances=1", "--max-instances=1", "--concurrency=200",
              f"--set-build-env-vars=GOOGLE_ENTRYPOINT={entry}",
              "--set-env-vars=WEBHOOK_URL=http://pending.invalid/,APP_SECRET={token}")),
        Step("deploy", "read the fake platform's URL", (*gc, "run", "services", "describe", test.fake_service,
                                                        f"--region={r}", "--format=value(status.url)"),
             capture="fake_url"),
        Step("deploy", "build the functions' source archive (make package)", ("python3", "tools/cloud/package.py")),
        Step("deploy", f"a copy of infra/ for the `{prefix}` deployment, without the production terraform.tfvars, "
             "*.auto.tfvars and backend.tf: its own variables and its own local state",
             ("python", "-m", "tools.cloud.loadtest.workdir", f"--to={workdir}")),
        Step("deploy", "install the pinned providers in the copy", (*tf, "init", "-input=false")),
        Step("deploy", "create baton's secrets first: the functions need a version of each to deploy (docs/deploy.md)",
             (*tf, "apply", "-auto-approve", "-input=false", "-target=google_secret_manager_secret.platform", *tf_vars)),
        *[Step("deploy", f"the secret {name}: the run's token", (*gc, "secrets", "versions", "add", f"{prefix}-{name}",
                                                                 "--data-file=-"), stdin="token")
          for name in ("whatsapp-access-token", "whatsapp-app-secret", "whatsapp-verify-token")],
        Step("deploy", "deploy baton under the load-test prefix, sending to the fake platform",
             (*tf, "apply", "-auto-approve", "-input=false", *tf_vars)),
        Step("configure", "read baton's webhook URL", (*tf, "output", "-raw", "webhook_url"), capture="webhook_url"),
        Step("configure", "point the fake platform's status webhooks at baton",
             (*gc, "run", "services", "update", test.fake_service, f"--region={r}",
              "--update-env-vars=WEBHOOK_URL={webhook_url},APP_SECRET={token}")),
        Step("publish", f"publish {test.rooms:,} rooms x {test.messages:,} messages at {test.rate:g} messages/s",
             ("python", "-m", "tools.cloud.loadtest.publish", f"--project={p}", f"--topic={prefix}-outbound",
              f"--rooms={test.rooms}", f"--messages={test.messages}", f"--rate={test.rate:g}",
              f"--run-id={prefix}")),
        Step("drain", f"wait until the fake platform has {test.total:,} sends or {test.drain_timeout_s} s pass",
             ("python", "-m", "tools.cloud.loadtest.drain", "--fake-url={fake_url}", f"--expect={test.total}",
              f"--timeout-s={test.drain_timeout_s}"), stdin="token"),
        Step("verdict", "the fake's record (sends, what each device received)", stats_request,
             stdin="control_header", save="stats.json"),
        Step("verdict", "the delivery event log of this deployment's services",
             (*gc, "logging", "read", f'jsonPayload.log_type="baton.delivery" AND '
              f'resource.labels.service_name:"{prefix}-" AND timestamp>="{since}"', "--format=json"),
             save="events.json"),
        Step("verdict", "judge order, loss, duplicates and early hand-overs as make chaos does",
             ("python", "-m", "tools.cloud.loadtest.verdict", "--stats={out}/stats.json", "--events={out}/events.json",
              f"--published-rooms={test.rooms}", f"--published-messages={test.messages}",
              f"--ack-timeout-ms={test.ack_timeout_ms}", f"--run-id={prefix}")),
        *[Step("monitoring", f"Cloud Monitoring: {metric} over the run",
               ("curl", "-sf", "-H", "Authorization: Bearer {token_of_gcloud}",
                f"https://monitoring.googleapis.com/v3/projects/{p}/timeSeries?"
                f"filter=metric.type%3D%22{metric}%22&interval.startTime={since}&interval.endTime={{ended_at}}"),
               save=f"metric-{metric.split('/')[-1]}.json")
          for metric in METRICS],
        Step("teardown", f"destroy the `{prefix}` deployment",
             (*tf, "destroy", "-auto-approve", "-input=false", *tf_vars)),
        Step("teardown", "delete the fake platform", (*gc, "run", "services", "delete", test.fake_service,
                                                      f"--region={r}", "--quiet")),
    ]


def render(steps: list[Step]) -> str:
    """The plan as text: one numbered line per step, its command below."""
    lines = []
    for n, step in enumerate(steps, 1):
        lines.append(f"{n:2d}. [{step.phase}] {step.what}")
        lines.append("      " + " ".join(_quote(a) for a in step.argv))
    return "\n".join(lines)


def _quote(arg: str) -> str:
    return arg if re.fullmatch(r"[\w@%+=:,./{}$-]+", arg) else "'" + arg.replace("'", "'\\''") + "'"
