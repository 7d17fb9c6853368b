"""OpenAI Batch API adapter (Files + Batches, chat completions).

Contract facts (PROVIDERS.md, from openai-python and the OpenAI Batch guide): the input
file is JSONL of ``{custom_id, method: "POST", url, body}`` uploaded with
``purpose="batch"``; a batch is created with ``{input_file_id, endpoint,
completion_window: "24h", metadata}``; at most 50,000 requests and 200 MB per file;
images: PNG, JPEG, WEBP and non-animated GIF; results are split between
``output_file_id`` and ``error_file_id`` (either may be null or ``""``).
"""

from __future__ import annotations

import json
import re
from typing import Any, ClassVar, Dict, Mapping, Sequence

from mmirage_beam.config.batch_provider import BatchProviderConfig
from mmirage_beam.errors import RequestBuildError
from mmirage_beam.providers.base import BatchAdapterRegistry, BatchSubmissionAdapter
from mmirage_beam.providers.base import BatchProgress as _Progress
from mmirage_beam.providers.base import BatchSubmissionResult as _Result
from mmirage_beam.providers.base import parse_timestamp as _parse_timestamp

ACCEPTED_IMAGE_TYPES = ("image/png", "image/jpeg", "image/webp", "image/gif")
_SCHEMA_NAME_RE = re.compile(r"[^a-zA-Z0-9_-]")


class OpenAIBatchAdapter(BatchSubmissionAdapter):
    """``provider: openai``: builds chat-completion batch lines and drives the Batch API.

    The client (``openai.OpenAI``) is built in :meth:`setup` with the key from
    ``OPENAI_API_KEY`` and the config's ``base_url``.
    """

    required_credentials: ClassVar[Sequence[str]] = ("api_key",)
    chunk_overhead_bytes: ClassVar[int] = 0  # the upload is exactly the JSONL lines
    STATUS_MAP: ClassVar[Mapping[str, str]] = {"expired": "failed", "cancelled": "failed"}

    def setup(self, config: BatchProviderConfig) -> None:
        import openai

        self._client = openai.OpenAI(
            api_key=self.credentials.get("api_key"),
            base_url=getattr(config, "base_url", None) or None,
        )

    def teardown(self) -> None:
        client = getattr(self, "_client", None)
        if client is not None:
            client.close()
            self._client = None

    def build_request(
        self, custom_id: str, payload: Dict[str, Any], config: BatchProviderConfig
    ) -> Dict[str, Any]:
        for img in payload.get("images", ()):
            if img.get("data") is None:
                continue  # an http(s) URL: fetched by the provider
            if img["media_type"] not in ACCEPTED_IMAGE_TYPES:
                raise RequestBuildError(
                    f"image {img['source']!r} is {img['media_type']}; OpenAI accepts PNG, "
                    "JPEG, WEBP and non-animated GIF"
                )
            if img.get("animated"):
                raise RequestBuildError(
                    f"image {img['source']!r} is an animated GIF; OpenAI accepts only "
                    "non-animated GIFs"
                )
        body: Dict[str, Any] = {"model": config.model, "messages": payload["messages"]}
        schema = payload.get("json_schema")
        if schema is not None:
            name = _SCHEMA_NAME_RE.sub("_", payload.get("output_name") or "output")[:64]
            body["response_format"] = {
                "type": "json_schema",
                "json_schema": {"name": name, "strict": True, "schema": schema},
            }
        return {
            "custom_id": custom_id,
            "method": "POST",
            "url": config.batch_endpoint,
            "body": body,
        }

    def submit_chunk(
        self, chunk_id: str, requests: Sequence[Dict[str, Any]], config: BatchProviderConfig
    ) -> Dict[str, Any]:
        lines = [self.serialize_request(r) for r in requests]
        return self.submit_chunk_lines(chunk_id, lines, config)

    def submit_chunk_lines(
        self, chunk_id: str, lines: Sequence[bytes], config: BatchProviderConfig
    ) -> Dict[str, Any]:
        """Upload exactly ``lines`` as the JSONL input file, then create the batch."""
        data = b"".join(lines)
        uploaded = self._client.files.create(
            file=(f"{chunk_id}.jsonl", data, "application/jsonl"), purpose="batch"
        )
        metadata = dict(getattr(config, "metadata", {}) or {})
        metadata["mmirage_chunk_id"] = chunk_id
        if self.run_id:
            metadata["mmirage_run_id"] = self.run_id
        batch = self._client.batches.create(
            input_file_id=uploaded.id,
            endpoint=config.batch_endpoint,
            completion_window=config.completion_window,
            metadata=metadata,
        )
        return batch.model_dump(mode="json")

    def parse_submission_result(self, raw_result: Dict[str, Any]) -> _Result:
        return _Result(
            provider_batch_id=raw_result["id"],
            status=self._normalize_status(raw_result.get("status")),
            raw_response=raw_result,
        )

    def check_batch_status(self, provider_batch_id: str, config: BatchProviderConfig) -> _Result:
        batch = self._client.batches.retrieve(provider_batch_id)
        return self.parse_submission_result(batch.model_dump(mode="json"))

    def describe_batch(self, result: _Result) -> _Progress:
        """``status``, ``request_counts.{completed, failed, total}``, ``created_at``; the
        ``errors.data[]`` codes and messages (e.g. ``token_limit_exceeded``) as detail."""
        raw = result.raw_response or {}
        counts = raw.get("request_counts") or {}
        errors = (raw.get("errors") or {}).get("data") or []
        notes = []
        for err in errors:
            code = err.get("code") or "error"
            line = f" (line {err['line']})" if err.get("line") is not None else ""
            message = " ".join(str(err.get("message") or "").split())
            notes.append(f"{code}{line}: {message}" if message else f"{code}{line}")
        return _Progress(
            provider_status=str(raw.get("status") or result.status),
            completed=_count(counts.get("completed")),
            failed=_count(counts.get("failed")),
            total=_count(counts.get("total")),
            created_at=_parse_timestamp(raw.get("created_at")),
            detail="; ".join(notes),
            error_code=(errors[0].get("code") or "batch_failed") if errors else None,
        )

    def retrieve_results(
        self, provider_batch_id: str, config: BatchProviderConfig
    ) -> Sequence[Dict[str, Any]]:
        """Read the output file and the error file (either may be null or ``""``).

        Returns one dict per line: ``custom_id`` plus ``generated_text`` (and
        ``input_tokens``/``output_tokens`` when reported) or ``error``
        (``{"type", "message", "status_code"}``).
        """
        batch = self._client.batches.retrieve(provider_batch_id)
        out: list[Dict[str, Any]] = []
        for file_id in (batch.output_file_id, batch.error_file_id):
            if not file_id:
                continue
            content = self._client.files.content(file_id).read()
            for raw in content.splitlines():
                if raw.strip():
                    out.append(normalise_result_line(json.loads(raw)))
        return out


