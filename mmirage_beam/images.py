"""Resolve image inputs: local files are read and base64-encoded, URLs kept as URLs.

The media type of a local image is taken from its bytes (Pillow identifies the format
from the file header), never from its name, so ``flower_png_bytes.jpg`` is sent as PNG.
"""

from __future__ import annotations

import base64
import io
import posixpath
from typing import Any, Optional

from mmirage_beam.errors import RequestBuildError

# Pillow format name -> IANA media type.
_MEDIA_TYPES = {
    "JPEG": "image/jpeg",
    "PNG": "image/png",
    "GIF": "image/gif",
    "WEBP": "image/webp",
    "BMP": "image/bmp",
    "TIFF": "image/tiff",
}


def is_url(value: str) -> bool:
    return value.startswith(("http://", "https://"))


def resolve_image_path(value: str, image_base_path: Optional[str]) -> str:
    """Join a relative image path onto ``image_base_path`` (absolute paths and URLs kept)."""
    if is_url(value) or not image_base_path or value.startswith("/") or "://" in value:
        return value
    return posixpath.join(image_base_path, value)


def sniff_media_type(data: bytes) -> tuple[Optional[str], bool]:
    """Return ``(media_type, animated)`` from the image bytes; ``(None, False)`` if unknown."""
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(io.BytesIO(data)) as im:
            fmt = im.format
            animated = bool(getattr(im, "is_animated", False))
    except (UnidentifiedImageError, OSError, ValueError):
        return None, False
    return _MEDIA_TYPES.get(fmt or "", f"image/{(fmt or 'unknown').lower()}"), animated


def load_image(value: Any, image_base_path: Optional[str]) -> dict[str, Any]:
    """Turn one image input value into the neutral payload image dict.

    Args:
        value: a path (relative to ``image_base_path`` or absolute) or an http(s) URL.
        image_base_path: the dataset's ``image_base_path``.

    Returns:
        ``{"source", "url", "media_type", "data", "size_bytes", "animated"}``: for a URL,
        ``url`` is set and the rest ``None``/``False``; for a file, ``data`` is base64 and
        ``url`` a ``data:`` URI.

    Raises:
        RequestBuildError: the value is not a string, the file cannot be read, or its
            bytes are not a recognisable image.
    """
    from apache_beam.io.filesystems import FileSystems

    if not isinstance(value, str) or not value.strip():
        raise RequestBuildError(f"image value must be a path or URL string, got {value!r}")
    if is_url(value):
        return {
            "source": value,
            "url": value,
            "media_type": None,
            "data": None,
            "size_bytes": None,
            "animated": False,
        }
    path = resolve_image_path(value, image_base_path)
    try:
        with FileSystems.open(path, compression_type="uncompressed") as f:
            raw = f.read()
    except Exception as exc:  # Beam wraps OS errors in its own IOError types
        raise RequestBuildError(f"image file {path!r} cannot be read ({exc})") from None
    media_type, animated = sniff_media_type(raw)
    if media_type is None:
        raise RequestBuildError(f"image file {path!r} is not a recognisable image")
    data = base64.b64encode(raw).decode("ascii")
    return {
        "source": path,
        "url": f"data:{media_type};base64,{data}",
        "media_type": media_type,
        "data": data,
        "size_bytes": len(raw),
        "animated": animated,
    }
