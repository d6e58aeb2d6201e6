"""One admin request: verify the caller, parse, run the action, answer.

Request: `POST` with JSON `{"action": NAME, "args": {...}}` and
`Authorization: Bearer <token>` (shared/admin/identity.py). Answers (JSON):

- 200 `{"action", "actor", "result"}`;
- 400 `{"error"}`: not JSON, no such action, bad arguments (nothing changed);
- 401 / 403 `{"error"}`: no or a bad token / a caller not allowed; checked
  before the body is even parsed, so nothing changes;
- 404 `{"error"}`: the room, dead letter or rejected push does not exist;
- 503: Firestore, Pub/Sub or Cloud Tasks failed (functions/main.py).

Every request, refused ones included, writes one audit line
(`log_type` `baton.admin`: action, actor as verified, HTTP status, the
arguments without free text longer than 200 characters) to stdout (Cloud
Logging) and to EVENT_LOG_PATH's neighbour `admin.jsonl` when that is set.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Any

from shared.admin.actions import ACTIONS, CHANGING, Admin, Args, BadRequest, NotFound
from shared.admin.identity import Caller, Forbidden, Unauthenticated, verify_caller
from shared.admin.incident import IncidentSwitch
from shared.config import AdminSettings, load_admin
from shared.events import JsonLineWriter, utc_iso
from shared.service import DeliveryService, Reply, now_us
from shared.store import RoomStore

AUDIT_LOG_TYPE = "baton.admin"
MAX_BODY_BYTES = 1_000_000


@dataclass
class AdminService:
    """The admin function's handler.

    Args:
        admin: what the actions use (shared/admin/actions.py).
        auth: ADMIN_* settings (how callers are verified).
        audit: where audit lines go.
    """

    admin: Admin
    auth: AdminSettings
    audit: JsonLineWriter

    @classmethod
    def build(cls, service: DeliveryService, store: RoomStore, auth: AdminSettings | None = None) -> AdminService:
        """From the function's own `DeliveryService` and its Firestore store
        (shared/bootstrap.py, `wire`): the operators get a copy of the
        service whose event log captures each action's events
        (shared/operators.py, OperatorEventLog), and the store itself.

        Raises:
            ValueError: an ADMIN_* setting is invalid.
        """
        from shared.admin.timeline import CloudLoggingEventLog, LocalEventLog
        from shared.operators import OperatorEventLog, Operators

        s = service.settings
        auth = auth or load_admin()
        operated = service.with_events(OperatorEventLog(s.event_log_path))
        local = bool(os.environ.get("FIRESTORE_EMULATOR_HOST"))
        source = LocalEventLog(_path(s.event_log_path)) if s.event_log_path else (
            None if local else CloudLoggingEventLog(s.project))
        incident = service.incident or IncidentSwitch(store._db)  # noqa: SLF001 - the same client

        def error_queue() -> Any:
            from shared.admin.error_queue import ErrorQueue

            return ErrorQueue(s.project, s.status_topic, inbound_topic=s.inbound_topic or "baton-inbound")

        def scheduled() -> Any:
            if service.scheduled is None:
                raise RuntimeError("no scheduled hold configured")
            return service.scheduled

        def publisher() -> Any:
            import google.cloud.pubsub_v1 as pubsub_v1

            return pubsub_v1.PublisherClient(
                publisher_options=pubsub_v1.types.PublisherOptions(enable_message_ordering=True))

        audit_path = str(_path(s.event_log_path).with_name("admin.jsonl")) if s.event_log_path else ""
        admin = Admin(Operators(operated, source, store=store), s, incident, error_queue, scheduled, publisher)
        return cls(admin, auth, JsonLineWriter(audit_path))

    def handle(self, body: bytes, authorization: str | None, own_url: str) -> Reply:
        """Answer one admin request (see the module docstring). Raises what
        the action raises when Firestore, Pub/Sub or Cloud Tasks fail (the
        entry point answers 503)."""
        started = now_us()
        caller: Caller | None = None
        action = None
        args: Any = None
        try:
            caller = verify_caller(authorization, own_url, self.auth)
            action, args = _parse(body)
        except Unauthenticated as exc:
            reply = Reply(401, {"error": f"unauthenticated: {exc}"})
        except Forbidden as exc:
            reply = Reply(403, {"error": f"forbidden: {exc}"})
        except BadRequest as exc:
            reply = Reply(400, {"error": str(exc)})
        else:
            return self.run(action, args, caller, started)
        self._audit(started, action, args, caller, reply.status)
        return reply

    def verify(self, authorization: str | None, own_url: str) -> Caller:
        """The verified caller of a request (shared/admin/identity.py); a
        refusal is audited like the API's. Raises Unauthenticated or
        Forbidden."""
        try:
            return verify_caller(authorization, own_url, self.auth)
        except (Unauthenticated, Forbidden) as exc:
            self._audit(now_us(), None, None, None, 401 if isinstance(exc, Unauthenticated) else 403)
            raise

    def run(self, action: str, args: Any, caller: Caller, started: int | None = None) -> Reply:
        """Run one action of `ACTIONS` for a verified `caller` and audit it:
        the one path of the API and of the console (shared/console/). Answers
        as `handle`; raises what the action raises on a transient failure."""
        started = now_us() if started is None else started
        try:
            if action not in ACTIONS:
                raise BadRequest(f"no admin action {action!r}")
            result = ACTIONS[action](self.admin, Args(args), caller.identity)
            reply = Reply(200, {"action": action, "actor": caller.identity, "result": result})
        except BadRequest as exc:
            reply = Reply(400, {"error": str(exc)})
        except NotFound as exc:
            reply = Reply(404, {"error": str(exc)})
        except BaseException:
            self._audit(started, action, args, caller, 503)
            raise
        self._audit(started, action, args, caller, reply.status)
        return reply

    def _audit(self, started: int, action: str | None, args: Any, caller: Caller | None, status: int) -> None:
        self.audit.write({
            "severity": "NOTICE" if action in CHANGING and status == 200 and not (
                isinstance(args, dict) and args.get("dry_run") is True) else
            "WARNING" if status in (401, 403) else "INFO",
            "message": f"admin {action or '-'} by {caller.identity if caller else 'nobody verified'}: {status}",
            "log_type": AUDIT_LOG_TYPE, "ts": utc_iso(started), "action": action,
            "actor": caller.identity if caller else None, "verified_by": caller.verified_by if caller else None,
            "http_status": status, "args": _short(args) if isinstance(args, dict) else None,
        })


def _parse(body: bytes) -> tuple[str, Any]:
    if len(body) > MAX_BODY_BYTES:
        raise BadRequest(f"the request is over {MAX_BODY_BYTES} bytes")
    try:
        request = json.loads(body or b"null")
    except ValueError as exc:
        raise BadRequest(f"the body is not JSON: {exc}") from exc
    if not isinstance(request, dict) or not isinstance(request.get("action"), str):
        raise BadRequest('the body must be {"action": NAME, "args": {...}}')
    if request["action"] not in ACTIONS:
        raise BadRequest(f"no admin action {request['action']!r}; one of {', '.join(sorted(ACTIONS))}")
    return request["action"], request.get("args")


def _short(args: dict[str, Any]) -> dict[str, Any]:
    return {k: (v[:200] if isinstance(v, str) else v) for k, v in args.items()}


def _path(p: str) -> Any:
    from pathlib import Path

    return Path(p)