def normalise_result_line(line: Dict[str, Any]) -> Dict[str, Any]:
    """One OpenAI output/error file line -> the neutral result dict."""
    result: Dict[str, Any] = {"custom_id": line.get("custom_id")}
    response = line.get("response") or None
    error = line.get("error") or None
    if response is not None and int(response.get("status_code") or 0) == 200:
        body = response.get("body") or {}
        choices = body.get("choices") or [{}]
        result["generated_text"] = ((choices[0] or {}).get("message") or {}).get("content")
        usage = body.get("usage") or {}
        if "prompt_tokens" in usage:
            result["input_tokens"] = int(usage["prompt_tokens"])
            result["output_tokens"] = int(usage.get("completion_tokens") or 0)
        return result
    if response is not None:
        err = (response.get("body") or {}).get("error") or {}
        result["error"] = {
            "type": err.get("type") or err.get("code") or f"http_{response.get('status_code')}",
            "message": err.get("message") or "",
            "status_code": response.get("status_code"),
        }
    else:
        error = error or {}
        result["error"] = {
            "type": error.get("code") or "unknown_error",
            "message": error.get("message") or "",
            "status_code": None,
        }
    return result


def _count(value: Any) -> int | None:
    return int(value) if isinstance(value, int) and not isinstance(value, bool) else None


BatchAdapterRegistry.register("openai", OpenAIBatchAdapter)
