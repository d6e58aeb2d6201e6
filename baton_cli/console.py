"""`baton console`: the operators' console in a browser (docs/console.md).

The console is served by the private admin function under /console/
(shared/console/); a browser cannot add the Google ID token Cloud Run's IAM
asks for. This command is a local authenticating proxy, as `gcloud run
services proxy` is: it listens on 127.0.0.1 only, and forwards each request
to the admin function with `Authorization: Bearer` and the caller's token
(Google ID token in the cloud, refreshed before it expires; the stack's
stand-in token locally, baton_cli/main.py `Env.endpoint`). Only /console/
paths are forwarded. Anyone who can reach the port on this machine acts as
you, as with gcloud's proxy; the console's CSRF tokens keep other web pages
from acting through it (shared/console/csrf.py).
"""

from __future__ import annotations

import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import click

from baton_cli.main import Env, Failure, pass_env

TOKEN_REUSE_S = 240  # a token is reused this long (local tokens live 300 s, Google's 3,600 s)
FORWARDED_HEADERS = ("Content-Type", "Accept", "Accept-Language")
RETURNED_HEADERS = ("Content-Type", "Location", "Content-Security-Policy", "X-Content-Type-Options",
                    "Referrer-Policy", "Cache-Control", "X-Frame-Options")


class _Token:
    def __init__(self, make: Any) -> None:
        self._make, self._lock = make, threading.Lock()
        self._value, self._at = "", 0.0

    def get(self) -> str:
        with self._lock:
            if not self._value or time.monotonic() - self._at > TOKEN_REUSE_S:
                self._value, self._at = self._make(), time.monotonic()
            return self._value


def make_server(admin_url: str, token: Any, port: int, host: str = "127.0.0.1") -> ThreadingHTTPServer:
    """The proxy's HTTP server (not started): `admin_url` the admin
    function's root, `token()` a bearer token. Raises OSError if the port is taken."""
    import requests

    base = admin_url.rstrip("/")
    tokens = _Token(token)
    session = requests.Session()

    class Handler(BaseHTTPRequestHandler):
        def _forward(self) -> None:
            if not (self.path == "/console" or self.path.startswith(("/console/", "/console?"))):
                self.send_response(302 if self.path in ("/", "") else 404)
                self.send_header("Location", "/console/")
                self.end_headers()
                return
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else None
            headers = {h: self.headers[h] for h in FORWARDED_HEADERS if self.headers.get(h)}
            headers["Authorization"] = f"Bearer {tokens.get()}"
            try:
                r = session.request(self.command, base + self.path, data=body, headers=headers,
                                    allow_redirects=False, timeout=120)
            except requests.RequestException as exc:
                self.send_error(502, f"the admin function did not answer: {type(exc).__name__}")
                return
            self.send_response(r.status_code)
            for h in RETURNED_HEADERS:
                if h in r.headers:
                    self.send_header(h, r.headers[h])
            self.send_header("Content-Length", str(len(r.content)))
            self.end_headers()
            self.wfile.write(r.content)

        do_GET = do_POST = _forward  # noqa: N815 - http.server's names

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's name
            pass

    return ThreadingHTTPServer((host, port), Handler)


@click.command("console")
@click.option("--port", default=8765, show_default=True, type=click.IntRange(0, 65535),
              help="local port (127.0.0.1 only); 0: any free one")
@pass_env
def console(env: Env, port: int) -> None:
    """Open the operators' console: serve it on http://127.0.0.1:PORT/console/, forwarding to the admin
    function with your identity (Google ID token; the stack's stand-in token with --stack)."""
    url, token = env.endpoint
    token()  # fail now, not on the first page, without credentials
    try:
        server = make_server(url, token, port)
    except OSError as exc:
        raise Failure(f"cannot listen on 127.0.0.1:{port}: {exc}") from exc
    click.echo(f"console: http://127.0.0.1:{server.server_address[1]}/console/ (forwarding to {url}; Ctrl-C stops)",
               err=False)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
