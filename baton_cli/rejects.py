"""`baton rejects list|replay`: pushes baton kept as invalid (`rejected_messages/`)."""

from __future__ import annotations

from typing import Any

import click

from baton_cli.main import Env, bulk_options, command, confirm_bulk, emit_json, pass_env, table


@click.group()
def rejects() -> None:
    """Rejected pushes (never valid as they came): list them, publish one again."""


def _attr(d: dict[str, Any], key: str) -> object:
    attributes = d.get("attributes")
    return attributes.get(key) if isinstance(attributes, dict) else None


@command(rejects, "list")
@click.option("--limit", default=50, show_default=True, type=click.IntRange(1, 5000))
@pass_env
def list_rejects(env: Env, limit: int, as_json: bool) -> None:
    """Rejected pushes, newest first, with their reason."""
    rows = env.call("rejects.list", limit=limit)
    if as_json:
        emit_json(rows)
        return
    env.console.print(table(f"{len(rows)} rejected push(es)", ["id", "rejected at", "room", "message", "reason",
                                                              "replayed"], [
        [d["id"], d.get("rejected_at"), _attr(d, "room_id"), _attr(d, "message_id"), d.get("reason"),
         f"{d.get('replayed_at')} by {d.get('replayed_by')}" if d.get("replayed_at") else ""] for d in rows]))


@command(rejects, "replay")
@click.argument("reject_id", metavar="ID")
@click.option("--attr", "attrs", multiple=True, metavar="KEY=VALUE",
              help="set or fix an attribute before publishing (repeatable), e.g. --attr provider=whatsapp")
@click.option("--topic", help="topic to publish to (default: the deployment's PUBSUB_TOPIC)")
@bulk_options
@pass_env
def replay(env: Env, reject_id: str, attrs: tuple[str, ...], topic: str | None, dry_run: bool, yes: bool,
           as_json: bool) -> None:
    """Publish rejected push ID again (its data and attributes, with --attr fixes), once: a second replay
    of the same ID is a no-op. It is validated again like any push. Says what it would publish and asks
    first (--yes: does not ask; --dry-run: only says)."""
    fixes: dict[str, str] = {}
    for item in attrs:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise click.BadParameter(f"{item!r} is not KEY=VALUE", param_hint="--attr")
        fixes[key] = value
    args = {"id": reject_id, "attrs": fixes, "topic": topic}
    preview = env.call("rejects.replay", dry_run=True, **args)
    if not confirm_bulk(env, f"replay of {reject_id} to {preview.get('topic')}", preview, dry_run, yes, as_json):
        return
    result = env.call("rejects.replay", **args)
    if as_json:
        emit_json(result)
    else:
        env.console.print(table(f"replay of {reject_id}", ["", ""], [[k, v] for k, v in result.items()]))
