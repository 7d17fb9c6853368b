"""What the fake OpenAI Batches API checks before it accepts a batch: the uploaded
input file (:func:`parse_input_file`: JSONL lines, custom_ids, endpoint, model, limits),
its name and content (:func:`is_batch_jsonl`), and the create call's ``metadata`` and
``output_expires_after``. :mod:`~mmirage_beam.providers.openai.fake` serves them.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from mmirage_beam.providers.openai import fake_service as limits  # its limits
from mmirage_beam.testing.fake_provider.wire import (
    ApiError,
)

if TYPE_CHECKING:
    from mmirage_beam.providers.openai.fake_profiles import Profile

__all__ = [
    "is_batch_jsonl",
    "check_metadata",
    "parse_input_file",
    "check_output_expires_after",
]


def is_batch_jsonl(filename: str, content: bytes) -> bool:
    """Whether a ``purpose=batch`` upload named ``filename`` is taken as JSONL.

    A name ending in ``.jsonl`` (any case) is, whatever the bytes (bad lines fail the
    batch later, as on the real service). A name with no extension (the openai SDK
    names a raw-bytes upload ``upload``) is when ``content`` looks like
    JSONL: UTF-8 whose first non-blank line is a JSON object, or no line at all. Any
    other extension (``notes.txt``, ``input.json``) is refused.

    The API reference only says the input file "must be formatted as a JSONL file"
    (``input_file_id`` of https://platform.openai.com/docs/api-reference/batch/create,
    also the openai SDK's ``batches.create`` docstring); that extension-less
    uploads are accepted is inferred from clients that upload raw bytes against the
    real API every day (bespokelabs-curator's OpenAI batch mode, litellm's
    ``create_file(file=<bytes>)``), and the content sniff is this fake's guess at how
    the service tells JSONL from another format without a name.
    """
    extension = os.path.splitext(filename)[1]
    if extension:
        return extension.lower() == ".jsonl"
    try:
        text = content.decode("utf-8")
    except UnicodeDecodeError:
        return False
    first = next((line for line in text.split("\n") if line.strip()), None)
    if first is None:
        return True
    try:
        return isinstance(json.loads(first), dict)
    except ValueError:
        return False


def check_metadata(metadata: Any) -> None:
    if metadata is None:
        return
    if not isinstance(metadata, Mapping):
        raise ApiError(
            400, "invalid_request_error", "Invalid type for 'metadata'.", param="metadata"
        )
    if len(metadata) > limits.OPENAI_MAX_METADATA_PAIRS:
        raise ApiError(
            400,
            "invalid_request_error",
            f"Invalid 'metadata': too many properties. Expected an object with at most "
            f"{limits.OPENAI_MAX_METADATA_PAIRS} properties, but got {len(metadata)} instead.",
            param="metadata",
            code="object_above_max_properties",
        )
    for key, value in metadata.items():
        if len(key) > limits.OPENAI_MAX_METADATA_KEY_CHARS:
            raise ApiError(
                400,
                "invalid_request_error",
                f"Invalid 'metadata': key {key[:20]!r}... is longer than "
                f"{limits.OPENAI_MAX_METADATA_KEY_CHARS} characters.",
                param="metadata",
                code="string_above_max_length",
            )
        if not isinstance(value, str) or len(value) > limits.OPENAI_MAX_METADATA_VALUE_CHARS:
            raise ApiError(
                400,
                "invalid_request_error",
                f"Invalid 'metadata[{key}]': expected a string of at most "
                f"{limits.OPENAI_MAX_METADATA_VALUE_CHARS} characters.",
                param=f"metadata.{key}",
                code="string_above_max_length",
            )


def _line_error(code: str, message: str, line: int | None, param: str | None = None) -> dict:
    return {"code": code, "message": message, "param": param, "line": line}


def parse_input_file(
    content: bytes, endpoint: str, profile: Profile | None = None
) -> tuple[list[dict[str, Any]], list[dict[str, Any]], str | None]:
    """(parsed lines with a custom_id, line-level validation errors, the file's model).

    A ``profile`` changes the request limit, the keys a line must carry (Together:
    ``custom_id`` and ``body``) and whether each line must name the deployment (Azure).
    """
    numbered = [(n, raw) for n, raw in enumerate(content.split(b"\n"), start=1) if raw.strip()]
    if not numbered:
        return [], [_line_error("empty_file", "The input file is empty.", None)], None
    max_lines = limits.OPENAI_MAX_LINES if profile is None else profile.max_lines
    optional = frozenset() if profile is None else profile.optional_line_keys
    if len(numbered) > max_lines:
        message = (
            f"The input file contains {len(numbered):,} requests; the maximum is {max_lines:,}."
        )
        return [], [_line_error("too_many_tasks", message, None)], None
    lines: list[dict[str, Any]] = []
    errors: list[dict[str, Any]] = []
    seen: set[str] = set()
    model: str | None = None
    for number, raw in numbered:
        try:
            line = json.loads(raw)
        except (ValueError, UnicodeDecodeError):
            line = None
        if not isinstance(line, dict):
            errors.append(
                _line_error(
                    "invalid_json_line", "This line is not parseable as valid JSON.", number
                )
            )
            continue
        custom_id = line.get("custom_id")
        if not isinstance(custom_id, str) or not custom_id:
            errors.append(
                _line_error(
                    "missing_required_parameter",
                    "Missing required parameter: 'custom_id'.",
                    number,
                    "custom_id",
                )
            )
            continue
        lines.append(line)
        for key in ("method", "url", "body"):
            if key not in line and key not in optional:
                errors.append(
                    _line_error(
                        "missing_required_parameter",
                        f"Missing required parameter: '{key}'.",
                        number,
                        key,
                    )
                )
        if "method" in line and line["method"] != "POST":
            errors.append(
                _line_error(
                    "invalid_method", "The only supported method is 'POST'.", number, "method"
                )
            )
        url = line.get("url")
        if profile is not None:
            url = profile.canonical_endpoint(url)  # Azure: "/chat/completions" too
        if "url" in line and url != endpoint:
            errors.append(
                _line_error(
                    "url_mismatch",
                    f"The URL provided for this request does not match the batch endpoint "
                    f"{endpoint}.",
                    number,
                    "url",
                )
            )
        if custom_id in seen:
            errors.append(
                _line_error(
                    "duplicate_custom_id",
                    f"The custom_id {custom_id!r} is duplicated; each custom_id must be "
                    "unique within the batch.",
                    number,
                    "custom_id",
                )
            )
        seen.add(custom_id)
        body = line.get("body")
        line_model = body.get("model") if isinstance(body, Mapping) else None
        if profile is not None and profile.deployment_model and isinstance(body, Mapping):
            if not isinstance(line_model, str) or not line_model:
                # Azure batch guide: "The model attribute should be set to match the
                # name of the Global Batch deployment", on every line.
                errors.append(
                    _line_error(
                        "missing_required_parameter",
                        "The 'model' of each request must be the name of the global batch "
                        "deployment.",
                        number,
                        "body.model",
                    )
                )
        if isinstance(line_model, str) and line_model:
            if model is None:
                model = line_model
            elif line_model != model:
                errors.append(
                    _line_error(
                        "model_mismatch",
                        f"The model {line_model!r} differs from the file's model {model!r}; "
                        "a batch file must use a single model.",
                        number,
                        "body.model",
                    )
                )
    return lines, errors, model


# Markers that fail the request with an HTTP-style error line.


def check_output_expires_after(value: Any) -> dict[str, Any] | None:
    """Validates ``output_expires_after`` (``{"anchor": "created_at", "seconds": N}``)."""
    if value is None:
        return None
    low, high = (
        limits.OPENAI_OUTPUT_EXPIRES_MIN_SECS,
        limits.OPENAI_OUTPUT_EXPIRES_MAX_SECS,
    )
    if not isinstance(value, Mapping) or value.get("anchor") != "created_at":
        raise ApiError(
            400,
            "invalid_request_error",
            "Invalid 'output_expires_after.anchor': supported values are: 'created_at'.",
            param="output_expires_after.anchor",
            code="invalid_value",
        )
    seconds = value.get("seconds")
    if isinstance(seconds, bool) or not isinstance(seconds, int) or not low <= seconds <= high:
        raise ApiError(
            400,
            "invalid_request_error",
            f"Invalid 'output_expires_after.seconds': must be an integer between {low} and "
            f"{high}, got {seconds!r}.",
            param="output_expires_after.seconds",
            code="invalid_value",
        )
    return {"anchor": "created_at", "seconds": seconds}
