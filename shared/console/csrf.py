"""CSRF tokens of the console's forms: bound to the verified operator.

Every page with a form carries a token `{expiry s}.{HMAC-SHA256 hex}` of
(identity, expiry) under a key of this instance; every POST must bring it
back in the form field `csrf`, for the same identity, before its expiry
(OWASP's synchronizer token, stateless form:
https://cheatsheetseries.owasp.org/cheatsheets/Cross-Site_Request_Forgery_Prevention_Cheat_Sheet.html).
A page on another site can make the operator's browser POST to the local
authenticating proxy, which adds the operator's identity; it cannot read a
console page, so it has no token.

The key is random per instance: the admin function runs one instance at
most (infra/admin.tf), and a form older than the instance (it scaled to
zero, or restarted) is refused with "reload the page".
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import time

FIELD = "csrf"
TTL_S = 2 * 3600


class CsrfRefused(Exception):
    """A POST without a valid token for its caller (answered 403)."""


class Csrf:
    """Makes and checks tokens. `key`: bytes (default: 32 random bytes)."""

    def __init__(self, key: bytes | None = None) -> None:
        self._key = key or secrets.token_bytes(32)

    def _mac(self, identity: str, expiry: int) -> str:
        return hmac.new(self._key, f"{identity}\n{expiry}".encode(), hashlib.sha256).hexdigest()

    def token(self, identity: str, now_s: float | None = None) -> str:
        """A token for `identity`, valid TTL_S seconds."""
        expiry = int((time.time() if now_s is None else now_s) + TTL_S)
        return f"{expiry}.{self._mac(identity, expiry)}"

    def check(self, token: str | None, identity: str, now_s: float | None = None) -> None:
        """Raises CsrfRefused unless `token` is this instance's, for `identity`, unexpired."""
        expiry, _, mac = (token or "").partition(".")
        if not expiry.isdigit() or not mac:
            raise CsrfRefused("the form carries no CSRF token")
        if not hmac.compare_digest(self._mac(identity, int(expiry)), mac):
            raise CsrfRefused("the form's CSRF token is not this console's for you (reload the page)")
        if int(expiry) < (time.time() if now_s is None else now_s):
            raise CsrfRefused("the form has expired (reload the page)")
