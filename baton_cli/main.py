"""`baton`: see and fix any room (docs/operations.md, "Operating baton").

Built on Click (https://click.palletsprojects.com/) with rich tables; every
command takes `--json` for scripts. The CLI holds no settings and no secret:
every listing and action is a call of the deployment's private `admin`
function (shared/admin/), which runs it with the deployment's own settings
(index shards, queues, topics) and platform tokens, and records the caller's
verified identity in the audit trail. Where it finds that function:

- a real project: `baton --project P [--region R] [--name-prefix N]` calls
  `https://R-P.cloudfunctions.net/N-admin` (or `--admin-url`, Terraform's
  output `admin_url`) with the user's Google ID token (Application Default
  Credentials, or `gcloud auth print-identity-token`);
- the local stack: `baton --stack run/local` calls the stack's admin function
  with a stand-in token signed by the stack's key (stack.json); `--actor`
  names the stand-in identity there (shared/admin/identity.py).

Exit codes: 0 ok; 1 error (the action failed, or the admin function did);
2 usage (a bad option or argument, or the admin function refused the
request as malformed); 3 not found (room, dead letter, rejected push);
4 no access (no Google credentials, or the admin function refused them);
5 no admin function where it should be (not deployed, wrong project,
region or prefix; the local stack down).

Command groups live in their own modules and are listed in
`baton_cli.GROUPS`.
"""

from __future__ import annotations

import getpass
import json
import os
import re
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property, wraps
from importlib import metadata
from pathlib import Path
from typing import Any

import click
from rich.console import Console
from rich.table import Table

EXIT_OK, EXIT_ERROR, EXIT_USAGE, EXIT_NOT_FOUND, EXIT_NO_ACCESS, EXIT_NO_ADMIN = 0, 1, 2, 3, 4, 5
DEFAULT_REGION = "europe-west1"  # infra/variables.tf's default region
DEFAULT_NAME_PREFIX = "baton"  # infra/variables.tf's default name_prefix
CALL_TIMEOUT_S = 600  # a bulk action may take minutes; the function's own timeout bounds it

_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d)")
_UNIT_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}


class Failure(click.ClickException):
    """A one-line error with its documented exit code (module docstring)."""

    def __init__(self, message: str, exit_code: int = EXIT_ERROR) -> None:
        super().__init__(message)
        # click declares exit_code a class variable; each Failure carries its own (documented codes).
        self.exit_code = exit_code  # type: ignore[misc]


def parse_duration_ms(text: str) -> int:
    """`500ms`, `30s`, `5m`, `2h`, `1d` (or a sum such as `1h30m`) in ms.

    Raises:
        click.BadParameter: anything else.
    """
    parts = _DURATION.findall(text)
    if not parts or "".join(n + u for n, u in parts) != text.strip():
        raise click.BadParameter(f"{text!r} is not a duration such as 30s, 5m, 2h")
    return int(sum(float(n) * _UNIT_MS[u] for n, u in parts))


def google_id_token(audience: str) -> str:
    """A Google ID token for the caller: a service account's (key file or
    metadata server) for `audience`; else the user's from Application Default
    Credentials; else `gcloud auth print-identity-token`.

    Raises:
        Failure: none of them gives one (exit 4).
    """
    import google.auth
    from google.auth import exceptions as gauth_exc
    from google.auth.transport.requests import Request
    from google.oauth2 import id_token

    try:
        return str(id_token.fetch_id_token(Request(), audience))
    except (gauth_exc.DefaultCredentialsError, gauth_exc.RefreshError, ValueError):
        pass
    try:
        credentials, _ = google.auth.default()
        credentials.refresh(Request())
        token = getattr(credentials, "id_token", None)
        if token:
            return str(token)
    except (gauth_exc.DefaultCredentialsError, gauth_exc.RefreshError, ValueError):
        pass
    try:
        proc = subprocess.run(["gcloud", "auth", "print-identity-token"], capture_output=True, text=True, timeout=60)
        if proc.returncode == 0 and proc.stdout.strip():
            return proc.stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        pass
    raise Failure("no Google credentials to call the admin function with: run `gcloud auth login` "
                  "(or `gcloud auth application-default login`)", EXIT_NO_ACCESS)


