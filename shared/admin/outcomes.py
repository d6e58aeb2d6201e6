"""`baton outcomes list|replay`: the delivery outcomes the outcomes topic did
not take, kept in Firestore (shared/outcomes.py), listed and published again
after the outage, in the admin function with the deployment's own settings."""

from __future__ import annotations

from typing import Any

from shared.outcomes import OutcomePublisher


def _publisher(admin: Any) -> OutcomePublisher:
    """The deployment's outcome publisher, or one built for the replay when
    OUTCOMES=off (outcomes kept before it was turned off)."""
    service = admin.operators.service
    if getattr(service, "outcomes", None) is not None:
        publisher: OutcomePublisher = service.outcomes
        return publisher
    return OutcomePublisher(admin.settings.project, admin.settings.outcomes_topic, service.store._db)  # noqa: SLF001 - the deployment's own client


def outcomes_list(admin: Any, args: Any, actor: str) -> list[dict[str, Any]]:
    """The kept outcomes, oldest first (at most `limit`)."""
    kept = _publisher(admin).kept(args.number("limit", 1000, 1, 100_000))
    return [{"id": k["id"], "kept_at": str(k.get("kept_at")), "error": k.get("error"), **(k.get("outcome") or {})}
            for k in kept]


def outcomes_replay(admin: Any, args: Any, actor: str) -> dict[str, Any]:
    """Publish the kept outcomes again (each deleted once Pub/Sub took it);
    `dry_run`: how many it would publish."""
    publisher = _publisher(admin)
    limit = args.number("limit", 1000, 1, 100_000)
    if args.flag("dry_run"):
        kept = publisher.kept(limit)
        return {"dry_run": True, "rooms": len({(k.get("outcome") or {}).get("room_id") for k in kept}),
                "messages": len(kept)}
    report = publisher.replay_kept(limit)
    return {"kept": report.kept, "published": report.published, "failed": report.failed, "actor": actor}
