"""Resolve image inputs: local files are read and base64-encoded, URLs kept as URLs.

The media type of a local image is taken from its bytes (Pillow identifies the format
from the file header), never from its name, so ``flower_png_bytes.jpg`` is sent as PNG.

A dataset is data, not code (docs/security.md): the files its rows name are read and
uploaded to a third party, so a row may only name what the config allows.
:func:`resolve_image_path` confines paths to the dataset's ``image_base_path`` (no
absolute path, no ``..`` out of it, no symlink out of it, unless
``allow_images_outside_base``); only ``http(s)`` URLs are passed on; and
:func:`load_image` checks a file's size before reading any of it.
"""

from __future__ import annotations

import base64
import io
import os
import posixpath
import re
from typing import Any, Optional, TypedDict

from mmirage_beam.errors import RequestBuildError

#: The largest image file read when the provider states no per-image limit
#: (``BatchSubmissionAdapter.max_image_file_bytes`` None), in bytes: 64 MiB.
DEFAULT_MAX_IMAGE_FILE_BYTES = 64 * 1024 * 1024
_DEFAULT_LIMIT_TEXT = "the 64 MiB read for an image when the provider states no limit"

# "<scheme>://" (RFC 3986 scheme characters), and "data:": what a value names that is not
# a path. A file name with a colon elsewhere ("photo:1.png") is still a path.
_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.\-]*)://|^(data):", re.IGNORECASE)
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
    """Whether ``value`` is an ``http://`` or ``https://`` URL (any case)."""
    return value[:8].lower().startswith(("http://", "https://"))


def url_scheme(value: str) -> Optional[str]:
    """The lower-case scheme of a ``<scheme>://...`` or ``data:...`` value, else None."""
    m = _SCHEME.match(value)
    return (m.group(1) or m.group(2)).lower() if m else None


def resolve_image_path(
    value: str, image_base_path: Optional[str], allow_outside_base: bool = False
) -> str:
    """The location an image value names: ``value`` itself for an http(s) URL, else the
    file it names under ``image_base_path``.

    A relative path is joined onto ``image_base_path`` (a local folder or a URI such as
    ``gs://bucket/images``) and normalised. Unless ``allow_outside_base``, the value is
    refused when it is absolute, when it climbs out of the base with ``..``, or (local
    files) when the base, the file or a folder between them is a symlink leading out of
    the base (both resolved with ``os.path.realpath``). A URL of any scheme but http(s)
    (``file://``, ``data:``, ``ftp://``...) is refused; with ``allow_outside_base`` a
    storage URI one of Beam's installed FileSystems reads (``gs://``, ``s3://``...) is
    read as a file; ``file://``, ``data:`` and other schemes are still refused.

    Args:
        value: the row's image value (a path or a URL).
        image_base_path: the dataset's ``image_base_path`` (absolute, or a URI); None
            only outside a configured run: a relative path is then taken as is.
        allow_outside_base: the dataset's ``allow_images_outside_base``.

    Raises:
        RequestBuildError: the value may not be read; the message names it.
    """
    if is_url(value):
        return value
    scheme = url_scheme(value)
    if scheme is not None:
        if allow_outside_base and scheme not in ("file", "data") and _beam_reads(value):
            return value
        raise RequestBuildError(
            f"image {_short(value)} is a URL of scheme {scheme!r}; only http(s) URLs are "
            "passed on to the provider, and files are named by a path relative to the "
            "dataset's image_base_path"
        )
    if value.startswith("/"):
        if allow_outside_base:
            return value
        raise RequestBuildError(
            f"image {value!r} is an absolute path; image paths are relative to the "
            "dataset's image_base_path (set allow_images_outside_base: true on the dataset "
            "to read files anywhere)"
        )
    if not image_base_path:
        return value
    rel = posixpath.normpath(value)
    if (rel == ".." or rel.startswith("../")) and not allow_outside_base:
        raise RequestBuildError(
            f"image {value!r} climbs out of image_base_path {image_base_path!r} with '..' "
            "(set allow_images_outside_base: true on the dataset to allow it)"
        )
    path = _join(image_base_path, rel)
    if not allow_outside_base and url_scheme(image_base_path) is None:
        base_real = os.path.realpath(image_base_path)
        real = os.path.realpath(path)
        if os.path.commonpath([base_real, real]) != base_real:
            raise RequestBuildError(
                f"image {value!r} leads out of image_base_path {image_base_path!r} through "
                f"a symlink (to {real!r}); set allow_images_outside_base: true on the "
                "dataset to allow it"
            )
    return path


