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
    media_type, animated, _ = sniff_image(data)
    return media_type, animated


def sniff_image(data: bytes) -> tuple[Optional[str], bool, Optional[tuple[int, int]]]:
    """Return ``(media_type, animated, (width, height))`` from the image bytes, read from
    the header only (Pillow does not decode the pixels); ``(None, False, None)`` if the
    bytes are not a recognisable image. Width and height are in pixels."""
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(io.BytesIO(data)) as im:
            fmt = im.format
            animated = bool(getattr(im, "is_animated", False))
            size = (int(im.size[0]), int(im.size[1]))
    except (UnidentifiedImageError, OSError, ValueError, Image.DecompressionBombError):
        return None, False, None
    return _MEDIA_TYPES.get(fmt or "", f"image/{(fmt or 'unknown').lower()}"), animated, size


def image_error(img: dict[str, Any], message: str) -> RequestBuildError:
    """A :class:`RequestBuildError` about payload image ``img``, carrying the name of the
    image input it came from (``img["input"]``, set by ExtractInputs) as ``input_name``,
    so the row error names that input."""
    err = RequestBuildError(message)
    err.input_name = img.get("input")  # type: ignore[attr-defined]
    return err


def images_error(images: list[dict[str, Any]], message: str) -> RequestBuildError:
    """A :class:`RequestBuildError` about a request's images as a whole (their count or
    total size), naming every image input involved (comma-separated) as ``input_name``."""
    names = list(dict.fromkeys(str(i["input"]) for i in images if i.get("input")))
    err = RequestBuildError(message)
    err.input_name = ", ".join(names) or None  # type: ignore[attr-defined]
    return err


def load_image(value: Any, image_base_path: Optional[str]) -> dict[str, Any]:
    """Turn one image input value into the neutral payload image dict.

    Args:
        value: a path (relative to ``image_base_path`` or absolute) or an http(s) URL.
        image_base_path: the dataset's ``image_base_path``.

    Returns:
        ``{"source", "url", "media_type", "data", "size_bytes", "animated", "width",
        "height"}``: for a URL, ``url`` is set and the rest ``None``/``False`` (the
        provider fetches it; its size is not known here); for a file, ``data`` is base64,
        ``url`` a ``data:`` URI, ``size_bytes`` the file's size and ``width``/``height``
        its pixel dimensions (adapters check them against the provider's limits).

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
            "width": None,
            "height": None,
        }
    path = resolve_image_path(value, image_base_path)
    try:
        with FileSystems.open(path, compression_type="uncompressed") as f:
            raw = f.read()
    except Exception as exc:  # Beam wraps OS errors in its own IOError types
        raise RequestBuildError(f"image file {path!r} cannot be read ({exc})") from None
    media_type, animated, size = sniff_image(raw)
    if media_type is None or size is None:
        raise RequestBuildError(f"image file {path!r} is not a recognisable image")
    data = base64.b64encode(raw).decode("ascii")
    return {
        "source": path,
        "url": f"data:{media_type};base64,{data}",
        "media_type": media_type,
        "data": data,
        "size_bytes": len(raw),
        "animated": animated,
        "width": size[0],
        "height": size[1],
    }
