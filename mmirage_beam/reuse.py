"""Answers already paid for are reused, not bought again (DESIGN.md).

A run under a state folder (a receipts base) that builds a request whose exact body an
earlier run under the same base had answered successfully does not send it: the merge
copies the earlier answer, marked ``mmirage_reused_from: {<output>: <run_id>}``.

- **Answer key** (:func:`answer_key`): SHA-256 of the request line without its
  custom_id (the adapter hook ``request_without_id`` knows where each provider puts
  it), together with the provider's name and every
  provider setting that is sent or changes where it is sent (``model``, ``base_url``...;
  not the chunking, cost or timeout keys, :data:`NOT_IN_KEY`). The line holds the
  endpoint, model, parameters, prompt and images, so any change to them is a new key.
- **Answers file** ``<base>.answers.<run_id>.jsonl`` (:func:`answers_path`): written by a
  successful ``mmirage merge`` (named by the merge's oldest run), one line per output
  that merged without any error::

      {"answer_key": str, "provider": str, "provider_batch_id": str,
       "custom_id": str, "run_id": str, "settings_key": str}

  ``run_id``, ``provider_batch_id`` and ``custom_id`` say where the answer is: for an
  answer that was itself reused, the run and batch that paid for it.
- **Reuse** (:class:`mmirage_beam.transforms.reuse.ReuseAnswers`, in the submit graph
  before chunking): requests are joined on their answer key with the earlier answers
  files (a CoGroupByKey: memory stays flat in the data). A reused request is not
  chunked; it goes into a *reused receipt* of the run, one per earlier batch and output
  (:func:`mmirage_beam.run.receipts.reused_receipt`), which merge treats as a receipt of
  the earlier batch restricted to those requests.
- **Stale answers** (:func:`check_staleness`): before the pipeline, the launcher asks the
  provider, once per earlier batch, whether its results can still be downloaded
  (:meth:`~mmirage_beam.providers.base.BatchSubmissionAdapter.results_available`); the
  answers of a batch whose results expired are sent again, and the run says so.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
from typing import Any, Mapping, Optional, Sequence

from mmirage_beam.jsonl import iter_jsonl_file
from mmirage_beam.request_hashes import REQUEST_HASH_CHARS, parsed_request_hash, str_keys_only

#: provider config fields that change nothing sent to the provider (the cost keys only
#: change what is printed, ``max_enqueued_tokens`` only when batches are created): left
#: out of a run's fingerprint (:mod:`mmirage_beam.run.fingerprint`) and of answer keys.
NOT_SENT = (
    "metadata_output_path",
    "timeout_seconds",
    "price_per_million_input_tokens",
    "price_per_million_output_tokens",
    "max_enqueued_tokens",
    "exact_tokens",
)

#: provider config fields left out of the answer key: they change how requests are
#: chunked, priced, counted or waited for, never an answer.
NOT_IN_KEY = (
    *NOT_SENT,
    "max_chunk_bytes",
    "max_requests_per_chunk",
    "oversized_request_policy",
)

#: the receipt ``status`` of a reused receipt (no batch was created for it)
REUSED_STATUS = "reused"
#: prefix of the per-output token counters of reused requests (``reused_input_tokens:<o>``)
REUSED_PREFIX = "reused_"
#: how many requests of the run were reused, and how many were sent again because their
#: earlier answer's results expired
REUSED_REQUESTS = "requests_reused"
STALE_REQUESTS = "requests_reuse_stale"
#: stale batches named one by one before the pipeline (the rest are counted)
STALE_SHOWN = 5


def answers_path(base: str, run_id: str) -> str:
    """``<base>.answers.<run_id>.jsonl``."""
    return f"{base}.answers.{run_id}.jsonl"


def key_settings(provider_config: Any) -> dict[str, Any]:
    """The provider settings that are part of every answer key (see :data:`NOT_IN_KEY`)."""
    fields = (
        dataclasses.asdict(provider_config) if dataclasses.is_dataclass(provider_config) else {}
    )
    return {k: v for k, v in fields.items() if k not in NOT_IN_KEY}


def answer_key(adapter: Any, line: bytes, settings: Mapping[str, Any]) -> str:
    """The answer key (64 hex digits) of one serialised request line.

    Args:
        adapter: the provider's adapter (its ``request_without_id`` drops the custom_id).
        line: the request line as built (``BatchRequest.line``, UTF-8 JSON).
        settings: :func:`key_settings` of the processor (computed once per worker).

    Raises:
        ValueError: ``line`` is not a JSON object.
    """
    return request_answer_key(adapter, json.loads(line), settings)


def request_answer_key(adapter: Any, request: Any, settings: Mapping[str, Any]) -> str:
    """:func:`answer_key` of a request line already parsed (``json.loads`` of it; not
    modified).

    Raises:
        ValueError: ``request`` is not a dict (the line was not a JSON object).
    """
    if not isinstance(request, dict):
        raise ValueError("a request line must be a JSON object")
    shaped = {"settings": settings, "request": adapter.request_without_id(request)}
    text = json.dumps(
        shaped, sort_keys=True, ensure_ascii=False, separators=(",", ":"), default=str
    )
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


#: the canonical JSON of answer keys (sorted keys, compact, UTF-8 as is), as one encoder
_CANONICAL_ENCODER = json.JSONEncoder(
    sort_keys=True, ensure_ascii=False, separators=(",", ":"), default=str
)


def _make_canonical() -> Any:
    """``_CANONICAL_ENCODER.encode``, through one C encoder made once when there is one:
    ``JSONEncoder.encode`` makes a new one per call (Python work per value). The same
    text either way (``check_circular`` off: request values come from a JSON line)."""
    from json.encoder import c_make_encoder, encode_basestring

    if c_make_encoder is None:
        return _CANONICAL_ENCODER.encode
    enc = c_make_encoder(None, str, encode_basestring, None, ":", ",", True, False, True)
    return lambda o: "".join(enc(o, 0))


_CANONICAL = _make_canonical()


_ABSENT = object()
#: what ``json.dumps`` with ``ensure_ascii=True`` escapes that ``ensure_ascii=False``
#: leaves as is (only ever inside strings): DEL and every non-ASCII character
_NOT_ASCII = re.compile("[^\\x00-\\x7e]")


def _ascii_escape(m: re.Match) -> str:
    c = ord(m.group())
    if c < 0x10000:
        return f"\\u{c:04x}"
    c -= 0x10000  # a UTF-16 surrogate pair, as json writes it
    return f"\\u{0xD800 | (c >> 10):04x}\\u{0xDC00 | (c & 0x3FF):04x}"


_KEY_TEXTS: dict[str, str] = {}


def _key_text(key: str) -> str:
    """The JSON text of a top-level request key (a handful per provider, kept)."""
    text = _KEY_TEXTS.get(key)
    if text is None:
        text = _CANONICAL(key)
        if len(_KEY_TEXTS) < 256:  # bounded, whatever the requests hold
            _KEY_TEXTS[key] = text
    return text


def canonical_settings(settings: Mapping[str, Any]) -> str:
    """The canonical JSON text of :func:`key_settings` for :func:`hash_and_answer_key`
    (computed once per worker)."""
    return _CANONICAL_ENCODER.encode(settings)


def hash_and_answer_key(
    adapter: Any, request: Any, settings_text: Optional[str]
) -> tuple[str, Optional[str]]:
    """``(request hash, answer key)`` of a built request dict, each the same as from its
    serialised line (``run.receipts.request_line_hash`` and :func:`answer_key`), with
    the request's canonical JSON made once for both: each top-level value is encoded
    once and the two texts spliced from the parts (the answer key leaves the custom_id
    out, the hash escapes non-ASCII characters as ``json.dumps`` does by default).

    Args:
        adapter: the provider's adapter (its ``request_without_id``).
        request: the request as built (or ``json.loads`` of its line): JSON values only,
            as its line was serialised from it; not modified.
        settings_text: :func:`canonical_settings`; None: no answer key (None returned).

    Raises:
        ValueError: ``request`` is not a dict.
    """
    if not isinstance(request, dict):
        raise ValueError("a request line must be a JSON object")
    if not str_keys_only(request):  # json sorts non-str keys (at any depth) its own way:
        request = json.loads(json.dumps(request))  # as from the line (its keys strings)
        settings = None if settings_text is None else json.loads(settings_text)
        key = None if settings is None else request_answer_key(adapter, request, settings)
        return parsed_request_hash(request), key
    dump = _CANONICAL
    parts = {k: dump(v) for k, v in request.items()}
    text = "{" + ",".join(f"{_key_text(k)}:{parts[k]}" for k in sorted(parts)) + "}"
    if not text.isascii() or "\x7f" in text:
        text = _NOT_ASCII.sub(_ascii_escape, text)
    now = hashlib.sha256(text.encode("utf-8")).hexdigest()[:REQUEST_HASH_CHARS]
    if settings_text is None:
        return now, None
    without = adapter.request_without_id(request)
    body = ",".join(
        f"{_key_text(k)}:{parts[k] if request.get(k, _ABSENT) is v else dump(v)}"
        for k, v in sorted(without.items())
    )
    shaped = '{"request":{' + body + '},"settings":' + settings_text + "}"
    return now, hashlib.sha256(shaped.encode("utf-8")).hexdigest()


def answer_record(
    key: str,
    provider: str,
    provider_batch_id: str,
    custom_id: str,
    run_id: str,
    settings_key: str = "",
) -> dict[str, str]:
    """One answers-file line (see the module docstring); ``settings_key``
    (:func:`settings_key`) when given."""
    record = {
        "answer_key": key,
        "provider": provider,
        "provider_batch_id": provider_batch_id,
        "custom_id": custom_id,
        "run_id": run_id,
    }
    if settings_key:
        record["settings_key"] = settings_key
    return record


def settings_key(provider_config: Any) -> str:
    """16 hex digits of the SHA-256 of :func:`canonical_settings` of ``provider_config``:
    the part of every answer key that its provider settings make (``base_url``, model,
    endpoint...). An answer whose ``settings_key`` differs from the run's can never
    match one of its requests, so its batch is not looked up (issue 38: reuse asked
    another endpoint about its batches, each 404 retried for a minute)."""
    text = canonical_settings(key_settings(provider_config))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def earlier_answer_files(base: str, run_id: Optional[str] = None) -> list[str]:
    """The answers files under ``base``, sorted, except ``run_id``'s own."""
    from mmirage_beam.io.filesystems import FileSystems

    pattern = answers_path(base, "*")
    found = FileSystems.match([pattern])[0].metadata_list
    own = answers_path(base, run_id) if run_id else None
    return sorted(m.path for m in found if m.path != own and m.path.endswith(".jsonl"))


