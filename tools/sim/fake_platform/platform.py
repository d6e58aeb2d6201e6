"""`FakeGraphApi`: the fake platform, made of its core, its faults and its wire formats.

Decides only which wire format answers a send call (by the id in its path);
must not grow behaviour of its own (each concern has its module).
"""

from __future__ import annotations

from typing import Any

from tools.sim.fake_platform.faults import TrickledAnswer
from tools.sim.fake_platform.meta_messaging import MetaMessagingWire
from tools.sim.fake_platform.whatsapp import WhatsAppWire


class FakeGraphApi(WhatsAppWire, MetaMessagingWire):
    """State and behaviour of the fake platform (thread-safe).

    Named for what it stands in for: Meta's Graph API (graph.facebook.com),
    which serves the WhatsApp Cloud API, the Messenger Send API and Instagram
    messaging alike. Not to be confused with `FakePlatform` of tests/fakes.py,
    an in-memory provider adapter for unit tests.
    """

    def handle_send(self, phone_id: str, auth: str | None, body: dict[str, Any],
                    received: float | None = None) -> tuple[int | None, dict[str, Any] | TrickledAnswer]:
        """Answer one send call (`POST /{version}/{id}/messages`), told apart
        by the id in its path: a Messenger or Instagram app's id, else a
        WhatsApp phone number id. `(HTTP status, JSON body)` (a
        `TrickledAnswer` to write it slowly), or `(None, {})` to close the
        connection without any answer. `received`: when the request reached
        the handler (epoch s; now when not given)."""
        if phone_id in self.meta_apps:
            return self.handle_meta_send(self.meta_apps[phone_id], auth, body)
        return self.handle_whatsapp_send(phone_id, auth, body, received)