@dataclass
class Env:
    """The global options, and the admin function they lead to."""

    project: str | None = None
    region: str = DEFAULT_REGION
    name_prefix: str = DEFAULT_NAME_PREFIX
    admin_url: str | None = None
    stack: str | None = None
    actor: str | None = None
    console: Console = field(default_factory=lambda: Console(soft_wrap=True))

    @cached_property
    def endpoint(self) -> tuple[str, Callable[[], str]]:
        """(the admin function's URL, how to get a bearer token for it).

        Raises:
            click.UsageError: neither a stack nor a project; `--actor` for a project.
            Failure: the stack has no admin function (exit 5).
        """
        if self.stack:
            path = Path(self.stack) / "stack.json"
            if not path.exists():
                raise Failure(f"no stack in {self.stack} (run `make up` first)", EXIT_NO_ADMIN)
            admin = json.loads(path.read_text()).get("admin") or {}
            if not admin.get("url") or not admin.get("local_key"):
                raise Failure(f"the stack in {self.stack} runs no admin function (restart it: make down up)",
                              EXIT_NO_ADMIN)
            from shared.admin.identity import local_token

            who = self.actor or os.environ.get("BATON_ACTOR") or getpass.getuser()
            return self.admin_url or admin["url"], lambda: local_token(admin["local_key"], who)
        if self.actor:
            raise click.UsageError("--actor names the stand-in identity of the local stack only; against a project "
                                   "the admin function records your verified Google identity")
        if not self.project and not self.admin_url:
            raise click.UsageError("say where: --project P (or GOOGLE_CLOUD_PROJECT), --admin-url URL, "
                                   "or --stack RUN_DIR for the local stack")
        url = self.admin_url or f"https://{self.region}-{self.project}.cloudfunctions.net/{self.name_prefix}-admin"
        return url, lambda: google_id_token(url)

    def call(self, action: str, /, **args: Any) -> Any:
        """Run `action` in the admin function; its `result`. `action` is
        positional-only: an action's own `action` argument (`rooms.bulk`'s)
        passes by name among `args`.

        Raises:
            Failure: with the exit code of the answer (module docstring).
            click.UsageError: the function answered 400 (exit 2).
        """
        import requests

        url, token = self.endpoint
        body = {"action": action, "args": {k: v for k, v in args.items() if v is not None}}
        try:
            r = requests.post(url, json=body, headers={"Authorization": f"Bearer {token()}"}, timeout=CALL_TIMEOUT_S)
        except requests.ConnectionError as exc:
            raise Failure(f"no admin function answers at {url}: {type(exc).__name__}", EXIT_NO_ADMIN) from exc
        except requests.Timeout as exc:
            raise Failure(f"the admin function at {url} did not answer in {CALL_TIMEOUT_S} s", EXIT_ERROR) from exc
        try:
            answer = r.json()
        except ValueError:
            answer = None
        error = answer.get("error") if isinstance(answer, dict) else None
        if r.status_code == 200 and isinstance(answer, dict) and "result" in answer:
            return answer["result"]
        if r.status_code == 400 and error:
            raise click.UsageError(error)
        if r.status_code == 404 and error:
            raise Failure(error, EXIT_NOT_FOUND)
        if r.status_code == 404:
            raise Failure(f"no admin function at {url} (deployed? right --project, --region, --name-prefix?)",
                          EXIT_NO_ADMIN)
        if r.status_code in (401, 403):
            raise Failure(f"the admin function refused you ({r.status_code}): "
                          f"{error or 'ask for roles/run.invoker on it (var.operators)'}", EXIT_NO_ACCESS)
        raise Failure(f"the admin function failed ({r.status_code}): {error or r.text[:300]}", EXIT_ERROR)


pass_env = click.make_pass_decorator(Env)


def command(group: click.Group, name: str, **kw: Any) -> Callable[[Callable[..., Any]], click.Command]:
    """A command of `group` with `--json`."""

    def wrap(fn: Callable[..., Any]) -> click.Command:
        @wraps(fn)
        def run(*args: Any, **kwargs: Any) -> Any:
            return fn(*args, **kwargs)

        run = click.option("--json", "as_json", is_flag=True, help="print JSON instead of tables")(run)
        return group.command(name, **kw)(run)

    return wrap


def bulk_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    """`--dry-run` and `--yes` of a bulk action (see `confirm_bulk`)."""
    fn = click.option("--yes", "-y", is_flag=True, help="do not ask for confirmation")(fn)
    return click.option("--dry-run", is_flag=True, help="say how many rooms and messages it would touch; change "
                                                        "nothing")(fn)


