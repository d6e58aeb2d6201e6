"""Media preparation in the simulation: the `prepare` function's preparers
(WhatsApp's media upload, one per sending number) and what the platform
knows of an uploaded media id.

WhatsApp keeps an uploaded media id for the number that uploaded it: a send
from another number cannot use it
(https://developers.facebook.com/docs/whatsapp/cloud-api/reference/media:
"media uploaded with one phone number ID can be used only by that number").
`SimPreparer.prepare_media` is a port call (latency, stalls, a crash before
or after the upload) and fails by seed, transiently (5xx) or for good (the
link is gone); `uploads` maps each media id to its number, and the platform
judges each send of a media id against it (platforms.py).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from shared.providers import PrepareResult
from tools.sim.fakes import Crash

if TYPE_CHECKING:
    from tools.sim.simulation.world import World


class SimPreparer:
    """The `Preparer` of one WhatsApp number (see the module)."""

    def __init__(self, world: World, number: str) -> None:
        self.world, self.number = world, number

    def prepare_media(self, kind: str, link: str) -> PrepareResult:
        w = self.world
        f = w.faults
        w.sched.pause(f.port_latency_us("media upload"))
        if f.chance("crash", "crash during a media upload"):
            raise Crash("injected: died during the media upload")
        if f.chance("send_fault", "media upload failed (5xx)"):
            return PrepareResult(error="injected: upload answered 500")
        if f.chance("permanent", "media upload refused for good (link gone)"):
            return PrepareResult(error="injected: the link answers 404", permanent=True)
        w.media_ids += 1
        media_id = f"media-{w.media_ids}"
        w.uploads[media_id] = self.number
        w.sched.pause(f.port_latency_us("media upload"))
        if f.chance("crash", "crash after a media upload"):
            raise Crash("injected: died after the media upload")
        return PrepareResult(media_id=media_id)
