"""Image bytes shared by both providers' request checks: data URLs, base64, sniffing."""

from __future__ import annotations

import base64
import binascii
import re

DATA_URL_RE = re.compile(r"^data:([^;,]*)((?:;[^;,]*)*),(.*)$", re.DOTALL)


def sniff_image(data: bytes) -> str | None:
    """The image media type from the magic bytes (jpeg, png, gif, webp) or None."""
    if data.startswith(b"\xff\xd8\xff"):
        return "image/jpeg"
    if data.startswith(b"\x89PNG\r\n\x1a\n"):
        return "image/png"
    if data.startswith((b"GIF87a", b"GIF89a")):
        return "image/gif"
    if len(data) >= 12 and data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "image/webp"
    return None


def b64decode(data: str) -> bytes | None:
    """Strict base64 decoding; None when ``data`` is not base64."""
    try:
        return base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        return None