def reuse_wanted(no_reuse_flag: bool, config: Any) -> bool:
    """Reuse is on unless ``--no-reuse`` or ``execution_params.reuse_answers: false``."""
    return not no_reuse_flag and bool(getattr(config.execution, "reuse_answers", True))


@dataclasses.dataclass
class Staleness:
    """What :func:`check_staleness` found.

    Attributes:
        checked: whether the provider was asked (a dry run without a key is not).
        batches: earlier batches of this provider the answers files name.
        stale: provider_batch_id -> why its answers are not reused.
        answers: answer lines of this provider in the files.
    """

    checked: bool
    batches: int = 0
    stale: dict[str, str] = dataclasses.field(default_factory=dict)
    answers: int = 0
    #: answer lines of this provider made with other settings (another ``base_url``,
    #: model, endpoint...): they cannot match, and their batches are not looked up
    other_settings: int = 0


def earlier_batches(
    files: Sequence[str], provider: str, settings: Optional[str] = None
) -> tuple[dict[str, str], int, int]:
    """``({provider_batch_id: run_id}, answer lines, lines of other settings)`` of
    ``provider`` in ``files``: read one line at a time (memory: one entry per batch, not
    per answer). A line whose ``settings_key`` is not ``settings`` (when given) cannot
    match and is only counted; a line without one (written before it existed) is kept."""
    batches: dict[str, str] = {}
    count = other = 0
    for path in files:
        for _raw, a in iter_jsonl_file(path):
            if isinstance(a, dict) and a.get("provider") == provider:
                if settings and a.get("settings_key") not in (None, settings):
                    other += 1
                    continue
                count += 1
                batches.setdefault(str(a.get("provider_batch_id")), str(a.get("run_id")))
    return batches, count, other


