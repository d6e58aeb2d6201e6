"""Cloud Functions entry points (2nd gen, HTTP): `enqueue`, `deadletter`,
`webhook`, `status`, `timeout`, `sweep`, `prepare`, and `admin` (the
operators' function behind the `baton` CLI, shared/admin/).

They only parse the HTTP request, call `shared.service.DeliveryService`, and
answer. All share one source archive; each is deployed with its own entry
point. The service is built once per instance, on first use.
"""

from __future__ import annotations

import functools
import json
import sys
from collections.abc import Callable
from typing import Any

import flask
import functions_framework
from flask import Request, Response
from werkzeug.datastructures import Headers

from shared.bootstrap import wire
from shared.events import reset_request_trace, set_request_trace, trace_fields
from shared.service import TRANSIENT_ERRORS, DeliveryService, Reply, start_request
from shared.store import RoomStore

# Errors that mean "try again later": answered 503 (shared/service/).
TRANSIENT = TRANSIENT_ERRORS


@functools.cache
def wired() -> tuple[DeliveryService, RoomStore]:
    """This instance's service and its Firestore store (shared/bootstrap.py), built once."""
    return wire()


def service() -> DeliveryService:
    return wired()[0]


def respond(app: DeliveryService, function: str, handler: Callable[..., Reply], *args: Any) -> Response:
    """Run one handler of `app` and turn its `Reply` (or a transient failure:
    503, so the caller redelivers) into an HTTP response."""
    started = start_request()
    # One request, one trace: every event line it writes carries its trace id.
    headers: Headers | dict[str, str] = flask.request.headers if flask.has_request_context() else {}
    trace = set_request_trace(trace_fields(headers.get("X-Cloud-Trace-Context"), headers.get("traceparent"),
                                           app.settings.project))
    try:
        reply: Reply = handler(*args)
    except TRANSIENT as exc:
        print(json.dumps({"severity": "ERROR", "message": f"{function}: transient failure, asking for a retry: {exc!r}"}),
              file=sys.stdout, flush=True)
        reply = Reply(503, {"error": "temporarily unavailable", "detail": type(exc).__name__})
    finally:
        reset_request_trace(trace)
    app.record_invocation(function, started, reply.status)
    return Response(json.dumps(reply.body), status=reply.status, mimetype="application/json")


@functions_framework.http
def enqueue(request: Request) -> Response:
    """Pub/Sub ordered push endpoint (POST, push envelope JSON); also where a
    scheduled message's Cloud Tasks task brings the same envelope back at its
    time (header X-Baton-Scheduled: 1, shared/scheduled.py)."""
    app = service()
    return respond(app, "enqueue", app.handle_push, request.get_data(),
                   request.headers.get("X-Baton-Scheduled") == "1")


@functions_framework.http
def deadletter(request: Request) -> Response:
    """Push endpoint of the dead-letter topic: parks each message in its room."""
    app = service()
    return respond(app, "deadletter", app.handle_dead_letter, request.get_data())


@functions_framework.http
def webhook(request: Request) -> Response:
    """WhatsApp webhook: GET handshake, POST signed status notifications
    (queued for the `status` function, or applied here: WEBHOOK_MODE)."""
    if request.method == "GET":
        reply = service().handle_handshake(request.args.to_dict())
        if reply.status == 200:
            return Response(reply.body["challenge"], status=200, mimetype="text/plain")
        return Response(json.dumps(reply.body), status=reply.status, mimetype="application/json")
    app = service()
    return respond(app, "webhook", app.handle_status_webhook, request.get_data(),
                   request.headers.get("X-Hub-Signature-256"))


@functions_framework.http
def status(request: Request) -> Response:
    """Push endpoint of the status queue (WEBHOOK_MODE=queued): applies one
    room's statuses. Anything but 2xx makes Pub/Sub redeliver it; after the
    subscription's maximum attempts it goes to the error queue."""
    app = service()
    return respond(app, "status", app.handle_status_push, request.get_data())


@functions_framework.http
def timeout(request: Request) -> Response:
    """Cloud Tasks timer endpoint (POST, JSON timer body)."""
    app = service()
    return respond(app, "timeout", app.handle_timer, request.get_data())


@functions_framework.http
def prepare(request: Request) -> Response:
    """Cloud Tasks prepare endpoint (POST, JSON prepare-task body,
    shared/prepare.py): uploads one message's media, stores the result."""
    app = service()
    return respond(app, "prepare", app.handle_prepare, request.get_data())


@functions_framework.http
def sweep(request: Request) -> Response:
    """The watchdog, called every minute by Cloud Scheduler (locally by the
    stack's sweeper loop): re-drives rooms whose wake-up is overdue."""
    app = service()
    return respond(app, "sweep", app.handle_sweep)


@functools.cache
def admin_service() -> Any:
    from shared.admin.service import AdminService

    return AdminService.build(*wired())


@functools.cache
def admin_console() -> Any:
    from shared.console.app import Console

    return Console(admin_service())


@functions_framework.http
def admin(request: Request) -> Response:
    """The operators' function (private: IAM invoker is var.operators): POST
    `{"action": ..., "args": {...}}` with the caller's Google ID token as
    `Authorization: Bearer`; every `baton` listing and action runs here with
    the deployment's settings (shared/admin/). Under /console/: the
    operators' console, HTML pages over the same actions (shared/console/)."""
    app = service()
    if request.path == "/console" or request.path.startswith("/console/"):
        return console_response(app, request)
    return respond(app, "admin", admin_service().handle, request.get_data(), request.headers.get("Authorization"),
                   request.url_root)


def console_response(app: DeliveryService, request: Request) -> Response:
    """One console page (shared/console/app.py); a transient failure: 503."""
    started = start_request()
    try:
        page = admin_console().handle(request.method, request.path, request.args.to_dict(),
                                      request.form.to_dict() if request.method == "POST" else {},
                                      request.headers.get("Authorization"), request.url_root)
        status, body, headers = page.status, page.body, page.headers
    except TRANSIENT as exc:
        print(json.dumps({"severity": "ERROR", "message": f"console: transient failure: {exc!r}"}),
              file=sys.stdout, flush=True)
        status, body, headers = 503, "temporarily unavailable: reload in a moment", {"Content-Type": "text/plain"}
    app.record_invocation("admin", started, status)
    return Response(body, status=status, headers=headers)


# Build the clients while the instance starts, not on its first request.
service()
