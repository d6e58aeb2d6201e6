"""`baton rejects list|replay`: pushes baton kept as invalid (`rejected_messages/`)."""

from __future__ import annotations

import base64
import binascii
import json

import click

from baton_cli.main import Env, command, emit_json, pass_env, table


@click.group()
def rejects() -> None:
    """Rejected pushes (never valid as they came): list them, publish one again."""


@command(rejects, "list")
@click.option("--limit", default=50, show_default=True, type=click.IntRange(1, 5000))
@pass_env
def list_rejects(env: Env, limit: int, as_json: bool) -> None:
    """Rejected pushes, newest first, with their reason."""
    rows = env.operators.store.rejected(limit)
    if as_json:
        emit_json([{"id": key, **doc} for key, doc in rows])
        return
    env.console.print(table(f"{len(rows)} rejected push(es)", ["id", "rejected at", "room", "message", "reason",
                                                              "replayed"], [
        [key, d.get("rejected_at"), (d.get("attributes") or {}).get("room_id") if isinstance(d.get("attributes"),
                                                                                              dict) else None,
         (d.get("attributes") or {}).get("message_id") if isinstance(d.get("attributes"), dict) else None,
         d.get("reason"), f"{d.get('replayed_at')} by {d.get('replayed_by')}" if d.get("replayed_at") else ""]
        for key, d in rows]))


@command(rejects, "replay")
@click.argument("reject_id", metavar="ID")
@click.option("--attr", "attrs", multiple=True, metavar="KEY=VALUE",
              help="set or fix an attribute before publishing (repeatable), e.g. --attr provider=whatsapp")
@click.option("--topic", help="topic to publish to (default: PUBSUB_TOPIC)")
@pass_env
def replay(env: Env, reject_id: str, attrs: tuple[str, ...], topic: str | None, as_json: bool) -> None:
    """Publish rejected push ID again (its data and attributes, with --attr fixes), once: a second replay
    of the same ID is a no-op. It is validated again like any push."""
    store = env.operators.store
    doc = store.rejected_one(reject_id)
    if doc is None:
        raise click.ClickException(f"no rejected push {reject_id!r}")
    attributes = doc.get("attributes") or {}
    if isinstance(attributes, str):  # kept as JSON text when it was not a string map
        try:
            attributes = json.loads(attributes)
        except ValueError:
            attributes = {}
    attributes = {str(k): str(v) for k, v in (attributes if isinstance(attributes, dict) else {}).items()}
    for item in attrs:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise click.BadParameter(f"{item!r} is not KEY=VALUE", param_hint="--attr")
        attributes[key] = value
    try:
        data = base64.b64decode(doc.get("data") or "", validate=True)
    except (binascii.Error, ValueError):
        data = str(doc.get("data") or "").encode()
    result: dict[str, object] = {"id": reject_id, "replayed": False, "attributes": attributes}
    if not store.claim_replay(reject_id, env.who):
        result["reason"] = f"already replayed at {doc.get('replayed_at')} by {doc.get('replayed_by')}"
    else:
        from google.cloud import pubsub_v1

        settings = env.settings
        client = pubsub_v1.PublisherClient(
            publisher_options=pubsub_v1.types.PublisherOptions(enable_message_ordering=True))
        path = client.topic_path(settings.project, topic or settings.pubsub_topic)
        try:
            published = client.publish(path, data, ordering_key=attributes.get("room_id", ""),
                                       **attributes).result(timeout=60)
        except Exception:
            store.finish_replay(reject_id, None)
            raise
        store.finish_replay(reject_id, published)
        result.update(replayed=True, published_as=published, topic=path, actor=env.who)
    if as_json:
        emit_json(result)
    else:
        env.console.print(table(f"replay of {reject_id}", ["", ""], [[k, v] for k, v in result.items()]))
