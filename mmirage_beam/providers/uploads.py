"""The adapters whose batch reads an uploaded JSONL file: :class:`FileUploadAdapter`.

OpenAI, Mistral and Gemini submit a chunk the same way: its request lines, exactly as
built, are uploaded as one file (retried on its own, the file id kept), then one batch
is created from it through
:meth:`~mmirage_beam.providers.base.BatchSubmissionAdapter.create_once` (retried, every
retry first adopting the batch an earlier attempt may have made). Each adapter says only
how one upload and one create are called (:meth:`FileUploadAdapter.upload_file`,
:meth:`FileUploadAdapter.create_batch`) and how its SDK takes the bytes.
"""

from __future__ import annotations

import abc
from typing import Any, Callable, ClassVar, Dict, Sequence

from mmirage_beam.providers.base import BatchSubmissionAdapter, ConfigT
from mmirage_beam.providers.batch_status import SubmittedBatch

__all__ = ["FileUploadAdapter"]


class FileUploadAdapter(BatchSubmissionAdapter[ConfigT]):
    """An adapter that uploads a chunk's lines as one file, then creates its batch.

    Every level of the contract ends in one upload and one create:
    :meth:`submit_chunk` serialises the requests for :meth:`submit_chunk_lines`, which
    uploads exactly those bytes; :meth:`submit_chunk_file` uploads the staged file as it
    is (streamed from a local disk, a fresh read per attempt), unless a subclass
    overrides ``submit_chunk_lines`` or ``submit_chunk`` (a plugin's override is always
    called).
    """

    #: the calls' names in logs and errors, e.g. ``"OpenAI files.create"``; each is
    #: followed by `` (chunk <id>)``.
    UPLOAD_CALL: ClassVar[str] = "files.upload"
    CREATE_CALL: ClassVar[str] = "batches.create"
    #: how the SDK's upload takes a chunk held in memory: the bytes themselves (the
    #: default), or e.g. ``io.BytesIO`` for an SDK that wants a file object.
    UPLOAD_IN_MEMORY: ClassVar[Callable[[bytes], Any]] = bytes
    #: :meth:`submit_chunk_file` uploads the staged file as it is
    streams_staged_file: ClassVar[bool] = True

    @abc.abstractmethod
    def upload_file(self, chunk_id: str, content: Any, config: ConfigT) -> Any:
        """One upload attempt of chunk ``chunk_id``'s input file; ``content`` is its
        bytes (as :attr:`UPLOAD_IN_MEMORY` gives them) or a binary file object.

        Returns:
            The SDK's uploaded-file object, handed to :meth:`create_batch`.
        """

    @abc.abstractmethod
    def create_batch(self, chunk_id: str, uploaded: Any, config: ConfigT) -> SubmittedBatch:
        """One create attempt of chunk ``chunk_id``'s batch from the ``uploaded`` file
        (what :meth:`upload_file` returned), tagged so that :meth:`find_batch` finds it
        again.

        Returns:
            The batch the provider answered (:meth:`submitted_batch` of its object).
        """

    def submit_chunk(
        self, chunk_id: str, requests: Sequence[Dict[str, Any]], config: ConfigT
    ) -> SubmittedBatch:
        """:meth:`submit_chunk_lines` of the requests' lines (:meth:`serialize_request`)."""
        lines = [self.serialize_request(r) for r in requests]
        return self.submitted_batch(self.submit_chunk_lines(chunk_id, lines, config))

    def submit_chunk_lines(
        self, chunk_id: str, lines: Sequence[bytes], config: ConfigT
    ) -> SubmittedBatch:
        """Upload exactly ``lines`` as the JSONL input file, then create the batch.

        The upload is retried on its own and its file id is reused by every create
        attempt. Every create attempt after the first one first looks for the batch an
        earlier attempt may have made (:meth:`find_batch`, for ``self.run_id``) and
        returns that batch instead of creating another one.

        Raises:
            mmirage_beam.providers.retrying.ProviderRetriesExhausted: the upload, a
                lookup or the create still failed after the last attempt.
            Exception: the SDK's error for a non-retryable answer (e.g. 400), at once.
        """
        data = b"".join(lines)
        in_memory = type(self).UPLOAD_IN_MEMORY
        return self._upload_and_create(chunk_id, lambda: in_memory(data), config)

    def submit_chunk_file(self, chunk_id: str, path: str, config: ConfigT) -> SubmittedBatch:
        """Upload the staged chunk file ``path`` as it is (streamed from a local disk, a
        fresh read for every upload attempt; object-store paths are read into memory),
        then create the batch as :meth:`submit_chunk_lines` does."""
        if self.submits_its_own_way:
            return self.submitted_batch(super().submit_chunk_file(chunk_id, path, config))
        with self._staged_upload(path, type(self).UPLOAD_IN_MEMORY) as content:
            return self._upload_and_create(chunk_id, content, config)

    def _upload_and_create(
        self, chunk_id: str, content: Callable[[], Any], config: ConfigT
    ) -> SubmittedBatch:
        """Upload ``content()`` (called once per attempt), then create the batch (see
        :meth:`submit_chunk_lines`)."""
        uploaded = self.call_with_retries(
            f"{self.UPLOAD_CALL} (chunk {chunk_id})",
            lambda: self.upload_file(chunk_id, content(), config),
        )
        return self.create_once(
            f"{self.CREATE_CALL} (chunk {chunk_id})",
            chunk_id,
            lambda: self.create_batch(chunk_id, uploaded, config),
        )