def confirm_bulk(env: Env, what: str, preview: dict[str, Any], dry_run: bool, yes: bool, as_json: bool) -> bool:
    """Show what a bulk action would touch (`preview`: `rooms`, `messages`,
    from the admin function's dry run); True to go on. A dry run prints it
    and stops; without `--yes` it asks (and refuses with no terminal to ask:
    exit 2).

    Raises:
        click.UsageError: not confirmed and no terminal to ask on.
    """
    line = f"{what}: {preview.get('messages', 0)} message(s) in {preview.get('rooms', 0)} room(s)"
    if dry_run:
        if as_json:
            emit_json(preview)
        else:
            env.console.print(f"dry run, nothing changed. {line}")
        return False
    if not preview.get("messages"):
        if as_json:
            emit_json(preview)
        else:
            env.console.print(f"{line}: nothing to do")
        return False
    if yes:
        return True
    if not sys.stdin.isatty():
        raise click.UsageError(f"{line}; confirm with --yes (no terminal to ask on)")
    return click.confirm(f"{line}. Go on?", default=False, err=True)


def emit_json(data: Any) -> None:
    click.echo(json.dumps(data, indent=2, default=str))


def table(title: str, columns: list[str], rows: list[list[Any]]) -> Table:
    t = Table(title=title, title_justify="left")
    for c in columns:
        t.add_column(c, overflow="fold")
    for r in rows:
        t.add_row(*("" if v is None else str(v) for v in r))
    return t


def show_results(env: Env, results: list[dict[str, Any]], as_json: bool) -> None:
    """Print what operator actions did (`ActionResult.to_json` each); exit 1 if one left an error."""
    if as_json:
        emit_json(results)
    else:
        rows = []
        for r in results:
            detail = "; ".join(e["event"] + (f" #{e['seq']}.{e['attempt']}" if e.get("attempt") else
                                             f" #{e['seq']}" if e.get("seq") else "") for e in r["events"][1:])
            rows.append([r["room_id"], r["action"], r["target"], "yes" if r["changed"] else "no (no-op)",
                         r["outcome"], detail])
        actor = next((e.get("actor") for r in results for e in r["events"] if e.get("actor")), None)
        env.console.print(table(f"{len(results)} action(s)" + (f" by {actor}" if actor else ""),
                                ["room", "action", "target", "changed", "outcome", "then"], rows))
        for r in results:
            if r.get("error"):
                env.console.print(f"[yellow]{r['room_id']}[/]: {r['error']}")
    if any(r.get("error") for r in results):
        sys.exit(EXIT_ERROR)


def _version() -> str:
    try:
        return metadata.version("baton")
    except metadata.PackageNotFoundError:
        return "unknown"


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 110},
             epilog="Exit codes: 0 ok, 1 error, 2 usage, 3 not found, 4 no access (credentials), 5 no admin function.")
@click.version_option(_version(), "--version", prog_name="baton")
@click.option("--project", envvar="GOOGLE_CLOUD_PROJECT", help="GCP project (default: GOOGLE_CLOUD_PROJECT)")
@click.option("--region", envvar="BATON_REGION", default=DEFAULT_REGION, show_default=True,
              help="region of the functions (BATON_REGION)")
@click.option("--name-prefix", envvar="BATON_NAME_PREFIX", default=DEFAULT_NAME_PREFIX, show_default=True,
              help="Terraform's name_prefix: the admin function is PREFIX-admin (BATON_NAME_PREFIX)")
@click.option("--admin-url", envvar="BATON_ADMIN_URL", metavar="URL",
              help="the admin function's URL (Terraform output admin_url; default: from project, region, prefix)")
@click.option("--stack", envvar="BATON_STACK", metavar="RUN_DIR",
              help="use the local stack `make up` started in RUN_DIR (e.g. run/local)")
@click.option("--actor", help="local stack only: the stand-in identity (default: BATON_ACTOR or the local user); "
                               "in the cloud the actor is your verified Google identity")
@click.pass_context
def cli(ctx: click.Context, project: str | None, region: str, name_prefix: str, admin_url: str | None,
        stack: str | None, actor: str | None) -> None:
    """See and fix any room of baton: state, stuck rooms, pause/resume/skip, dead letters, rejected pushes,
    the status error queue, scheduled messages, and the deployment-wide incident switch."""
    ctx.obj = Env(project, region, name_prefix, admin_url, stack, actor)


def main() -> None:
    """The `baton` entry point (pyproject.toml)."""
    from baton_cli import GROUPS

    for group in GROUPS():
        cli.add_command(group)
    cli(prog_name="baton")


if __name__ == "__main__":
    main()
