"""The fake Mistral batch API's jobs on the endpoints the mistralai SDK's
``APIEndpoint`` (``mistralai.client.models.apiendpoint``, mistralai 3.7) names beyond
chat and FIM completions, embeddings and moderations: ``/v1/ocr``,
``/v1/classifications``, ``/v1/chat/classifications``, ``/v1/conversations`` and
``/v1/audio/transcriptions``, the endpoints Mistral's batch docs
(https://docs.mistral.ai/capabilities/batch/) list as a batch's targets ("A batch body
object can be any valid request body for the endpoint you are using").

:class:`~mmirage_beam.providers.mistral.fake.MistralApi` hands a job of one of
:data:`ENDPOINTS` to :func:`model_error` (at the create) and each of its lines to
:func:`process`. A line's body is checked with the SDK's own request type of its
endpoint (:data:`REQUEST_TYPES`, the job's model, or its ``agent_id`` for a
conversation job created with one, put in) by
:func:`~mmirage_beam.providers.mistral.fake_bodies.refusal`, as every Mistral line is:
as the service refuses them, every key that type does not have is refused: "Extra
inputs are not permitted" (the service's 422 ``extra_forbidden`` answer, quoted in
Gage-Technologies/mistral-go#3 and crewAIInc/crewAI#60), and so is ``stream: true``. A
refused body is a 400 line in the error file, as on the other endpoints. A 200 line's
body validates as the SDK's response type of its endpoint (:data:`RESPONSE_TYPES`).
The failure markers (``FAKE_ERROR:server_error``, ``invalid_request``, ``rate_limit``,
``timeout``, ``transient``, ``u2028``) fail a line as they fail a chat line; where a
line's marker is read is each endpoint's (see :func:`process`).
"""

from __future__ import annotations

import datetime as _dt
import re
import uuid
from collections.abc import Collection, Mapping
from typing import Any, Protocol

from mmirage_beam.providers.mistral.fake_bodies import (
    answer_line,
    http_line,
    marked_failure,
    prompt_of,
    refusal,
    scripted_body,
    validate_response,
)
from mmirage_beam.testing.fake_provider import limits
from mmirage_beam.testing.fake_provider.answers import make_answer
from mmirage_beam.testing.fake_provider.scripting import error_marker
from mmirage_beam.testing.fake_provider.store import Batch, Item, Store, answered_response_item


class MistralApi(Protocol):
    """What a job's line needs of the fake's Mistral API
    (:class:`mmirage_beam.providers.mistral.fake.MistralApi`, which imports this
    module): the shared store, the uploaded files by id, the agent of each agent job."""

    @property
    def store(self) -> Store: ...

    @property
    def files(self) -> Mapping[str, Any]: ...

    @property
    def agents(self) -> Mapping[str, str]: ...


__all__ = [
    "ENDPOINTS",
    "REQUEST_TYPES",
    "RESPONSE_TYPES",
    "CLASSIFIER_TARGET",
    "model_error",
    "process",
]

#: endpoint -> the mistralai type a line's body is checked with.
REQUEST_TYPES: dict[str, str] = {
    "/v1/ocr": "OCRRequest",
    "/v1/classifications": "ClassificationRequest",
    "/v1/chat/classifications": "ChatClassificationRequest",
    "/v1/conversations": "ConversationRequest",
    "/v1/audio/transcriptions": "AudioTranscriptionRequest",
}
#: endpoint -> the mistralai type of a 200 line's body.
RESPONSE_TYPES: dict[str, str] = {
    "/v1/ocr": "OCRResponse",
    "/v1/classifications": "ClassificationResponse",
    "/v1/chat/classifications": "ClassificationResponse",
    "/v1/conversations": "ConversationResponse",
    "/v1/audio/transcriptions": "TranscriptionResponse",
}
#: the endpoints this module answers (the rest of the SDK's ``APIEndpoint``).
ENDPOINTS = tuple(REQUEST_TYPES)

