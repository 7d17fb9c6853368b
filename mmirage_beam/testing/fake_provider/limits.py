"""Limits and accepted values of the real services that the fake enforces.

Read them as ``limits.NAME`` at call time (tests lower some with ``monkeypatch``).
Sources: OpenAI Batch API guide and API reference (https://platform.openai.com/docs/guides/batch,
https://platform.openai.com/docs/api-reference/batch), Anthropic Message Batches docs
(https://docs.anthropic.com/en/docs/build-with-claude/batch-processing).
"""

from __future__ import annotations

import re

# The batch ``endpoint`` enum of the OpenAPI spec (CreateBatchRequest.endpoint).
OPENAI_ENDPOINTS = (
    "/v1/responses",
    "/v1/chat/completions",
    "/v1/embeddings",
    "/v1/completions",
    "/v1/moderations",
    "/v1/images/generations",
    "/v1/images/edits",
    "/v1/videos",
)
# Accepted at batch create, but every line gets a 400 ``unsupported_endpoint`` result: the
# fake does not fabricate image, video or moderation bodies.
OPENAI_UNFAKED_ENDPOINTS = (
    "/v1/moderations",
    "/v1/images/generations",
    "/v1/images/edits",
    "/v1/videos",
)
OPENAI_MAX_LINES = 50_000
# "The file can contain up to 50,000 requests, and can be up to 200 MB in size" (Batch
# guide); a larger upload is refused with 400 "File is too large.".
OPENAI_MAX_FILE_BYTES = 200_000_000  # 200 MB, as the adapter reads it (openai/config.py)
# Files API: "Individual files can be up to 512 MB" (files create reference).
OPENAI_MAX_UPLOAD_BYTES = 512 * 1024 * 1024
# Batch input and output files expire 30 days after creation by default; a batch's
# ``output_expires_after.seconds`` is 3600..2592000 (CreateBatchRequest in the spec).
OPENAI_BATCH_FILE_LIFETIME_SECS = 30 * 24 * 60 * 60
#: Anthropic keeps a batch's results 29 days after its creation ("Results are kept 29
#: days"); then the batch can still be viewed but its results are no longer available
ANTHROPIC_RESULTS_LIFETIME_SECS = 29 * 24 * 60 * 60
OPENAI_OUTPUT_EXPIRES_MIN_SECS = 3600
OPENAI_OUTPUT_EXPIRES_MAX_SECS = 2_592_000
OPENAI_MAX_METADATA_PAIRS = 16
OPENAI_MAX_METADATA_KEY_CHARS = 64
OPENAI_MAX_METADATA_VALUE_CHARS = 512
OPENAI_BATCH_LIST_MAX_LIMIT = 100
OPENAI_FILE_LIST_MAX_LIMIT = 10_000
OPENAI_FILE_PURPOSES = frozenset(
    {"assistants", "batch", "fine-tune", "vision", "user_data", "evals"}
)
ANTHROPIC_MAX_REQUESTS = 100_000
ANTHROPIC_MAX_BODY_BYTES = 256 * 1024 * 1024  # 256 MiB
ANTHROPIC_LIST_MAX_LIMIT = 1_000
ANTHROPIC_MAX_IMAGE_BYTES = 5 * 1024 * 1024  # 5 MiB per image, decoded
ANTHROPIC_MEDIA_TYPES = ("image/jpeg", "image/png", "image/gif", "image/webp")
DEFAULT_LIST_LIMIT = 20
BATCH_LIFETIME_SECS = 24 * 60 * 60
TOKENS_PER_IMAGE = 10

CUSTOM_ID_RE = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
SCHEMA_NAME_RE = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
