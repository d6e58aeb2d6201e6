"""`baton outcomes list|replay`: delivery outcomes the outcomes topic did not
take, kept in Firestore until published again (shared/outcomes.py)."""

from __future__ import annotations

import click

from baton_cli.main import Env, bulk_options, command, confirm_bulk, emit_json, pass_env, table


@click.group()
def outcomes() -> None:
    """Delivery outcomes kept while the outcomes topic was out: list them, publish them again."""


@command(outcomes, "list")
@click.option("--limit", default=1000, show_default=True, type=click.IntRange(1, 100_000))
@pass_env
def list_outcomes(env: Env, limit: int, as_json: bool) -> None:
    """The kept outcomes, oldest first, with the error that kept them."""
    kept = env.call("outcomes.list", limit=limit)
    if as_json:
        emit_json(kept)
        return
    env.console.print(table(f"{len(kept)} kept outcome(s)", ["kept at", "outcome", "room", "message", "error"],
                            [[k["kept_at"], k.get("outcome"), k.get("room_id"), k.get("message_id"), k.get("error")]
                             for k in kept]))


@command(outcomes, "replay")
@click.option("--limit", default=1000, show_default=True, type=click.IntRange(1, 100_000))
@bulk_options
@pass_env
def replay(env: Env, limit: int, dry_run: bool, yes: bool, as_json: bool) -> None:
    """Publish the kept outcomes to the outcomes topic again, oldest first, deleting each once Pub/Sub took it.
    Says how many it would publish and asks first (--yes: does not ask; --dry-run: only says)."""
    preview = env.call("outcomes.replay", limit=limit, dry_run=True)
    if not confirm_bulk(env, "outcome replay", preview, dry_run, yes, as_json):
        return
    counts = env.call("outcomes.replay", limit=limit)
    if as_json:
        emit_json(counts)
    else:
        env.console.print(table("outcome replay", ["", ""], [[k, v] for k, v in counts.items()]))
