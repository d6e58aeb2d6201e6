"""Who calls the admin function: a verified identity, never a flag.

In the cloud (ADMIN_AUTH=google) two checks stand in line:

1. Cloud Run's IAM: the function is private, `roles/run.invoker` only for
   var.operators (infra/admin.tf); a caller without it never reaches the code
   (https://cloud.google.com/functions/docs/securing/authenticating).
2. Here: the `Authorization: Bearer` token must be a Google-signed ID token
   (signature, issuer, expiry: google-auth's `id_token.verify_token`), its
   audience the function's own URL or one of ADMIN_AUDIENCES (a user's token
   from `gcloud` names gcloud's OAuth client), its e-mail verified, and, if
   ADMIN_OPERATORS is set, that e-mail (or its domain) listed. The e-mail
   is what the audit trail records as the actor.

On the local stack (ADMIN_AUTH=local) there is no Google to sign tokens: the
stack makes a random ADMIN_LOCAL_KEY, and the CLI, which reads it from the
stack's stack.json, signs `local.<identity>.<expiry s>.<HMAC-SHA256 hex>`
(`local_token`). Whoever can read stack.json can act, as whoever can run the
stack can; the key never leaves the machine. The code path after the check is
the same as in the cloud.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import time
from dataclasses import dataclass
from urllib.parse import urlsplit

from shared.config import AdminSettings

# Google's ID-token issuers (https://developers.google.com/identity/openid-connect/openid-connect#validatinganidtoken).
GOOGLE_ISSUERS = ("accounts.google.com", "https://accounts.google.com")
LOCAL_TOKEN_TTL_S = 300


class Unauthenticated(Exception):
    """No token, or one that does not verify (answered 401)."""


class Forbidden(Exception):
    """A verified caller that ADMIN_OPERATORS does not list (answered 403)."""


@dataclass(frozen=True)
class Caller:
    """A verified caller: `identity` (an e-mail address, or the local
    stand-in's name) and how it was verified (`google` or `local`)."""

    identity: str
    verified_by: str


def local_token(key: str, identity: str, now_s: float | None = None, ttl_s: int = LOCAL_TOKEN_TTL_S) -> str:
    """A stand-in token for the local stack, valid `ttl_s` s (see the module docstring).

    Raises:
        ValueError: an empty key or identity.
    """
    if not key or not identity:
        raise ValueError("a local token needs a key and an identity")
    who = base64.urlsafe_b64encode(identity.encode()).decode().rstrip("=")
    expiry = int((time.time() if now_s is None else now_s) + ttl_s)
    mac = hmac.new(key.encode(), f"{who}.{expiry}".encode(), hashlib.sha256).hexdigest()
    return f"local.{who}.{expiry}.{mac}"


def _verify_local(token: str, key: str, now_s: float) -> str:
    parts = token.split(".")
    if len(parts) != 4 or parts[0] != "local" or not parts[2].isdigit():
        raise Unauthenticated("not a local stand-in token")
    _, who, expiry, mac = parts
    want = hmac.new(key.encode(), f"{who}.{expiry}".encode(), hashlib.sha256).hexdigest()
    if not hmac.compare_digest(want, mac):
        raise Unauthenticated("the token's signature does not verify")
    if int(expiry) < now_s:
        raise Unauthenticated("the token has expired")
    try:
        return base64.urlsafe_b64decode(who + "=" * (-len(who) % 4)).decode()
    except ValueError as exc:
        raise Unauthenticated("the token names no identity") from exc


def _verify_google(token: str, audiences: tuple[str, ...]) -> str:
    from google.auth import exceptions as gauth_exc
    from google.auth.transport.requests import Request
    from google.oauth2 import id_token

    try:
        claims = id_token.verify_token(token, Request(), audience=None)  # audience checked below, against several
    except (ValueError, gauth_exc.GoogleAuthError) as exc:
        raise Unauthenticated(f"not a valid Google ID token: {exc}") from exc
    if claims.get("iss") not in GOOGLE_ISSUERS:
        raise Unauthenticated(f"issuer {claims.get('iss')!r} is not Google")
    aud = claims.get("aud")
    if aud not in audiences:
        raise Unauthenticated(f"audience {aud!r} is not this function")
    email = claims.get("email")
    if not email or not claims.get("email_verified"):
        raise Unauthenticated("the token carries no verified e-mail address")
    return str(email)


def allowed(identity: str, operators: tuple[str, ...]) -> bool:
    """Whether ADMIN_OPERATORS lets `identity` act: empty lets everyone (IAM
    decided), else its e-mail listed (`user:`/`serviceAccount:` prefixes as
    in IAM members are accepted) or `domain:` its domain."""
    if not operators:
        return True
    domain = identity.rpartition("@")[2].lower()
    for entry in operators:
        kind, sep, value = entry.partition(":")
        value = value if sep else kind
        if sep and kind == "domain":
            if value.lower() == domain:
                return True
        elif value.lower() == identity.lower():
            return True
    return False


def verify_caller(authorization: str | None, own_url: str, settings: AdminSettings,
                  now_s: float | None = None) -> Caller:
    """The verified caller of one admin request.

    Args:
        authorization: the request's `Authorization` header.
        own_url: the URL the request came to (its root, e.g.
            `https://baton-admin-123.europe-west1.run.app/`): an accepted audience.
        settings: ADMIN_AUTH and the lists (shared/config.py, `load_admin`).

    Raises:
        Unauthenticated: no bearer token, or it does not verify.
        Forbidden: verified, but not in ADMIN_OPERATORS.
    """
    scheme, _, token = (authorization or "").partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise Unauthenticated("no bearer token (Authorization: Bearer <Google ID token>)")
    token = token.strip()
    if settings.auth == "local":
        identity, how = _verify_local(token, settings.local_key, time.time() if now_s is None else now_s), "local"
    else:
        # Cloud Run ends TLS before the code: the request's own root reads http://.
        root = f"https://{urlsplit(own_url).netloc}"
        identity, how = _verify_google(token, (root, root + "/", *settings.audiences)), "google"
    if not allowed(identity, settings.operators):
        raise Forbidden(f"{identity} is not one of the operators")
    return Caller(identity, how)
