"""`baton status`, `baton pause --all`, `baton resume --all`: the whole
deployment at once (shared/admin/overview.py, shared/admin/incident.py)."""

from __future__ import annotations

from typing import Any

import click

from baton_cli.main import Env, emit_json, pass_env, table


def _incident_line(incident: dict[str, Any]) -> str:
    if not incident.get("on"):
        return "off" + (f" (last cleared by {incident['actor']}: {incident['reason']})" if incident.get("actor") else "")
    return f"ON: no new sends, set by {incident.get('actor')}: {incident.get('reason')}"


@click.command("status")
@click.option("--json", "as_json", is_flag=True, help="print JSON instead of tables")
@click.option("--skip-error-queue", is_flag=True, help="do not count the status error queue (a pull, up to 1,000)")
@pass_env
def status(env: Env, as_json: bool, skip_error_queue: bool) -> None:
    """The deployment at a glance: rooms holding, in flight (per provider), paused, with parked messages,
    overdue; dead letters, rejected pushes, scheduled messages, the status error queue; the incident switch."""
    o = env.call("status", skip_error_queue=skip_error_queue or None)
    if as_json:
        emit_json(o)
        return
    d = o["deployment"]

    def capped(c: dict[str, Any]) -> str:
        return f"{c['count']:,}" + ("+" if c["at_least"] else "")

    rows = [["incident switch", _incident_line(o["incident"])],
            *[[f"rooms {k.replace('_', ' ')}", f"{v:,}"] for k, v in o["rooms"].items()],
            *[[f"  in flight to {p}", f"{n:,}"] for p, n in o["in_flight_by_provider"].items()],
            *[[f"  in flight from WhatsApp number {n}", f"{c:,}"] for n, c in o.get("in_flight_by_number", {}).items()],
            ["dead letters kept", f"{o['dead_letters_kept']:,}"],
            ["rejected pushes kept", f"{o['rejected_pushes_kept']:,}"],
            ["scheduled, waiting", capped(o["scheduled"])]]
    if "status_error_queue" in o:
        rows.append(["status error queue", capped(o["status_error_queue"])])
    env.console.print(table(f"baton in {d['project']} ({d['index_shards']} index shards, webhook {d['webhook_mode']}, "
                            f"{', '.join(d['providers'])})", ["", ""], rows))


def _switch(env: Env, action: str, reason: str, as_json: bool) -> None:
    out = env.call(action, reason=reason)
    if as_json:
        emit_json(out)
        return
    state = _incident_line(out["incident"])
    env.console.print(f"incident switch {state}" + ("" if out["changed"] else " (it already was: nothing changed)"))


@click.command("pause")
@click.option("--all", "all_", is_flag=True, required=True, help="every room of the deployment (required: one room "
                                                                     "is `baton rooms pause ROOM`)")
@click.option("--reason", required=True, help="why (logged with your identity)")
@click.option("--json", "as_json", is_flag=True, help="print JSON")
@pass_env
def pause_all(env: Env, all_: bool, reason: str, as_json: bool) -> None:
    """The incident switch: no room starts a new send (within about 2 s); pushes, statuses and acks are
    still taken, nothing is lost; a message in flight ends normally. `baton resume --all` lifts it."""
    if not all_:
        raise click.UsageError("say --all (one room: baton rooms pause ROOM)")
    _switch(env, "pause.all", reason, as_json)


@click.command("resume")
@click.option("--all", "all_", is_flag=True, required=True, help="every room of the deployment")
@click.option("--reason", default="resumed", show_default=True)
@click.option("--json", "as_json", is_flag=True, help="print JSON")
@pass_env
def resume_all(env: Env, all_: bool, reason: str, as_json: bool) -> None:
    """Lift the incident switch: each held room sends its head of line again within about 20 s, in order."""
    if not all_:
        raise click.UsageError("say --all (one room: baton rooms resume ROOM)")
    _switch(env, "resume.all", reason, as_json)
