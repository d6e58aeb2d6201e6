"""`baton`: see and fix any room (docs/operations.md, "Operating baton").

Built on Click (https://click.palletsprojects.com/) with rich tables; every
command takes `--json` for scripts. Where it works:

- the local emulators: `baton --stack run/local ...` reads the environment of
  the stack `make up` started (its `stack.json`); or export what `make up`
  prints and the functions' settings yourself;
- a real project: `baton --project P [--database D] ...` with Application
  Default Credentials (`gcloud auth application-default login`). Actions
  that may send (resume, skip, redrive) need the functions' settings too:
  TIMEOUT_URL, TASKS_*, WHATSAPP_* (docs/configuration.md).

Command groups live in their own modules and are listed in `GROUPS`: a new
group (say `baton statuses`) is one module with a `click.Group` and one line
there.
"""

from __future__ import annotations

import json
import os
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property, wraps
from pathlib import Path
from typing import Any

import click
from rich.console import Console
from rich.table import Table

from shared.operators import ActionResult

_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d)")
_UNIT_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}


def parse_duration_ms(text: str) -> int:
    """`500ms`, `30s`, `5m`, `2h`, `1d` (or a sum such as `1h30m`) in ms.

    Raises:
        click.BadParameter: anything else.
    """
    parts = _DURATION.findall(text)
    if not parts or "".join(n + u for n, u in parts) != text.strip():
        raise click.BadParameter(f"{text!r} is not a duration such as 30s, 5m, 2h")
    return int(sum(float(n) * _UNIT_MS[u] for n, u in parts))


@dataclass
class Env:
    """The global options, and the service built from them on first use."""

    project: str | None = None
    database: str | None = None
    stack: str | None = None
    actor: str | None = None
    events: str | None = None
    console: Console = field(default_factory=lambda: Console(soft_wrap=True))

    def _environ(self) -> None:
        if self.stack:
            path = Path(self.stack) / "stack.json"
            if not path.exists():
                raise click.ClickException(f"no stack in {self.stack} (run `make up` first)")
            os.environ.update(json.loads(path.read_text())["function_env"])
        if self.project:
            os.environ["GOOGLE_CLOUD_PROJECT"] = self.project
        if self.database:
            os.environ["FIRESTORE_DATABASE"] = self.database

    @cached_property
    def settings(self) -> Any:
        from shared import config

        self._environ()
        try:
            return config.load()
        except ValueError as exc:
            raise click.ClickException(f"bad setting: {exc}") from exc

    @property
    def local(self) -> bool:
        return bool(os.environ.get("FIRESTORE_EMULATOR_HOST"))

    @cached_property
    def operators(self) -> Any:
        from google.cloud import firestore

        from shared.operators import (
            CloudLoggingEvents,
            FileEvents,
            OperatorEventLog,
            Operators,
            cloud_logging_forwarder,
        )
        from shared.providers import make_senders
        from shared.room import policy_from_settings
        from shared.service import DeliveryService
        from shared.store import RoomStore
        from shared.tasks import TimerScheduler, make_client

        s = self.settings
        store = RoomStore(firestore.Client(project=s.project, database=s.firestore_database), s.retention_hours,
                          index_shards=s.index_shards)
        forward = None if self.local else cloud_logging_forwarder(s.project)
        service = DeliveryService(s, policy_from_settings(s), store, TimerScheduler(make_client(s), s),
                                  make_senders(s), OperatorEventLog(s.event_log_path, forward))
        path = self.events or s.event_log_path
        source = FileEvents(Path(path)) if path else (None if self.local else CloudLoggingEvents(s.project))
        return Operators(service, source)

    @cached_property
    def who(self) -> str:
        from shared.operators import default_actor

        return self.actor or os.environ.get("BATON_ACTOR") or default_actor()


pass_env = click.make_pass_decorator(Env)


def command(group: click.Group, name: str, **kw: Any) -> Callable[[Callable[..., Any]], click.Command]:
    """A command of `group` with `--json`, and Google API errors turned into a
    clear message (exit 1) instead of a traceback."""

    def wrap(fn: Callable[..., Any]) -> click.Command:
        @wraps(fn)
        def run(*args: Any, **kwargs: Any) -> Any:
            from google.api_core import exceptions as gexc

            try:
                return fn(*args, **kwargs)
            except (gexc.GoogleAPICallError, gexc.RetryError) as exc:
                raise click.ClickException(f"{type(exc).__name__}: {exc}") from exc

        run = click.option("--json", "as_json", is_flag=True, help="print JSON instead of tables")(run)
        return group.command(name, **kw)(run)

    return wrap


def emit_json(data: Any) -> None:
    click.echo(json.dumps(data, indent=2, default=str))


def table(title: str, columns: list[str], rows: list[list[Any]]) -> Table:
    t = Table(title=title, title_justify="left")
    for c in columns:
        t.add_column(c, overflow="fold")
    for r in rows:
        t.add_row(*("" if v is None else str(v) for v in r))
    return t


def show_results(env: Env, results: list[ActionResult], as_json: bool) -> None:
    """Print what operator actions did; exit 1 if one left an error."""
    if as_json:
        emit_json([r.to_json() for r in results])
    else:
        rows = []
        for r in results:
            detail = "; ".join(f"{e.event}" + (f" #{e.seq}.{e.attempt}" if e.attempt else f" #{e.seq}" if e.seq else "")
                               for e in r.events[1:])
            rows.append([r.room_id, r.action, r.target, "yes" if r.changed else "no (no-op)", r.outcome, detail])
        env.console.print(table(f"{len(results)} action(s) by {env.who}",
                                ["room", "action", "target", "changed", "outcome", "then"], rows))
        for r in results:
            if r.error:
                env.console.print(f"[yellow]{r.room_id}[/]: {r.error}")
    if any(r.error for r in results):
        sys.exit(1)


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 110})
@click.option("--project", envvar="GOOGLE_CLOUD_PROJECT", help="GCP project (default: GOOGLE_CLOUD_PROJECT)")
@click.option("--database", envvar="FIRESTORE_DATABASE", help="Firestore database id (default: (default))")
@click.option("--stack", envvar="BATON_STACK", metavar="RUN_DIR",
              help="use the local stack `make up` started in RUN_DIR (e.g. run/local)")
@click.option("--actor", help="who acts, logged on every action (default: BATON_ACTOR, the ADC service "
                               "account, or the local user)")
@click.option("--events", "events_path", metavar="PATH",
              help="local event log for `rooms show` (default: EVENT_LOG_PATH; in the cloud: Cloud Logging)")
@click.pass_context
def cli(ctx: click.Context, project: str | None, database: str | None, stack: str | None, actor: str | None,
        events_path: str | None) -> None:
    """See and fix any room of baton: state, stuck rooms, pause/resume/skip,
    dead letters and rejected pushes."""
    ctx.obj = Env(project, database, stack, actor, events_path)


def main() -> None:
    """The `baton` entry point (pyproject.toml)."""
    from baton_cli import GROUPS

    for group in GROUPS():
        cli.add_command(group)
    cli(prog_name="baton")


if __name__ == "__main__":
    main()