_CLASSIFIER = re.compile(r"^ft:classifier:[\w.:-]+$")
#: endpoint -> (the models it takes, in words; the names it takes). OCR: the
#: ``mistral-ocr`` family (https://docs.mistral.ai/capabilities/document_ai/basic_ocr/);
#: classifications: classifier fine-tunes, ``ft:classifier:...``
#: (https://docs.mistral.ai/capabilities/finetuning/classifier_factory/, the SDK's
#: ``ClassifierFineTunedModel``); transcription: ``voxtral-mini``
#: (https://docs.mistral.ai/capabilities/audio_transcription/).
_MODELS: dict[str, tuple[str, re.Pattern[str]]] = {
    "/v1/ocr": (
        "mistral-ocr-latest or mistral-ocr-YYMM",
        re.compile(r"^mistral-ocr(-latest|-\d{4})?$"),
    ),
    "/v1/classifications": ("a classifier fine-tune ft:classifier:...", _CLASSIFIER),
    "/v1/chat/classifications": ("a classifier fine-tune ft:classifier:...", _CLASSIFIER),
    "/v1/audio/transcriptions": (
        "voxtral-mini-latest or voxtral-mini-YYMM",
        re.compile(r"^voxtral-mini(-latest|-\d{4})?$"),
    ),
}
#: the families a conversation cannot run: they complete no chat.
_NOT_CHAT = re.compile(
    r"^(mistral-embed|codestral-embed|mistral-moderation|mistral-ocr)(-latest|-\d{4})?$|^ft:classifier:"
)
#: the one target of a fake classifier's answer, and its labels: a classifier
#: fine-tune answers the targets it was trained on (``ClassifierTargetOut.name`` /
#: ``labels``), which the fake cannot know.
CLASSIFIER_TARGET = ("fake_target", ("flagged", "not_flagged"))
_PAGE_DIMENSIONS = {"dpi": 200, "height": 2200, "width": 1700}


def model_error(endpoint: str, model: str, admitted: Collection[str] = ()) -> str | None:
    """The 400 message of a job of ``endpoint`` (one of :data:`ENDPOINTS`) whose
    ``model`` that endpoint does not take, else None. A name in ``admitted`` (the
    fake's ``--models``) is taken everywhere, as the model check admits it.

    Returns:
        ``"Invalid model: X does not serve /v1/...: it takes ..."`` or None (the
        service's wording is undocumented).
    """
    if model in set(admitted):
        return None
    if endpoint == "/v1/conversations":
        if _NOT_CHAT.match(model):
            return f"Invalid model: {model} does not serve {endpoint}: it takes a chat model."
        return None
    rule = _MODELS.get(endpoint)
    if rule is None or rule[1].match(model):
        return None
    return f"Invalid model: {model} does not serve {endpoint}: it takes {rule[0]}."


def _refused(cid: str, reason: str) -> Item:
    return Item(cid, http_line(cid, 400, f"Invalid request body: {reason}"), ok=False)


def _iso(now: float) -> str:
    return _dt.datetime.fromtimestamp(now, _dt.timezone.utc).isoformat().replace("+00:00", "Z")


def process(api: MistralApi, batch: Batch, cid: str, body: dict[str, Any], now: float) -> Item:
    """One line of a job of one of :data:`ENDPOINTS`: its 200 line in the endpoint's
    response shape, or its error line.

    Where the ``FAKE_ERROR:`` marker is read: OCR, the document's URL or the text of its
    uploaded file (``{"type": "file", "file_id"}``) and ``document_annotation_prompt``;
    classifications, the input texts (``content_filter`` scores a text ``flagged``);
    conversations, the user entries' text (the chat markers: ``length``,
    ``error_body_200``, ``empty_body_200``, the line markers); transcriptions, the
    audio's ``file_url`` or its uploaded file's bytes and ``context_bias``.

    Args:
        api: the fake's Mistral API (its ``files`` and ``store``).
        batch: the job (``endpoint``, ``model``).
        cid: the line's ``custom_id``.
        body: the line's ``body`` (a JSON object).
        now: the fake's clock, in seconds since the epoch.

    Returns:
        The line's :class:`~mmirage_beam.testing.fake_provider.store.Item`.
    """
    agent_id = api.agents.get(batch.id)
    job = {"agent_id": agent_id} if agent_id else {"model": batch.model}
    payload = {**job, **body}
    reason = refusal(REQUEST_TYPES[batch.endpoint], payload)
    if reason is not None:
        return _refused(cid, reason)
    handler = {
        "/v1/ocr": _ocr,
        "/v1/classifications": _classification,
        "/v1/chat/classifications": _classification,
        "/v1/conversations": _conversation,
        "/v1/audio/transcriptions": _transcription,
    }[batch.endpoint]
    return handler(api, batch, cid, payload, now)


def _failed(api: MistralApi, cid: str, prompt: str, tokens: int) -> tuple[str | None, Item | None]:
    """(the line's marker, its failed item when the marker fails it)."""
    marker = api.store.resolve_transient(error_marker(prompt), cid)
    return marker, marked_failure(cid, marker, tokens)


