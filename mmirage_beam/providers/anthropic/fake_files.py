"""Anthropic's Files API (beta), as anthropic's ``client.beta.files`` calls it, on the
port where OpenAI's ``/v1/files`` lives too (Files API reference,
https://docs.claude.com/en/api/files-create: "The Files API is currently in beta. To use
the Files API, you'll need to include the beta feature header: ``anthropic-beta:
files-api-2025-04-14``").

A ``/v1/files`` call is Anthropic's (:func:`serves`) when it names that beta in
``anthropic-beta`` or carries ``anthropic-version``, which every anthropic SDK call
sends (2.14 sends the beta header only when ``betas=[...]`` is given) and the openai SDK
never does; any other ``/v1/files`` call stays OpenAI's.

Endpoints (``x-api-key`` or ``Authorization: Bearer``, else 401 ``authentication_error``;
errors in Anthropic's ``{"type": "error", "error": {type, message}}`` shape):

- ``POST /v1/files`` multipart ``file`` (``expires_in_seconds`` optional): the
  ``FileMetadata`` ``{"id": "file_...", "type": "file", "filename", "mime_type",
  "size_bytes", "created_at", "downloadable": false, "expires_at"}``; 400 without a
  file, 413 ``request_too_large`` over 500 MB (files guide: "Maximum file size: 500 MB
  per file").
- ``GET /v1/files`` (``limit`` 1..1000, default 20; ``page`` the ``next_page`` cursor;
  ``before_id`` / ``after_id``; ``ids`` repeated): newest first, ``{"data",
  "next_page", "first_id", "last_id", "has_more"}`` (the SDK pages on ``next_page``).
- ``GET /v1/files/{id}`` (``retrieve_metadata``), ``DELETE /v1/files/{id}``
  (``{"id", "type": "file_deleted"}``), ``GET /v1/files/{id}/content`` (``download``):
  only a file the service made is downloadable (files guide: "You can only download
  files that were created by skills or the code execution tool"), so an uploaded file
  answers 400; :meth:`AnthropicFilesApi.add_generated` stands in for such a file (the
registered fake's ``files_api``: ``fake.registered_fake("anthropic").files_api``). After
  ``expires_at`` the bytes are gone (404).

Each is counted in ``call_counts()`` as ``anthropic_files_*`` and honours
``leading_errors`` under that name.
"""

from __future__ import annotations

import base64
import mimetypes
from dataclasses import dataclass
from typing import Any, Optional

from werkzeug.exceptions import HTTPException
from werkzeug.routing import Map
from werkzeug.wrappers import Request, Response

from mmirage_beam.providers.anthropic.fake_service import ANTHROPIC
from mmirage_beam.testing.fake_provider.routing import route_rules
from mmirage_beam.testing.fake_provider.store import Store, rfc3339
from mmirage_beam.testing.fake_provider.wire import (
    ApiError,
    error_response,
    json_response,
    new_id,
    status_error,
)

__all__ = ["AnthropicFilesApi", "BETA", "MAX_FILE_BYTES", "serves"]

#: the beta the Files API is under (``anthropic-beta`` header)
BETA = "files-api-2025-04-14"
#: files guide (https://docs.claude.com/en/docs/build-with-claude/files): "Maximum file
#: size: 500 MB per file"
MAX_FILE_BYTES = 500 * 1000 * 1000
_STATE = "anthropic_files"


def serves(request: Request) -> bool:
    """Whether ``request`` is an Anthropic Files API call (a ``/v1/files`` path with the
    files beta in ``anthropic-beta`` or an ``anthropic-version`` header)."""
    if request.path.rstrip("/") != "/v1/files" and not request.path.startswith("/v1/files/"):
        return False
    betas = {b.strip() for b in request.headers.get("anthropic-beta", "").split(",")}
    return BETA in betas or bool(request.headers.get("anthropic-version", "").strip())


@dataclass
class _File:
    id: str
    filename: str
    mime_type: str
    content: bytes
    created_at: float
    downloadable: bool
    expires_at: Optional[float]

    def view(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "type": "file",
            "filename": self.filename,
            "mime_type": self.mime_type,
            "size_bytes": len(self.content),
            "created_at": rfc3339(self.created_at),
            "downloadable": self.downloadable,
            "expires_at": None if self.expires_at is None else rfc3339(self.expires_at),
        }


def _error(status: int, message: str) -> ApiError:
    kind = {
        400: "invalid_request_error",
        401: "authentication_error",
        404: "not_found_error",
        413: "request_too_large",
    }.get(status, "api_error")
    return ApiError(status, kind, message)


