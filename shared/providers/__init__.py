"""Platform adapters. Each provider name a producer may put in the `provider`
attribute maps to a client with `send(recipient, text, delivery_id, media=None,
payload=None) -> SendResult` (a `Sender`, shared/providers/base.py; `payload`
is a message's contract `data` for the kinds beyond text and media,
shared/contract); the providers that
prepare media (WhatsApp only) map to a `Preparer` with
`prepare_media(kind, link) -> PrepareResult`.

WhatsApp's Cloud API (whatsapp.py), Messenger and Instagram messaging
(meta_messaging.py); `make_senders` and `make_preparers` build their clients
(clients.py). What the rest of baton knows of each platform (its webhook
object, secret, parser, ack level, numbers, how an acceptance is recorded) is
in the registry (registry.py). A fourth platform is one module: a client
with `send` (build the request, read the answer into a `SendResult`), a
webhook parser into statuses or recipient receipts, its entry in the
registry and in `shared.config.PROVIDERS` (ack level, secrets).

Importing this package loads the send interface (base.py) and the registry
only, no client: the room's rules import both (`SendOutcome`, `has_numbers`)
and must not load the platforms' I/O code. `make_senders` and
`make_preparers` are loaded from clients.py on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from shared.providers.base import Media, Preparer, PrepareResult, Sender, SendOutcome, SendResult
from shared.providers.registry import KNOWN_PROVIDERS

if TYPE_CHECKING:
    from shared.providers.clients import make_preparers, make_senders

__all__ = ["KNOWN_PROVIDERS", "Media", "PrepareResult", "Preparer", "Sender", "SendOutcome", "SendResult",
           "make_preparers", "make_senders"]


def __getattr__(name: str) -> Any:
    """`make_senders`, `make_preparers`: from clients.py, on first use (PEP 562)."""
    if name in ("make_senders", "make_preparers"):
        from shared.providers import clients

        return getattr(clients, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
