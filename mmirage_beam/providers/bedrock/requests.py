"""What goes into Bedrock: one record ``{"recordId", "modelInput"}`` per request, the
job's name and its idempotency token.

``modelInput`` is the model's own ``InvokeModel`` body ("Format and upload your batch
inference data", https://docs.aws.amazon.com/bedrock/latest/userguide/batch-inference-data.html):

- Anthropic Claude (``anthropic.*``): the Messages body of Bedrock's Claude docs
  (https://docs.aws.amazon.com/bedrock/latest/userguide/model-parameters-anthropic-claude-messages.html):
  ``anthropic_version: "bedrock-2023-05-31"``, ``max_tokens``, ``messages`` (images as
  base64 ``image`` blocks: Bedrock takes no image URLs), optional ``temperature`` /
  ``top_p``; a JSON output asks for ``output_config.format`` ``json_schema`` (Anthropic
  structured outputs, on the models that have them);
- Meta Llama (``meta.*``): ``{"prompt", "max_gen_len", "temperature"?, "top_p"?}`` with
  the Llama 3 chat template around the prompt
  (https://docs.aws.amazon.com/bedrock/latest/userguide/model-parameters-meta.html);
  text only; a JSON output is asked for in the prompt (:data:`LLAMA_JSON_INSTRUCTION`
  and the schema), since Llama on Bedrock has no structured-output parameter.

Record ids: AWS documents ``recordId`` as an alphanumeric string; a custom_id
(``[A-Za-z0-9_-]``) is escaped into one, reversibly (``Z`` -> ``ZZ``, ``-`` -> ``ZD``,
``_`` -> ``ZU``: :func:`record_id`, :func:`custom_id_of`), so no map has to be kept.
Padding records (``small_chunk_policy: pad``) get ids starting ``ZP``, which no escaped
custom_id can start with.
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any, Dict, Optional, TypedDict, Union

from mmirage_beam.errors import RequestBuildError
from mmirage_beam.providers.anthropic.adapter import ClaudePlatformBody, claude_options

ANTHROPIC_VERSION = "bedrock-2023-05-31"


#: An Anthropic Claude ``InvokeModel`` body on Bedrock (Bedrock user guide, "Anthropic
#: Claude Messages API"): the Claude platform body, keys in the order they are sent.
BedrockClaudeBody = ClaudePlatformBody


class BedrockLlamaBody(TypedDict, total=False):
    """A Meta Llama ``InvokeModel`` body on Bedrock (Bedrock user guide, "Meta Llama
    models")."""

    prompt: str
    max_gen_len: int
    temperature: float
    top_p: float


#: a record's ``modelInput``, by the model's family
BedrockModelInput = Union[BedrockClaudeBody, BedrockLlamaBody]


class BedrockRecord(TypedDict):
    """One record of a Bedrock batch inference input file: ``{"recordId",
    "modelInput"}`` (Bedrock user guide, "Format and upload your batch inference
    data")."""

    recordId: str
    modelInput: BedrockModelInput


LLAMA_JSON_INSTRUCTION = (
    "Reply with only a JSON object (no other text) that matches this JSON schema:"
)
PAD_PREFIX = "ZP"
_ESCAPE = {"Z": "ZZ", "-": "ZD", "_": "ZU"}
_UNESCAPE = {"Z": "Z", "D": "-", "U": "_"}
#: ``ModelInvocationJobName`` and ``ModelInvocationIdempotencyToken`` (botocore's
#: ``bedrock`` service model, 2023-04-20).
JOB_NAME_RE = re.compile(r"[a-zA-Z0-9]{1,63}(-*[a-zA-Z0-9\+\-\.]){0,63}")
JOB_NAME_MAX = 63


def record_id(custom_id: str) -> str:
    """The alphanumeric ``recordId`` of ``custom_id`` (reversible, see the module).

    Raises:
        ValueError: ``custom_id`` holds a character outside ``[A-Za-z0-9_-]``.
    """
    out = []
    for ch in custom_id:
        if ch in _ESCAPE:
            out.append(_ESCAPE[ch])
        elif ch.isascii() and ch.isalnum():
            out.append(ch)
        else:
            raise ValueError(f"custom_id {custom_id!r} holds {ch!r}, outside [A-Za-z0-9_-]")
    return "".join(out)


def custom_id_of(rid: str) -> Optional[str]:
    """The custom_id whose :func:`record_id` is ``rid``; None for a padding record or a
    string that is not an escaped custom_id."""
    out, i = [], 0
    while i < len(rid):
        ch = rid[i]
        if ch != "Z":
            out.append(ch)
            i += 1
            continue
        nxt = rid[i + 1 : i + 2]
        if nxt not in _UNESCAPE:
            return None
        out.append(_UNESCAPE[nxt])
        i += 2
    return "".join(out) or None


def pad_record_id(n: int) -> str:
    """The ``recordId`` of padding record ``n`` (``ZP000001``...)."""
    return f"{PAD_PREFIX}{n:06d}"


def _alnum_dash(text: str) -> str:
    return re.sub(r"-+", "-", re.sub(r"[^A-Za-z0-9]", "-", text)).strip("-")


def job_name(run_id: Optional[str], chunk_id: str) -> str:
    """``mmirage-<run>-<chunk>`` as a ``ModelInvocationJobName`` (at most 63 characters
    of the model's pattern); a longer one is cut and ends in 10 hex digits of the
    SHA-256 of ``<run>/<chunk>``, so two chunks never share a name."""
    full = f"mmirage-{_alnum_dash(run_id or 'norun')}-{_alnum_dash(chunk_id)}"
    if len(full) <= JOB_NAME_MAX:
        return full
    digest = hashlib.sha256(f"{run_id}/{chunk_id}".encode()).hexdigest()[:10]
    return f"{full[: JOB_NAME_MAX - 11].rstrip('-')}-{digest}"


def client_request_token(run_id: Optional[str], chunk_id: str) -> str:
    """The ``clientRequestToken`` of chunk ``chunk_id`` of run ``run_id``: 64 hex digits
    of SHA-256 over both, the same for every attempt at this chunk's create (a retried
    or replayed create is the same request to Bedrock, never a second job)."""
    return hashlib.sha256(f"mmirage/{run_id}/{chunk_id}".encode()).hexdigest()


def model_family(model: str) -> str:
    """``anthropic`` or ``meta`` for a model id (or inference profile id such as
    ``us.anthropic.claude-...``, or a foundation-model ARN); else ``unknown``."""
    tail = model.rsplit("/", 1)[-1]
    parts = tail.split(".")
    for part in parts[:2]:
        if part in ("anthropic", "meta"):
            return part
    return "unknown"


def _prompt_text(payload: Dict[str, Any]) -> str:
    content = payload["messages"][0]["content"]
    if isinstance(content, str):
        return content
    return "\n".join(p.get("text", "") for p in content if p.get("type") == "text")


def claude_body(payload: Dict[str, Any], config: Any) -> BedrockClaudeBody:
    """The Anthropic Messages ``InvokeModel`` body of a neutral payload.

    Raises:
        RequestBuildError: an image given by URL only (Bedrock takes base64 images).
    """
    text = _prompt_text(payload)
    images = payload.get("images") or []
    content: Any = text
    if images:
        content = [{"type": "text", "text": text}]
        for img in images:
            if img.get("data") is None:
                raise RequestBuildError(
                    f"image {img.get('source')!r} is a URL; Bedrock's Claude bodies take "
                    "base64 images only (download it first)"
                )
            content.append(
                {
                    "type": "image",
                    "source": {
                        "type": "base64",
                        "media_type": img["media_type"],
                        "data": img["data"],
                    },
                }
            )
    body: BedrockClaudeBody = {
        "anthropic_version": ANTHROPIC_VERSION,
        "max_tokens": int(config.max_tokens),
        "messages": [{"role": "user", "content": content}],
    }
    body.update(claude_options(payload, config))
    return body


def llama_body(payload: Dict[str, Any], config: Any) -> BedrockLlamaBody:
    """The Meta Llama ``InvokeModel`` body of a neutral payload (Llama 3 chat template).

    Raises:
        RequestBuildError: the payload holds images (text-only Llama models).
    """
    if payload.get("images"):
        raise RequestBuildError(f"model {config.model!r} takes text only; this row has images")
    text = _prompt_text(payload)
    schema = payload.get("json_schema")
    if schema is not None:
        text = f"{text}\n\n{LLAMA_JSON_INSTRUCTION}\n{json.dumps(schema, sort_keys=True)}"
    prompt = (
        "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\n"
        f"{text}<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"
    )
    body: BedrockLlamaBody = {"prompt": prompt, "max_gen_len": int(config.max_tokens)}
    if config.temperature is not None:
        body["temperature"] = config.temperature
    if config.top_p is not None:
        body["top_p"] = config.top_p
    return body


def model_input(payload: Dict[str, Any], config: Any) -> BedrockModelInput:
    """The ``modelInput`` of ``config.model``'s family.

    Raises:
        RequestBuildError: a model family mmirage-beam builds no body for, or a payload
            the family cannot take.
    """
    family = model_family(config.model)
    if family == "anthropic":
        return claude_body(payload, config)
    if family == "meta":
        return llama_body(payload, config)
    raise RequestBuildError(
        f"model {config.model!r}: mmirage-beam builds Bedrock bodies for Anthropic Claude "
        "(anthropic.*) and Meta Llama (meta.*) models only"
    )