def check_staleness(
    files: Sequence[str], adapter_cls: type, provider_config: Any, ask_provider: bool
) -> Staleness:
    """Which earlier batches' results expired at the provider (one look-up per batch).

    Args:
        files: the earlier answers files (:func:`earlier_answer_files`).
        adapter_cls: the provider's adapter class.
        provider_config: the processor's config.
        ask_provider: False (a dry run without the key): nothing is asked,
            ``checked`` is False.

    Raises:
        mmirage_beam.errors.CredentialsError: ``ask_provider`` without the key.
    """
    from mmirage_beam.providers.base import opened_adapter

    provider = provider_config.provider
    batches, count, other = earlier_batches(files, provider, settings_key(provider_config))
    out = Staleness(checked=ask_provider, batches=len(batches), answers=count, other_settings=other)
    if not ask_provider or not batches:
        return out
    with opened_adapter(adapter_cls, provider_config) as adapter:
        for batch_id in sorted(batches):
            why = adapter.results_available(batch_id, provider_config)
            if why is not None:
                out.stale[batch_id] = why
    return out


def staleness_lines(run_id: str, st: Staleness) -> list[str]:
    """What the launcher prints about the earlier answers before the pipeline."""
    head = f"mmirage run {run_id}: reuse:"
    lines = []
    if st.other_settings:
        lines.append(
            f"{head} {st.other_settings:,} earlier answer(s) were made with other provider "
            "settings (base_url, model, endpoint...): they cannot match, and their batches "
            "are not looked up"
        )
    if not st.answers:
        return lines
    lines.append(
        f"{head} {st.answers:,} earlier answer(s) in {st.batches:,} batch(es) can be "
        "reused (requests with the same body are not sent; --no-reuse sends them)"
    )
    if not st.checked:
        lines.append(
            f"{head} staleness not checked (dry run without the provider's key): an "
            "answer whose results file expired would be sent again by the real run"
        )
    shown = sorted(st.stale.items())
    for batch_id, why in shown[:STALE_SHOWN]:
        lines.append(
            f"{head} batch {batch_id}: results no longer available ({why}); its answers "
            "are not reused: those requests are sent again"
        )
    if len(shown) > STALE_SHOWN:
        lines.append(f"{head} ... and {len(shown) - STALE_SHOWN:,} more such batch(es)")
    return lines


