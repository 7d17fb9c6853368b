"""Two fixes to Beam's ``s3://`` filesystem (``apache_beam.io.aws``, Beam 2.77), applied by
:func:`fix_beam_s3` when :mod:`mmirage_beam.io.fs` is imported (in the launcher and in
every worker that writes through it).

- **Empty files.** Beam's ``S3Uploader.finish`` completes a multipart upload with the
  parts it uploaded; when nothing was written there are none, and S3 refuses the
  completion (``MalformedXML``: an upload needs at least one part, and only the last may
  be smaller than 5 MiB, even empty). An empty errors file, part or merge partition
  could not be written at all. The wrapped ``finish`` uploads one empty part first, as
  the AWS SDKs do; every other upload is left exactly as Beam makes it.
- **One client per setting.** Beam builds a new ``boto3`` session and S3 client for every
  filesystem call (``s3io.S3IO(options=...)`` in each ``S3FileSystem`` method), and
  building one loads botocore's S3 service model from its JSON files: about 0.1 s of
  CPU per ``exists``, ``open`` or ``rename``, which made the launcher's receipt work on
  ``s3://`` about 20 times slower than on a local disk. The client is now built once per
  setting and reused (boto3 clients are thread-safe): the keyword arguments Beam passes
  (endpoint, region, SSL, credentials when given as options) and the process's ``AWS_*``
  environment variables, which boto3 reads when it builds a client (credentials, region,
  ``AWS_ENDPOINT_URL_S3``...). Credentials that expire (a profile's role, instance
  metadata) are refreshed by the client itself, as for any long-lived boto3 client.

Both are no-ops without Beam's ``aws`` extra (no ``boto3``).
"""

from __future__ import annotations

import os
import threading
from typing import Any

__all__ = ["fix_beam_s3", "clear_client_cache"]

#: Clients kept at most (distinct settings in one process; the oldest is dropped).
MAX_CLIENTS = 16

_LOCK = threading.Lock()
_CLIENTS: dict[tuple, Any] = {}


def fix_beam_s3() -> None:
    """Apply both fixes (idempotent; a no-op when Beam's S3 filesystem cannot load)."""
    try:
        from apache_beam.io.aws import s3io
        from apache_beam.io.aws.clients.s3 import boto3_client
    except ImportError:
        return
    _allow_empty_files(s3io)
    real = boto3_client.boto3
    if real is not None and not isinstance(real, _OneClientPerSetting):
        boto3_client.boto3 = _OneClientPerSetting(real)


def clear_client_cache() -> None:
    """Forget the cached S3 clients (the next call builds a new one)."""
    with _LOCK:
        _CLIENTS.clear()


def _allow_empty_files(s3io: Any) -> None:
    finish = s3io.S3Uploader.finish
    if getattr(finish, "_mmirage_empty_part", False):
        return

    def finish_with_a_part(self: Any) -> None:
        if not self.parts and not self.buffer and self.last_error is None:
            self._write_to_s3(b"")  # the one part S3 needs, empty
        finish(self)

    finish_with_a_part._mmirage_empty_part = True  # type: ignore[attr-defined]
    finish_with_a_part.__doc__ = finish.__doc__
    s3io.S3Uploader.finish = finish_with_a_part


class _OneClientPerSetting:
    """Stands in for the ``boto3`` module inside Beam's ``boto3_client``, which calls
    ``boto3.session.Session().client(service_name='s3', ...)`` once per filesystem call:
    ``session.Session()`` is this object, and its ``client(...)`` returns the client
    built earlier with the same arguments and ``AWS_*`` environment. Every other
    attribute is the real module's."""

    def __init__(self, boto3: Any) -> None:
        self._boto3 = boto3
        self.session = self

    def __getattr__(self, name: str) -> Any:
        return getattr(self._boto3, name)

    def Session(self, *args: Any, **kwargs: Any) -> Any:  # noqa: N802 - boto3's name
        return self if not (args or kwargs) else self._boto3.session.Session(*args, **kwargs)

    def client(self, *args: Any, **kwargs: Any) -> Any:
        env = tuple(sorted((k, v) for k, v in os.environ.items() if k.startswith("AWS_")))
        key = (args, tuple(sorted(kwargs.items(), key=lambda kv: kv[0])), env)
        try:
            hash(key)
        except TypeError:  # an argument Beam never passes today: no reuse
            return self._boto3.session.Session().client(*args, **kwargs)
        with _LOCK:
            client = _CLIENTS.get(key)
            if client is None:
                client = self._boto3.session.Session().client(*args, **kwargs)
                while len(_CLIENTS) >= MAX_CLIENTS:
                    _CLIENTS.pop(next(iter(_CLIENTS)))
                _CLIENTS[key] = client
            return client
