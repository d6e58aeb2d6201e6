"""Cloud Functions entry points (2nd gen, HTTP): `enqueue`, `webhook`, `timeout`.

They only parse the HTTP request, call `shared.service.Baton`, and answer. The
three share one source archive; each is deployed with its own entry point.
Clients are built once per instance, on first use.
"""

from __future__ import annotations

import functools
import json
import sys
from collections.abc import Callable
from typing import Any

import functions_framework
from flask import Request, Response
from google.api_core import exceptions as gexc
from google.cloud import firestore

from shared import config
from shared.events import EventLog
from shared.providers import make_senders
from shared.room import policy_from_settings
from shared.service import Baton, Reply, start_request
from shared.store import ContentionError, RoomStore
from shared.tasks import TimerScheduler, make_client

# Errors that mean "try again later": Firestore or Cloud Tasks unreachable or
# overloaded, or a room that kept changing under the request. The caller's
# redelivery (Pub/Sub, Meta, Cloud Tasks) retries.
TRANSIENT = (gexc.GoogleAPICallError, gexc.RetryError, ContentionError, ConnectionError, TimeoutError)


@functools.cache
def baton() -> Baton:
    settings = config.load()
    store = RoomStore(firestore.Client(project=settings.project, database=settings.firestore_database),
                      settings.retention_hours)
    timers = TimerScheduler(make_client(settings), settings)
    return Baton(settings, policy_from_settings(settings), store, timers, make_senders(settings),
                 EventLog(settings.event_log_path))


def respond(app: Baton, function: str, handler: Callable[..., Reply], *args: Any) -> Response:
    """Run one handler of `app` and turn its `Reply` (or a transient failure:
    503, so the caller redelivers) into an HTTP response."""
    started = start_request()
    try:
        reply: Reply = handler(*args)
    except TRANSIENT as exc:
        print(json.dumps({"severity": "ERROR", "message": f"{function}: transient failure, asking for a retry: {exc!r}"}),
              file=sys.stdout, flush=True)
        reply = Reply(503, {"error": "temporarily unavailable", "detail": type(exc).__name__})
    app.record_invocation(function, started, reply.status)
    return Response(json.dumps(reply.body), status=reply.status, mimetype="application/json")


@functions_framework.http
def enqueue(request: Request) -> Response:
    """Pub/Sub ordered push endpoint (POST, push envelope JSON)."""
    app = baton()
    return respond(app, "enqueue", app.handle_push, request.get_data())


@functions_framework.http
def webhook(request: Request) -> Response:
    """WhatsApp webhook: GET handshake, POST signed status notifications."""
    if request.method == "GET":
        reply = baton().handle_handshake(request.args.to_dict())
        if reply.status == 200:
            return Response(reply.body["challenge"], status=200, mimetype="text/plain")
        return Response(json.dumps(reply.body), status=reply.status, mimetype="application/json")
    app = baton()
    return respond(app, "webhook", app.handle_status_webhook, request.get_data(),
                   request.headers.get("X-Hub-Signature-256"))


@functions_framework.http
def timeout(request: Request) -> Response:
    """Cloud Tasks timer endpoint (POST, JSON timer body)."""
    app = baton()
    return respond(app, "timeout", app.handle_timer, request.get_data())


# Build the clients while the instance starts, not on its first request.
baton()