def split_stats(stats: Mapping[str, int]) -> tuple[dict[str, int], dict[str, int]]:
    """The token counters of a run split into ``(sent, reused)``, each keyed like
    :mod:`mmirage_beam.costs.tokens`' counters (``input_tokens:<output>``...): the
    build counts every request; the reuse step counts the reused ones again under
    :data:`REUSED_PREFIX`."""
    from mmirage_beam.costs import tokens as t

    sent: dict[str, int] = {}
    reused: dict[str, int] = {}
    for key, value in stats.items():
        metric, sep, _output = key.partition(":")
        if not sep:
            continue
        if metric in t.TOKEN_METRICS:
            sent[key] = int(value) - int(stats.get(REUSED_PREFIX + key, 0))
        elif metric.startswith(REUSED_PREFIX) and metric[len(REUSED_PREFIX) :] in t.TOKEN_METRICS:
            reused[key[len(REUSED_PREFIX) :]] = int(value)
    # an output whose every request was reused sends nothing: no estimate line for it
    idle = {
        key.partition(":")[2]
        for key, value in sent.items()
        if key.partition(":")[0] == t.REQUESTS_COUNTED and value <= 0 and key in reused
    }
    sent = {k: v for k, v in sent.items() if k.partition(":")[2] not in idle}
    return sent, reused


def sent_stats(stats: Mapping[str, int]) -> dict[str, int]:
    """``stats`` with the token counters of what is sent only (the estimate's input)."""
    from mmirage_beam.costs import tokens as t

    sent, _reused = split_stats(stats)
    out = {k: int(v) for k, v in stats.items() if k.partition(":")[0] not in t.TOKEN_METRICS}
    out.update(sent)
    return out


def savings_lines(stats: Mapping[str, int], provider_config: Any, dry_run: bool) -> list[str]:
    """The ``reuse:`` lines of the run summary: requests reused, what they would have
    cost (the estimate's pricing), and requests sent again because their answer was stale."""
    from mmirage_beam.costs import tokens as t
    from mmirage_beam.costs.prices import batch_price

    reused_n = int(stats.get(REUSED_REQUESTS, 0))
    stale_n = int(stats.get(STALE_REQUESTS, 0))
    if not reused_n and not stale_n:
        return []
    _sent, reused = split_stats(stats)
    inp = sum(v for k, v in reused.items() if k.startswith(t.INPUT_TOKENS + ":"))
    out = sum(v for k, v in reused.items() if k.startswith(t.MAX_OUTPUT_TOKENS + ":"))
    unbounded = sum(
        v for k, v in reused.items() if k.startswith(t.REQUESTS_WITHOUT_OUTPUT_LIMIT + ":")
    )
    model = getattr(provider_config, "model", None)
    price = batch_price(provider_config.provider, model, provider_config)
    verb = "would not be sent" if dry_run else "not sent"
    if price is None:
        cost = "cost unknown (no price)"
    elif unbounded:
        cost = f"saves input ${price.cost_usd(inp):,.4f} + output (unbounded; estimate)"
    else:
        cost = f"saves up to ${price.cost_usd(inp, out):,.4f} (estimate)"
    lines = [
        f"reuse:               {reused_n:,} request(s) answered by earlier runs, {verb}: "
        f"{inp:,} input tokens, {cost}"
    ]
    if stale_n:
        lines.append(
            f"reuse:               {stale_n:,} request(s) sent again: their earlier answer's "
            "results expired at the provider"
        )
    return lines


def merge_reuse_lines(stats: Mapping[str, int]) -> list[str]:
    """What ``mmirage merge`` says about reused answers: how many, and their tokens,
    which the run that paid for them counts (the tokens and cost above leave them out)."""
    n = int(stats.get("outputs_reused", 0))
    if not n:
        return []
    inp = sum(int(v) for k, v in stats.items() if k.startswith("reused_input_tokens:"))
    out = sum(int(v) for k, v in stats.items() if k.startswith("reused_output_tokens:"))
    return [
        f"reused answers:      {n:,} output(s) copied from earlier runs (marked "
        f"mmirage_reused_from; {inp:,} input / {out:,} output tokens, paid by those runs "
        "and not counted above)"
    ]
