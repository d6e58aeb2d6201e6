"""The files to fetch: deterministic media served by `GET /assets/{name}`.

Files to fetch: `GET /assets/{name}` serves deterministic bytes by the name's
extension (`.png` a real 1x1 PNG whose colour comes from the name, `.jpg` /
`.jpeg` a real 8x8 JPEG, `.gif` a 1x1 GIF served as `image/gif`, `.mp4`,
`.ogg`, `.mp3`, `.pdf`, `.txt`, `.webp` with their MIME types, anything else
`application/octet-stream`); `?bytes=N` pads the file to N bytes; names
starting `missing-` are 404, `unavailable-` 503. `GET /_fake/stats` counts
them all under `media`.

Decides the bytes, type and status of each name; must not touch the
platform's state (server.py counts the fetches).
"""

from __future__ import annotations

import base64
import hashlib
import zlib


def _png(rgb: tuple[int, int, int]) -> bytes:
    """A valid 1x1 RGB PNG of colour `rgb` (https://www.w3.org/TR/png/)."""
    def chunk(kind: bytes, data: bytes) -> bytes:
        return (len(data).to_bytes(4, "big") + kind + data
                + zlib.crc32(kind + data).to_bytes(4, "big"))
    ihdr = (1).to_bytes(4, "big") * 2 + bytes([8, 2, 0, 0, 0])  # 1x1, 8-bit, truecolour
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(b"\x00" + bytes(rgb))) \
        + chunk(b"IEND", b"")


# An 8x8 baseline JPEG (made once with Pillow) and a 1x1 GIF: real files.
JPEG_BYTES = base64.b64decode(
    "/9j/4AAQSkZJRgABAQAAAQABAAD/2wBDABALDA4MChAODQ4SERATGCgaGBYWGDEjJR0oOjM9PDkzODdASFxOQERXRTc4UG1RV19iZ2hnPk1xeXBk"
    "eFxlZ2P/2wBDARESEhgVGC8aGi9jQjhCY2NjY2NjY2NjY2NjY2NjY2NjY2NjY2NjY2NjY2NjY2NjY2NjY2NjY2NjY2NjY2NjY2P/wAARCAAIAAgDASIA"
    "AhEBAxEB/8QAHwAAAQUBAQEBAQEAAAAAAAAAAAECAwQFBgcICQoL/8QAtRAAAgEDAwIEAwUFBAQAAAF9AQIDAAQRBRIhMUEGE1FhByJxFDKBkaEII0Kx"
    "wRVS0fAkM2JyggkKFhcYGRolJicoKSo0NTY3ODk6Q0RFRkdISUpTVFVWV1hZWmNkZWZnaGlqc3R1dnd4eXqDhIWGh4iJipKTlJWWl5iZmqKjpKWmp6ip"
    "qrKztLW2t7i5usLDxMXGx8jJytLT1NXW19jZ2uHi4+Tl5ufo6erx8vP09fb3+Pn6/8QAHwEAAwEBAQEBAQEBAQAAAAAAAAECAwQFBgcICQoL/8QAtREA"
    "AgECBAQDBAcFBAQAAQJ3AAECAxEEBSExBhJBUQdhcRMiMoEIFEKRobHBCSMzUvAVYnLRChYkNOEl8RcYGRomJygpKjU2Nzg5OkNERUZHSElKU1RVVldY"
    "WVpjZGVmZ2hpanN0dXZ3eHl6goOEhYaHiImKkpOUlZaXmJmaoqOkpaanqKmqsrO0tba3uLm6wsPExcbHyMnK0tPU1dbX2Nna4uPk5ebn6Onq8vP09fb3"
    "+Pn6/9oADAMBAAIRAxEAPwCSiiivGPWP/9k=")
GIF_BYTES = base64.b64decode("R0lGODdhAQABAIAAAAAAAAAAACwAAAAAAQABAAAIBAABBAQAOw==")
# The other kinds WhatsApp takes, by extension: their MIME type (the bytes are a digest of the name).
OTHER_TYPES = {"mp4": "video/mp4", "ogg": "audio/ogg", "mp3": "audio/mpeg", "pdf": "application/pdf",
               "txt": "text/plain", "webp": "image/webp"}


def asset(name: str, size: int | None = None) -> tuple[int, str, bytes]:
    """`(HTTP status, Content-Type, body)` of `GET /assets/{name}[?bytes=size]`:
    deterministic bytes by extension, padded with zero bytes to `size`. The
    handler serves it `delay_ms` ms late when the query asks (a slow media host)."""
    if name.startswith("missing-"):
        return 404, "text/plain", b"not found"
    if name.startswith("unavailable-"):
        return 503, "text/plain", b"unavailable"
    ext = name.rsplit(".", 1)[-1].lower() if "." in name else ""
    if ext == "png":
        digest = hashlib.sha256(name.encode()).digest()
        kind, body = "image/png", _png((digest[0], digest[1], digest[2]))
    elif ext in ("jpg", "jpeg"):
        kind, body = "image/jpeg", JPEG_BYTES
    elif ext == "gif":
        kind, body = "image/gif", GIF_BYTES
    elif ext in OTHER_TYPES:  # served by type only: the fake platform never decodes them
        kind, body = OTHER_TYPES[ext], hashlib.sha256(name.encode()).digest()
    else:
        kind, body = "application/octet-stream", hashlib.sha256(name.encode()).digest()
    if size is not None and size > len(body):
        body += bytes(size - len(body))
    return 200, kind, body