def _beam_reads(uri: str) -> bool:
    """Whether one of Beam's FileSystems (gs://, s3://, ...: the installed ones) reads it."""
    from apache_beam.io.filesystems import FileSystems

    try:
        FileSystems.get_filesystem(uri)
    except ValueError:
        return False
    return True


def _join(base: str, rel: str) -> str:
    if rel == ".":
        return base
    if url_scheme(base) is None:
        return posixpath.normpath(posixpath.join(base, rel))
    return base.rstrip("/") + "/" + rel  # a URI: its "//" kept, rel already normalised


def _short(value: str, limit: int = 300) -> str:
    """The value for a message: a path whole (the user must find the file), a long data:
    URL or blob cut."""
    return repr(value if len(value) <= limit else value[:limit] + "...")


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


class PayloadImage(TypedDict):
    """One image of the neutral payload (:func:`load_image`): for a URL, ``url`` is the
    URL and the rest None / False; for a file, ``data`` is its base64, ``url`` a
    ``data:`` URI, ``size_bytes`` its size (bytes) and ``width`` / ``height`` its pixels."""

    source: str
    url: str
    media_type: Optional[str]
    data: Optional[str]
    size_bytes: Optional[int]
    animated: bool
    width: Optional[int]
    height: Optional[int]


def load_image(
    value: Any,
    image_base_path: Optional[str],
    allow_outside_base: bool = False,
    max_file_bytes: Optional[int] = None,
    file_limit: str = "",
) -> PayloadImage:
    """Turn one image input value into the neutral payload image dict.

    Args:
        value: a path relative to ``image_base_path``, or an http(s) URL (see
            :func:`resolve_image_path` for what else is accepted).
        image_base_path: the dataset's ``image_base_path``.
        allow_outside_base: the dataset's ``allow_images_outside_base``.
        max_file_bytes: the largest file read, in bytes (the provider's per-image limit,
            ``BatchSubmissionAdapter.max_image_file_bytes``); None:
            :data:`DEFAULT_MAX_IMAGE_FILE_BYTES`. The size comes from the filesystem
            before anything is read, and at most one byte more is ever read.
        file_limit: how that limit reads in the error message (which limit, its source).

    Returns:
        ``{"source", "url", "media_type", "data", "size_bytes", "animated", "width",
        "height"}``: for a URL, ``url`` is set and the rest ``None``/``False`` (the
        provider fetches it; its size is not known here); for a file, ``data`` is base64,
        ``url`` a ``data:`` URI, ``size_bytes`` the file's size and ``width``/``height``
        its pixel dimensions (adapters check them against the provider's limits).

    Raises:
        RequestBuildError: the value is not a string, names what may not be read
            (:func:`resolve_image_path`), the file cannot be read or is larger than
            ``max_file_bytes``, or its bytes are not a recognisable image.
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
    path = resolve_image_path(value, image_base_path, allow_outside_base)
    limit = DEFAULT_MAX_IMAGE_FILE_BYTES if max_file_bytes is None else max_file_bytes
    what = file_limit if max_file_bytes is not None and file_limit else _DEFAULT_LIMIT_TEXT
    try:
        size = FileSystems.get_filesystem(path).size(path)
    except Exception as exc:  # Beam wraps OS errors in its own IOError types
        raise RequestBuildError(f"image file {path!r} cannot be read ({exc})") from None
    if size > limit:
        raise RequestBuildError(
            f"image file {path!r} is {size} bytes, over {what}; it was not read"
        )
    try:
        with FileSystems.open(path, compression_type="uncompressed") as f:
            raw = f.read(limit + 1)
    except Exception as exc:
        raise RequestBuildError(f"image file {path!r} cannot be read ({exc})") from None
    if len(raw) > limit:  # it grew since its size was read
        raise RequestBuildError(f"image file {path!r} grew past {what} while read")
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