def _ok(cid: str, endpoint: str, response_body: dict[str, Any], tokens: int) -> Item:
    validate_response(RESPONSE_TYPES[endpoint], response_body)
    return Item(cid, answer_line(cid, response_body), ok=True, input_tokens=tokens)


def _uploaded(api: MistralApi, cid: str, file_id: str) -> tuple[Any, Item | None]:
    """(the uploaded file ``file_id``, or the 404 line of a file the fake does not hold)."""
    stored = api.files.get(file_id)
    if stored is None:
        return None, Item(cid, http_line(cid, 404, f"File {file_id} not found."), ok=False)
    return stored, None


def _pages(raw: Any) -> list[int] | None:
    """The 0-based page indexes of OCR's ``pages`` (a list, or ``"0,2-4"``), [0] when
    unset; None when it names no page or a negative one."""
    if raw is None:
        return [0]
    if isinstance(raw, list):
        return sorted(set(raw)) if raw and min(raw) >= 0 else None
    out: set[int] = set()
    for part in str(raw).split(","):
        low, _, high = part.strip().partition("-")
        if not low.isdigit() or (high and not high.isdigit()):
            return None
        out.update(range(int(low), int(high or low) + 1))
    return sorted(out) or None


def _mode(fmt: Any) -> tuple[str, Any]:
    """(answer mode, schema) of a ``ResponseFormat`` object."""
    return prompt_of({"messages": [], "response_format": fmt})[2:]


def _ocr(api: MistralApi, batch: Batch, cid: str, payload: dict[str, Any], now: float) -> Item:
    """An ``OCRResponse``: one page per requested page (``pages``, else page 0), each
    ``markdown`` the uploaded file's text (the fake reads a text file as its document)
    or, for a URL, a line naming it; ``document_annotation`` (with
    ``document_annotation_format``) the fake's answer in that format."""
    doc = payload["document"]
    size = None
    if doc.get("type") == "file" or "file_id" in doc:
        stored, missing = _uploaded(api, cid, doc["file_id"])
        if missing is not None:
            return missing
        source, size = stored.content.decode("utf-8", "ignore"), len(stored.content)
        try:  # a text file reads as itself; any other file as a line naming it
            text = stored.content.decode("utf-8").strip()
        except UnicodeDecodeError:
            text = f"Fake OCR of {stored.filename}"
    else:
        url = doc.get("document_url") or doc.get("image_url")
        source = url.get("url", "") if isinstance(url, Mapping) else str(url)
        text = f"Fake OCR of {source[:200]}"
    pages = _pages(payload.get("pages"))
    if pages is None:
        return _refused(cid, f"pages: no page in {payload.get('pages')!r}")
    prompt = "\n".join((source, payload.get("document_annotation_prompt") or ""))
    tokens = len(prompt.split())
    marker, failed = _failed(api, cid, prompt, tokens)
    if failed is not None:
        return failed
    mode, schema = _mode(payload.get("document_annotation_format"))
    annotation = None
    if payload.get("document_annotation_format"):
        annotation = make_answer(prompt, 0, mode, schema).text
    response_body = {
        "pages": [
            {
                "index": i,
                "markdown": f"{text}\n\n(page {i + 1})",
                "images": [],
                "dimensions": dict(_PAGE_DIMENSIONS),
            }
            for i in pages
        ],
        "model": batch.model,
        "usage_info": {"pages_processed": len(pages), "doc_size_bytes": size},
        "document_annotation": annotation,
    }
    return _ok(cid, batch.endpoint, response_body, tokens)


def _classification(
    api: MistralApi, batch: Batch, cid: str, payload: dict[str, Any], now: float
) -> Item:
    """A ``ClassificationResponse``: one result per input text (``/v1/classifications``:
    ``input`` a text or texts) or per conversation (``/v1/chat/classifications``:
    ``input`` an ``InstructRequest`` ``{"messages"}`` or a list of them), each
    ``{CLASSIFIER_TARGET: {"scores": {label: score}}}``: ``flagged`` 0.99 for a text
    with ``FAKE_ERROR:content_filter``, else 0.01."""
    raw = payload["input"]
    if batch.endpoint == "/v1/chat/classifications":
        convos = raw if isinstance(raw, list) else [raw]
        texts = [prompt_of(c)[0] for c in convos]
    else:
        texts = [str(x) for x in (raw if isinstance(raw, list) else [raw])]
    prompt = "\n".join(texts)
    tokens = len(prompt.split())
    _marker, failed = _failed(api, cid, prompt, tokens)
    if failed is not None:
        return failed
    target, (yes, no) = CLASSIFIER_TARGET
    results = []
    for text in texts:
        score = 0.99 if error_marker(text) == "content_filter" else 0.01
        results.append({target: {"scores": {yes: score, no: round(1 - score, 2)}}})
    response_body = {"id": uuid.uuid4().hex, "model": batch.model, "results": results}
    return _ok(cid, batch.endpoint, response_body, tokens)