class AnthropicFilesApi:
    """The Files API over the shared :class:`Store` (its files in
    ``store.provider_state["anthropic_files"]``, which ``reset()`` empties)."""

    def __init__(self, store: Store) -> None:
        self.store = store
        routes = {
            "/v1/files": {"POST": "upload", "GET": "list"},
            "/v1/files/<file_id>": {"GET": "retrieve", "DELETE": "delete"},
            "/v1/files/<file_id>/content": {"GET": "download"},
        }
        self._url_map = Map(route_rules(routes), strict_slashes=False)

    @property
    def files(self) -> dict[str, _File]:
        """File id -> file, oldest first."""
        return self.store.provider_state.setdefault(_STATE, {}).setdefault("files", {})

    def add_generated(self, filename: str, content: bytes, mime_type: str = "") -> str:
        """Stores a downloadable file, as one a skill or the code execution tool makes
        (which the fake does not run); returns its id."""
        with self.store.lock:
            return self._store(filename, content, mime_type, True, None).id

    def handle(self, request: Request) -> Response:
        """Serves one Files API call: counts it, checks the key, applies scripted
        leading errors and answers (errors in Anthropic's shape)."""
        try:
            endpoint, args = self._url_map.bind("fake").match(request.path, request.method)
        except HTTPException as exc:
            err = _error(exc.code or 404, f"{request.method} {request.path}: {exc.name}")
            return error_response(ANTHROPIC, err)
        name = f"anthropic_files_{endpoint}"
        with self.store.lock:
            self.store.call_counts[name] = self.store.call_counts.get(name, 0) + 1
        try:
            scheme, _, token = request.headers.get("Authorization", "").partition(" ")
            bearer = scheme.lower() == "bearer" and token.strip()
            if not bearer and not request.headers.get("x-api-key", "").strip():
                raise _error(401, "x-api-key header is required")
            leading = self.store.take_leading_error(name)
            if leading is not None:
                raise status_error(ANTHROPIC, *leading, f"leading error on {name}", args)
            return getattr(self, f"_{endpoint}")(request, **args)
        except ApiError as err:
            return error_response(ANTHROPIC, err)

    def _store(
        self,
        filename: str,
        content: bytes,
        mime_type: str,
        downloadable: bool,
        expires_in: Optional[int],
    ) -> _File:
        now = self.store.clock()
        stored = _File(
            "file_011" + base64.b32encode(new_id("").encode()[:15]).decode().rstrip("="),
            filename,
            mime_type or mimetypes.guess_type(filename)[0] or "application/octet-stream",
            content,
            now,
            downloadable,
            None if expires_in is None else now + expires_in,
        )
        self.files[stored.id] = stored
        return stored

    def _get(self, file_id: str) -> _File:
        stored = self.files.get(file_id)
        if stored is None:
            raise _error(404, f"File not found: {file_id}")
        return stored

    def _upload(self, request: Request) -> Response:
        upload = request.files.get("file")
        if upload is None:
            raise _error(400, "file: Field required")
        raw_expiry = request.form.get("expires_in_seconds")
        try:
            expires_in = None if raw_expiry in (None, "") else int(raw_expiry)
        except ValueError:
            raise _error(400, "expires_in_seconds: Input should be an integer") from None
        if expires_in is not None and expires_in <= 0:
            raise _error(400, "expires_in_seconds: Input should be greater than 0")
        content = upload.read(MAX_FILE_BYTES + 1)
        if len(content) > MAX_FILE_BYTES:
            raise _error(413, f"File exceeds the maximum size of {MAX_FILE_BYTES} bytes.")
        mime = upload.mimetype if upload.mimetype != "application/octet-stream" else ""
        with self.store.lock:
            stored = self._store(upload.filename or "file", content, mime, False, expires_in)
            return json_response(stored.view())

    def _list(self, request: Request) -> Response:
        raw = request.args.get("limit")
        try:
            limit = 20 if raw is None else int(raw)
        except ValueError:
            limit = 0
        if not 1 <= limit <= 1000:
            raise _error(400, "limit: Input should be between 1 and 1000")
        with self.store.lock:
            files = list(reversed(self.files.values()))  # newest first
            ids = request.args.getlist("ids")
            if ids:
                files = [f for f in files if f.id in ids]
            start = 0
            cursor = request.args.get("page") or request.args.get("after_id")
            if cursor:
                cursor = cursor.removeprefix("page_")
                at = [i for i, f in enumerate(files) if f.id == cursor]
                start = at[0] + 1 if at else len(files)
            end = start + limit
            if request.args.get("before_id"):
                at = [i for i, f in enumerate(files) if f.id == request.args["before_id"]]
                end = at[0] if at else 0
                start = max(0, end - limit)
            window = files[start:end]
            more = end < len(files) and not ids
            body = {
                "data": [f.view() for f in window],
                "first_id": window[0].id if window else None,
                "last_id": window[-1].id if window else None,
                "has_more": more,
                "next_page": f"page_{window[-1].id}" if more and window else None,
            }
            return json_response(body)

    def _retrieve(self, request: Request, file_id: str) -> Response:
        with self.store.lock:
            return json_response(self._get(file_id).view())

    def _delete(self, request: Request, file_id: str) -> Response:
        with self.store.lock:
            self._get(file_id)
            del self.files[file_id]
        return json_response({"id": file_id, "type": "file_deleted"})

    def _download(self, request: Request, file_id: str) -> Response:
        with self.store.lock:
            stored = self._get(file_id)
            if not stored.downloadable:
                raise _error(400, f"File {file_id} is not downloadable.")
            if stored.expires_at is not None and self.store.clock() >= stored.expires_at:
                raise _error(404, f"File {file_id} has expired.")
            content, mime = stored.content, stored.mime_type
        return Response(content, mimetype=mime)
