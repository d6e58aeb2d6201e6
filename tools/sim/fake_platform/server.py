"""The fake platform's HTTP server: routes each request to `FakeGraphApi`,
writes its answer (or drops the connection, or trickles it), and `main`.

Decides only routes and how an answer is written; must not decide any
answer's content (the wire-format modules do).
"""

from __future__ import annotations

import argparse
import hmac
import json
import re
import signal
import threading
import time
import urllib.parse
from dataclasses import asdict
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import tools.sim.fake_platform
from tools.sim.fake_platform.assets import asset
from tools.sim.fake_platform.config import FakeConfig
from tools.sim.fake_platform.core import MetaApp, _error
from tools.sim.fake_platform.faults import TrickledAnswer
from tools.sim.fake_platform.platform import FakeGraphApi

SEND_PATH = re.compile(r"^/v[0-9.]+/(?P<phone>[^/]+)/messages$")
MEDIA_PATH = re.compile(r"^/v[0-9.]+/(?P<phone>[^/]+)/media$")
ASSET_PATH = re.compile(r"^/assets/(?P<name>[A-Za-z0-9._-]+)$")
# The largest upload request body read at all, bytes (larger ones are refused unread).
MAX_UPLOAD_REQUEST_BYTES = 64 * 1024 * 1024


def make_handler(fake: FakeGraphApi, control_token: str | None = None) -> type[BaseHTTPRequestHandler]:
    """`control_token`: when set, `/_fake/*` (but health) answers 401 without
    `Authorization: Bearer <it>` (the fake deployed public for the cloud load
    test: its sends are guarded by the access token, its controls by this)."""
    control = f"Bearer {control_token}" if control_token else None

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        # Headers and body go out in two writes: without TCP_NODELAY every
        # answer waits for the client's delayed ACK (about 40 ms here).
        disable_nagle_algorithm = True

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - quiet access log
            pass

        def _json(self, status: int | None, body: Any) -> None:
            if status is None:  # drop: no answer at all, the connection is closed
                self.close_connection = True
                return
            trickle_ms = body.ms_per_byte if isinstance(body, TrickledAnswer) else 0.0
            raw = json.dumps(body.body if isinstance(body, TrickledAnswer) else body).encode()
            try:
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                if not trickle_ms:
                    self.wfile.write(raw)
                for i in range(len(raw) if trickle_ms else 0):  # a platform trickling its answer
                    self.wfile.write(raw[i:i + 1])
                    self.wfile.flush()
                    time.sleep(trickle_ms / 1000)
            except OSError:  # the client gave up waiting (a slow send)
                self.close_connection = True

        def _raw(self, status: int, content_type: str, body: bytes) -> None:
            try:
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
            except OSError:  # the client gave up (a file larger than it takes)
                self.close_connection = True

        def _body(self) -> Any:
            length = int(self.headers.get("Content-Length") or 0)
            return json.loads(self.rfile.read(length) or b"{}")

        def _refused_control(self) -> bool:
            if control and self.path.startswith("/_fake/") and self.path != "/_fake/health" and not hmac.compare_digest(
                    self.headers.get("Authorization") or "", control):
                self._json(401, {"error": "the fake's control token is needed"})
                return True
            return False

        def do_GET(self) -> None:
            if self._refused_control():
                return None
            if self.path == "/_fake/stats":
                return self._json(200, fake.stats())
            if self.path == "/_fake/health":
                return self._json(200, {"ok": True})
            url = urllib.parse.urlsplit(self.path)
            match = ASSET_PATH.match(url.path)
            if match:
                query = urllib.parse.parse_qs(url.query)
                size = query.get("bytes", [""])[0]
                delay = query.get("delay_ms", [""])[0]
                if delay.isdigit():
                    time.sleep(min(int(delay), 60_000) / 1000)  # a slow media host (tests of preparation order)
                status, kind, body = asset(match["name"], int(size) if size.isdigit() else None)
                with fake.lock:
                    fake.media_counts["asset_fetches"] += 1
                return self._raw(status, kind, body)
            self._json(404, _error(100, "Unknown path", "GraphMethodException"))

        def do_POST(self) -> None:
            received = time.time()  # before the body is read: the request's arrival
            if self._refused_control():
                return None
            media = MEDIA_PATH.match(self.path)
            if media:
                length = int(self.headers.get("Content-Length") or 0)
                if length > MAX_UPLOAD_REQUEST_BYTES:
                    self.close_connection = True
                    return self._json(413, _error(100, "(#100) Invalid parameter: File Too Large", "OAuthException"))
                raw = self.rfile.read(length)
                status, answer = fake.handle_upload(media["phone"], self.headers.get("Authorization"),
                                                    self.headers.get("Content-Type") or "", raw)
                return self._json(status, answer)
            try:
                body = self._body()
            except ValueError:
                return self._json(400, _error(100, "Invalid JSON", "OAuthException"))
            if self.path == "/_fake/config":
                try:
                    fake.update_config(body)
                except ValueError as exc:
                    return self._json(400, {"error": str(exc)})
                return self._json(200, asdict(fake.config))
            if self.path == "/_fake/reset":
                fake.reset()
                return self._json(200, {"ok": True})
            match = SEND_PATH.match(self.path)
            if not match:
                return self._json(404, _error(100, "Unknown path", "GraphMethodException"))
            status, answer = fake.handle_send(match["phone"], self.headers.get("Authorization"), body, received)
            self._json(status, answer)

    return Handler


def main() -> None:
    parser = argparse.ArgumentParser(description=tools.sim.fake_platform.__doc__.split("\n\n")[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8090)
    parser.add_argument("--webhook-url", required=True)
    parser.add_argument("--app-secret", default="local-app-secret")
    parser.add_argument("--access-token", default="local-access-token")
    parser.add_argument("--messenger", default="200000000000002:local-messenger-token:local-messenger-secret",
                        help="PAGE-ID:TOKEN:SECRET of the Messenger app")
    parser.add_argument("--instagram", default="300000000000003:local-instagram-token:local-instagram-secret",
                        help="IG-ID:TOKEN:SECRET of the Instagram app")
    parser.add_argument("--config", default="{}", help="JSON object: FakeConfig fields to override")
    parser.add_argument("--control-token", default=None, help="guard /_fake/* with this bearer token (public deploys)")
    args = parser.parse_args()
    config = FakeConfig()
    apps = tuple(MetaApp(provider, *spec.split(":", 2))
                 for provider, spec in (("messenger", args.messenger), ("instagram", args.instagram)))
    fake = FakeGraphApi(args.webhook_url, args.app_secret, args.access_token, config, apps)
    fake.update_config(json.loads(args.config))
    server = ThreadingHTTPServer((args.host, args.port), make_handler(fake, args.control_token))
    server.daemon_threads = True

    def stop(*_: Any) -> None:
        fake.stopping = True
        threading.Thread(target=server.shutdown, daemon=True).start()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    server.serve_forever()


if __name__ == "__main__":
    main()
