"""Validate exported requests against the official SDKs' own request types.

The same checks as the project's ``validate_requests.py`` tool: OpenAI bodies against
``openai.types.chat.CompletionCreateParamsNonStreaming`` (``/v1/chat/completions``) or
``openai.types.responses.response_create_params.ResponseCreateParamsNonStreaming``
(``/v1/responses``, which the tool does not check) or ``openai.types.EmbeddingCreateParams``
(``/v1/embeddings``), Anthropic requests against
``anthropic.types.messages.batch_create_params.Request``, custom_id rules, image bytes
matching their declared media type, one model per OpenAI batch, and provider limits.
"""

from __future__ import annotations

import base64
import json
import re
from collections import defaultdict
from pathlib import Path
from typing import Any

CUSTOM_ID_RE = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
LIMITS = {"openai": (50_000, 200_000_000), "anthropic": (100_000, 256 * 1024 * 1024)}
MAGIC = {
    "image/jpeg": (b"\xff\xd8\xff",),
    "image/png": (b"\x89PNG\r\n\x1a\n",),
    "image/gif": (b"GIF87a", b"GIF89a"),
    "image/webp": (b"RIFF",),
}


def _force(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _force(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_force(v) for v in value]
    if type(value).__name__ == "ValidatorIterator":
        return [_force(v) for v in value]
    return value


def _check_image(media_type: str, data: str, errors: list[str], where: str) -> None:
    raw = base64.b64decode(data, validate=True)
    heads = MAGIC.get(media_type)
    if heads and not any(raw.startswith(h) for h in heads):
        errors.append(f"{where}: bytes are not {media_type}")


def _check_responses_body(
    adapter: Any, body: dict[str, Any], errors: list[str], where: str
) -> None:
    """A ``/v1/responses`` body: the SDK's TypedDict (which pydantic validates without
    extra keys failing), plus what it cannot say: no chat-only keys, ``input`` parts of
    the Responses types only, images as http(s) or matching base64 data URLs."""
    _force(adapter.validate_python(body))
    for key in ("messages", "response_format", "max_tokens", "max_completion_tokens"):
        if key in body:
            errors.append(f"{where}: chat-completions key {key!r} in a Responses body")
    if not isinstance(body.get("input"), list):
        errors.append(f"{where}: input must be a list of messages")
        return
    for item in body["input"]:
        for part in item.get("content") or []:
            kind = part.get("type")
            if kind not in ("input_text", "input_image"):
                errors.append(f"{where}: input part type {kind!r}")
            if kind == "input_image":
                url = part.get("image_url") or ""
                mt = re.match(r"^data:([^;,]+);base64,(.*)$", url, re.S)
                if mt:
                    _check_image(mt.group(1), mt.group(2), errors, where)
                elif not url.startswith(("http://", "https://")):
                    errors.append(f"{where}: bad image url")
    fmt = (body.get("text") or {}).get("format")
    if fmt is not None and not (fmt.get("type") == "json_schema" and "json_schema" not in fmt):
        errors.append(f"{where}: text.format must be a flat json_schema format")


def validate_export(path: str | Path) -> tuple[int, list[str]]:
    """Return ``(number of requests, problems)`` for an exported prompts file."""
    from anthropic.types.messages import batch_create_params
    from openai.types import EmbeddingCreateParams
    from openai.types.chat import completion_create_params
    from openai.types.responses import response_create_params
    from pydantic import TypeAdapter

    oa = TypeAdapter(completion_create_params.CompletionCreateParamsNonStreaming)
    oa_responses = TypeAdapter(response_create_params.ResponseCreateParamsNonStreaming)
    oa_embeddings = TypeAdapter(EmbeddingCreateParams)
    an = TypeAdapter(batch_create_params.Request)
    errors: list[str] = []
    batches: dict[str, dict[str, Any]] = defaultdict(
        lambda: {"ids": set(), "models": set(), "n": 0, "bytes": 0, "provider": None}
    )
    total = 0
    for lineno, raw in enumerate(Path(path).read_bytes().splitlines(), 1):
        row = json.loads(raw)
        req, bid = row["request"], row["batch_id"]
        where = f"line {lineno} ({bid})"
        total += 1
        provider = "anthropic" if "params" in req else "openai"
        b = batches[bid]
        b["provider"], b["n"] = provider, b["n"] + 1
        b["bytes"] += len(json.dumps(req, ensure_ascii=False, separators=(",", ":")).encode()) + 1
        cid = req.get("custom_id")
        if not isinstance(cid, str) or not CUSTOM_ID_RE.match(cid):
            errors.append(f"{where}: bad custom_id {cid!r}")
        if cid in b["ids"]:
            errors.append(f"{where}: duplicate custom_id {cid!r}")
        b["ids"].add(cid)
        if provider == "openai":
            if req.get("method") != "POST":
                errors.append(f"{where}: method must be POST")
            body = req["body"]
            b["models"].add(body.get("model"))
            if req.get("url") == "/v1/responses":
                _check_responses_body(oa_responses, body, errors, where)
                continue
            if req.get("url") == "/v1/embeddings":
                _force(oa_embeddings.validate_python(body))
                continue
            if req.get("url") != "/v1/chat/completions":
                errors.append(f"{where}: url {req.get('url')!r} is not a supported endpoint")
            _force(oa.validate_python(body))
            for m in body["messages"]:
                if isinstance(m["content"], list):
                    for part in m["content"]:
                        if part["type"] == "image_url":
                            url = part["image_url"]["url"]
                            mt = re.match(r"^data:([^;,]+);base64,(.*)$", url, re.S)
                            if mt:
                                _check_image(mt.group(1), mt.group(2), errors, where)
                            elif not url.startswith(("http://", "https://")):
                                errors.append(f"{where}: bad image url")
        else:
            b["models"].add(req["params"].get("model"))
            _force(an.validate_python(req))
            for m in req["params"]["messages"]:
                if isinstance(m["content"], list):
                    for block in m["content"]:
                        src = block.get("source") or {}
                        if block["type"] == "image" and src.get("type") == "base64":
                            _check_image(src["media_type"], src["data"], errors, where)
    for bid, b in batches.items():
        max_n, max_bytes = LIMITS[b["provider"]]
        if b["n"] > max_n or b["bytes"] > max_bytes:
            errors.append(f"batch {bid}: over the provider limits")
        if b["provider"] == "openai" and len(b["models"]) > 1:
            errors.append(f"batch {bid}: several models")
    return total, errors
