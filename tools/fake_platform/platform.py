"""`FakeGraphApi`: the fake platform, made of its core, its faults and its wire formats.

Decides nothing of its own; must not grow behaviour (each concern has its module).
"""

from __future__ import annotations

from tools.fake_platform.meta_messaging import MetaMessagingWire
from tools.fake_platform.whatsapp import WhatsAppWire


class FakeGraphApi(WhatsAppWire, MetaMessagingWire):
    """State and behaviour of the fake platform (thread-safe)."""