def _conversation(
    api: MistralApi, batch: Batch, cid: str, payload: dict[str, Any], now: float
) -> Item:
    """A ``ConversationResponse``: one ``message.output`` entry, the fake's answer to
    the user entries (``inputs`` a text or entries), in the format of
    ``completion_args.response_format``, named after the job's model, or its agent
    (``agent_id``, ``model: null``) for a job created with ``agent_id``; the chat
    markers apply (Mistral has no refusal field: ``refusal`` and ``content_filter``
    answer normally)."""
    inputs = payload["inputs"]
    entries = [{"role": "user", "content": inputs}] if isinstance(inputs, str) else inputs
    fmt = (payload.get("completion_args") or {}).get("response_format")
    prompt, images, mode, schema = prompt_of({"messages": entries, "response_format": fmt})
    tokens = len(prompt.split()) + limits.TOKENS_PER_IMAGE * images
    marker, failed = _failed(api, cid, prompt, tokens)
    if marker in ("refusal", "content_filter"):
        marker = None
    if failed is not None:
        return failed
    answer = make_answer(prompt, images, mode, schema, marker)
    response_body = scripted_body(marker)
    if response_body is None:
        response_body = {
            "object": "conversation.response",
            "conversation_id": "conv_" + uuid.uuid4().hex,
            "outputs": [
                {
                    "object": "entry",
                    "type": "message.output",
                    "created_at": _iso(now),
                    "completed_at": _iso(now),
                    "model": batch.model,
                    "agent_id": payload.get("agent_id"),
                    "id": "msg_" + uuid.uuid4().hex,
                    "role": "assistant",
                    "content": answer.text,
                }
            ],
            "usage": {
                "prompt_tokens": answer.input_tokens,
                "completion_tokens": answer.output_tokens,
                "total_tokens": answer.input_tokens + answer.output_tokens,
            },
        }
        validate_response(RESPONSE_TYPES[batch.endpoint], response_body)
    return answered_response_item(marker, cid, answer_line(cid, response_body), answer)


def _transcription(
    api: MistralApi, batch: Batch, cid: str, payload: dict[str, Any], now: float
) -> Item:
    """A ``TranscriptionResponse`` of the audio at ``file_url`` or in the uploaded file
    ``file_id`` (exactly one: a JSON line cannot carry the multipart ``file``):
    ``text`` a sentence naming the audio (the fake hears nothing), ``language`` the
    requested one or ``"en"``, one segment with ``timestamp_granularities:
    ["segment"]``; ``usage.prompt_audio_seconds`` 1 per 16,000 bytes of an uploaded file
    (at least 1; 1 for a URL)."""
    if "file" in payload:
        return _refused(cid, "file: a batch line names its audio with file_url or file_id")
    url, file_id = payload.get("file_url"), payload.get("file_id")
    if bool(url) == bool(file_id):
        return _refused(cid, "give exactly one of file_url and file_id")
    seconds = 1
    if file_id:
        stored, missing = _uploaded(api, cid, file_id)
        if missing is not None:
            return missing
        source = stored.content.decode("utf-8", "ignore")
        name = stored.filename
        seconds = max(1, len(stored.content) // 16000)
    else:
        source = name = str(url)
    prompt = "\n".join((source, *(payload.get("context_bias") or [])))
    tokens = len(prompt.split())
    _marker, failed = _failed(api, cid, prompt, tokens)
    if failed is not None:
        return failed
    text = f"Fake transcription of {name[:200]}."
    response_body: dict[str, Any] = {
        "model": batch.model,
        "text": text,
        "language": payload.get("language") or "en",
        "usage": {
            "prompt_tokens": 0,
            "completion_tokens": len(text.split()),
            "total_tokens": len(text.split()),
            "prompt_audio_seconds": seconds,
        },
    }
    if "segment" in (payload.get("timestamp_granularities") or []):
        response_body["segments"] = [
            {"type": "transcription_segment", "text": text, "start": 0.0, "end": float(seconds)}
        ]
    return _ok(cid, batch.endpoint, response_body, tokens)
