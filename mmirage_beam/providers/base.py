"""The provider plugin contract: :class:`BatchSubmissionAdapter` and its registry.

Keeps MMIRAGE's extension contract (``build_request``, ``estimate_request_bytes``,
``submit_chunk``, ``parse_submission_result``, ``check_batch_status``,
``retrieve_results``). Generic code never branches on a provider's name: everything
provider-specific lives in an adapter subclass (one package per built-in provider,
``mmirage_beam/providers/<name>/``). Like Beam's ``ml/inference/base.py``
``ModelHandler``, the one class carries every vendor-specific hook, each with a default
a plugin may keep: token counting (:meth:`BatchSubmissionAdapter.count_request_tokens`,
default "unknown"; :meth:`~BatchSubmissionAdapter.exact_token_counter`, default none),
prices (:meth:`~BatchSubmissionAdapter.price_table`, :meth:`~BatchSubmissionAdapter.price_key`,
default none: "price unknown") and limits (:meth:`~BatchSubmissionAdapter.limits`, default
the config class's ``PROVIDER_*`` attributes).

The contract is generic in its config class (``BatchSubmissionAdapter[ConfigT]``, ``ConfigT``
bound to :class:`~mmirage_beam.providers.config.BatchProviderConfig`): each adapter names
its own (``OpenAIBatchAdapter(FileUploadAdapter[OpenAIBatchConfig])``), so the ``config``
every hook receives is typed. What ``submit_chunk*`` hands back is a
:class:`~mmirage_beam.providers.batch_status.SubmittedBatch`, what ``find_batch`` and
``find_candidate_batches`` find are :class:`~mmirage_beam.providers.batch_status.FoundBatch`
records; a plugin may still return the provider's dict, converted where shared code
receives it (:meth:`BatchSubmissionAdapter.submitted_batch`,
:meth:`~BatchSubmissionAdapter.found_batch`).

Typed records, and why some are TypedDicts: what shared code reads fields of is a frozen
dataclass or NamedTuple (:class:`SubmittedBatch`, :class:`FoundBatch`,
:class:`BatchSubmissionResult`, :class:`~mmirage_beam.records.ProviderResult`), converted
once from a plugin's dict. What is handed to an SDK or written to a file as JSON, a
request line and the bodies inside it, is a ``TypedDict`` named for the wire shape
(``OpenAIBatchLine``, ``OpenAIChatBody``, ``AnthropicMessageParams``...): at run time it is
the very dict the SDK or the JSON encoder takes, so the bytes of a request line are
unchanged and its key order is the order it is built in, while its keys and value types
are declared. A record would need converting back to a dict field by field before
every encode, on the hottest path (one per row). The provider's own batch / job objects,
whose shape is the provider's, are :data:`JSONObject`. The capability flags (below, on
the class) say what an adapter can do; shared code reads them, never probes.

What an adapter returns about a batch lives in :mod:`~mmirage_beam.providers.batch_status`,
the credentials it needs are read by :mod:`~mmirage_beam.providers.credentials`, staged
chunk files are opened by :mod:`~mmirage_beam.providers.chunk_files`; their public names
are re-exported here.

Adapters are instantiated on workers (in a DoFn's ``setup()``), with credentials read
from the worker's environment; the class itself travels pickled with the DoFn, so a
provider registered only in the launcher still works on remote workers.
"""

from __future__ import annotations

import abc
import contextlib
import json
import logging
import time
from typing import (
    Any,
    Callable,
    ClassVar,
    ContextManager,
    Dict,
    Generic,
    Iterable,
    Iterator,
    Mapping,
    Optional,
    Sequence,
    TypeVar,
    Union,
)

from mmirage_beam.jsonl import RawLine, json_encoder
from mmirage_beam.providers import retrying
from mmirage_beam.providers.batch_status import (
    ENDED_STATUSES,
    NORMALISED_STATUSES,
    BatchFields,
    BatchProgress,
    BatchSubmissionResult,
    FoundBatch,
    JSONObject,
    JSONValue,
    ProviderLimits,
    SubmittedBatch,
    normalize_status,
    optional_int,
    parse_timestamp,
)
from mmirage_beam.providers.chunk_files import iter_chunk_lines, open_chunk_file, staged_upload
from mmirage_beam.providers.config import (
    ADAPTER_TAKES_EMBEDDINGS,
    BatchProviderConfig,
    BatchProviderConfigRegistry,
)
from mmirage_beam.providers.credentials import credential_env_var, resolve_credentials
from mmirage_beam.providers.registry import ProviderRegistry
from mmirage_beam.providers.tokens import TokenCount
from mmirage_beam.records import ProviderResult

__all__ = [
    "NORMALISED_STATUSES",
    "ENDED_STATUSES",
    "BatchSubmissionResult",
    "BatchFields",
    "SubmittedBatch",
    "FoundBatch",
    "Submission",
    "RequestLine",
    "JSONObject",
    "JSONValue",
    "BatchProgress",
    "ProviderLimits",
    "parse_timestamp",
    "credential_env_var",
    "resolve_credentials",
    "BatchSubmissionAdapter",
    "open_chunk_file",
    "iter_chunk_lines",
    "BatchAdapterRegistry",
    "register_provider",
    "OpenedAdapters",
    "open_adapter",
    "close_adapter",
    "opened_adapter",
]


_LOG = logging.getLogger(__name__)

_T = TypeVar("_T")
_R = TypeVar("_R", SubmittedBatch, FoundBatch)
#: the config class an adapter is written for (each adapter names its own).
ConfigT = TypeVar("ConfigT", bound=BatchProviderConfig)
#: what ``submit_chunk*`` may return: the record (the built-ins), or the provider's
#: batch object as a dict (plugins written before the record), converted by
#: :meth:`BatchSubmissionAdapter.submitted_batch`.
Submission = Union[SubmittedBatch, Dict[str, Any]]
#: One batch request line as :meth:`BatchSubmissionAdapter.build_request` returns it. Each
#: built-in adapter returns a TypedDict named for its provider's wire shape
#: (``OpenAIBatchLine``, ``AnthropicBatchLine``, ``GeminiBatchLine``, ``MistralBatchLine``,
#: ``BedrockRecord``, ``VertexBatchLine``); every TypedDict is a ``Mapping[str, object]``,
#: which is all shared code may assume (it encodes the line, never reads its fields).
RequestLine = Mapping[str, object]


#: ``json.dumps(request, ensure_ascii=False, separators=(",", ":"))``, one encoder made once
_REQUEST_LINE = json_encoder(ensure_ascii=False, separators=(",", ":"))


class BatchSubmissionAdapter(abc.ABC, Generic[ConfigT]):
    """How one provider builds, sizes, submits, checks and retrieves batches.

    ``ConfigT`` is the provider's config class (a
    :class:`~mmirage_beam.providers.config.BatchProviderConfig` subclass): every hook's
    ``config`` is one.

    Subclasses set ``required_credentials`` (each read from ``<PROVIDER>_<KEY>``) and
    implement the abstract methods. ``payload`` passed to :meth:`build_request` is
    provider-neutral::

        {
          "messages": [{"role": "user", "content": str | [parts]}],  # OpenAI chat shape;
              # parts are {"type": "text", "text"} then {"type": "image_url",
              # "image_url": {"url": "data:<mime>;base64,..." | "https://..."}}
          "images": [{"source": path-or-url, "url": str | None, "media_type": str | None,
                      "data": base64-str | None, "size_bytes": int | None,
                      "animated": bool}],
          "output_name": str, "output_type": "plain" | "JSON" | "embedding",
          "json_schema": dict | None,   # JSON-schema object for structured output
          # output_type "embedding" only (no images): the text to embed and the
          # processor's ``dimensions`` (int | None: the model's own vector length)
          "text": str, "dimensions": int | None,
        }

    An adapter that takes embedding outputs builds the provider's embeddings request
    from ``text`` and yields each answer's vector as ``ProviderResult.generated_text``
    holding its compact JSON list of floats (:func:`mmirage_beam.results.embedding_text`),
    which merge parses (:func:`mmirage_beam.results.check_answer`).

    Args:
        credentials: ``{key: value}`` for ``required_credentials`` (empty for a dry run).
    """

    required_credentials: ClassVar[Sequence[str]] = ("api_key",)
    #: credential key -> further environment variables read when ``<PROVIDER>_<KEY>`` is
    #: unset (an SDK's own variable, e.g. ``GOOGLE_API_KEY``).
    CREDENTIAL_FALLBACKS: ClassVar[Mapping[str, Sequence[str]]] = {}
    #: bytes a chunk's upload adds on top of the sum of its request lines.
    chunk_overhead_bytes: ClassVar[int] = 0
    #: At most this many chunks of one worker are submitted at the same time (None: as
    #: many as ``execution_params.submit_concurrency``). An adapter whose retried create
    #: can only recognise its own batch when no sibling is in flight sets 1.
    max_concurrent_submissions: ClassVar[Optional[int]] = None
    #: extra provider status words -> normalised status.
    STATUS_MAP: ClassVar[Mapping[str, str]] = {}
    #: where the provider's batch object keeps its id, status word, creation time and
    #: input file (read by :meth:`parse_submission_result` and the batch records).
    BATCH_FIELDS: ClassVar[BatchFields] = BatchFields()
    #: the largest image file, in bytes, the provider accepts; ExtractInputs refuses a
    #: bigger one before reading it (None: ``images.DEFAULT_MAX_IMAGE_FILE_BYTES``), and
    #: ``image_file_limit`` says which limit it is, with its source, in that message.
    max_image_file_bytes: ClassVar[Optional[int]] = None
    image_file_limit: ClassVar[str] = ""
    #: True when ``build_request`` of a text payload (no image) puts the custom_id and
    #: the prompt into the request as whole string values, unchanged, and takes all the
    #: rest from the config, so one output's text requests differ only there: their
    #: lines are then spliced from one encoded template
    #: (:mod:`mmirage_beam.transforms.request_template`, checked by probe requests)
    #: instead of encoding each request. False: every request is encoded.
    verbatim_prompt: ClassVar[bool] = False

    # -- capabilities: declared here, read by shared code, never probed with getattr ----
    #: :meth:`find_batch` answers: the provider stores a batch's metadata, so a create
    #: retried after an error, or a crash between a create and its receipt, adopts the
    #: batch the first attempt made instead of creating a second. Set it with an override
    #: of :meth:`find_batch` (an override without it sets it: plugins written before it).
    adopts_by_metadata: ClassVar[bool] = False
    #: :meth:`find_candidate_batches` answers: a lost create is matched by its creation
    #: time and request count, then confirmed by its custom_ids (Anthropic, whose batches
    #: carry no metadata). Requires an override of :meth:`find_candidate_batches`.
    adopts_by_shape: ClassVar[bool] = False
    #: :meth:`cancel_batch` answers (``mmirage cancel``). Set it with an override of
    #: :meth:`cancel_batch` (an override without it sets it: plugins written before it);
    #: shared code never calls the base class's, which cannot cancel.
    cancels_batches: ClassVar[bool] = False
    #: :meth:`exact_token_counter` gives a counter for some configs (the provider has a
    #: free counting endpoint, used with ``exact_tokens``); it may still answer None for
    #: a config it cannot count (Vertex AI's Claude). Set like :attr:`cancels_batches`.
    counts_tokens_exactly: ClassVar[bool] = False
    #: :meth:`build_request` builds the provider's embeddings request for
    #: ``output_type: embedding`` payloads. Requires the adapter's config class (its
    #: ``ConfigT``) to name its ``EMBEDDINGS_ENDPOINT``; when no class declares it, it
    #: is that endpoint's presence (plugins written before it).
    takes_embeddings: ClassVar[bool] = False
    #: the batch create carries the requests in its own body (Anthropic's
    #: ``messages.batches.create(requests=[...])``), not an uploaded input file: a
    #: chunk's size limit is then the create call's (``chunk_overhead_bytes`` counts its
    #: envelope) and the batch has no ``input_file_id``. An adapter declaring it keeps
    #: no ``upload_file``.
    sends_requests_inline: ClassVar[bool] = False
    #: declared by a class whose :meth:`submit_chunk_file` sends the staged file as it
    #: is, without going through :meth:`submit_chunk_lines` / :meth:`submit_chunk`
    #: (``FileUploadAdapter``, Anthropic's adapter).
    streams_staged_file: ClassVar[bool] = False
    #: set for each subclass when it is defined: a class below the nearest one declaring
    #: :attr:`streams_staged_file` overrides :meth:`submit_chunk` or
    #: :meth:`submit_chunk_lines`, so that faster ``submit_chunk_file`` must go through
    #: the override (a plugin's override is always called).
    submits_its_own_way: ClassVar[bool] = False
    #: set for each subclass when it is defined: it overrides :meth:`serialize_request`
    #: (its request lines are not the base class's JSON encoding of the request dict).
    serializes_its_own_way: ClassVar[bool] = False
    #: set for each subclass when it is defined: it overrides
    #: :meth:`estimate_request_bytes` (a chunk's size is not the sum of its lines).
    estimates_its_own_size: ClassVar[bool] = False
    #: the capabilities :meth:`__init_subclass__` set for this class (not declared by it)
    _derived_capabilities: ClassVar[frozenset[str]] = frozenset()

    def __init_subclass__(cls, **kwargs: Any) -> None:
        """Derive the set-when-defined capabilities and refuse a declared one whose
        method is the base class's, as Beam's ``RemoteModelHandler`` refuses overrides
        that cannot work.

        Raises:
            TypeError: a declared capability whose method is the base class's
                (``adopts_by_metadata`` without a :meth:`find_batch` of its own,
                ``adopts_by_shape`` without :meth:`find_candidate_batches`,
                ``cancels_batches`` without :meth:`cancel_batch`,
                ``counts_tokens_exactly`` without :meth:`exact_token_counter`);
                ``takes_embeddings`` with a config class that names no
                ``EMBEDDINGS_ENDPOINT``; ``sends_requests_inline`` with an
                ``upload_file``.
        """
        super().__init_subclass__(**kwargs)
        base = BatchSubmissionAdapter
        mro = cls.__mro__[: cls.__mro__.index(base)]

        def overrides(name: str) -> bool:
            return getattr(cls, name) is not getattr(base, name)

        derived: set[str] = set()  # set here, not declared: a subclass derives its own

        def declared(flag: str) -> bool:
            return any(
                flag in k.__dict__ and flag not in k.__dict__.get("_derived_capabilities", ())
                for k in mro
            )

        capabilities = (
            ("adopts_by_metadata", "find_batch"),
            ("adopts_by_shape", "find_candidate_batches"),
            ("cancels_batches", "cancel_batch"),
            ("counts_tokens_exactly", "exact_token_counter"),
        )
        for flag, method in capabilities:
            if flag != "adopts_by_shape" and overrides(method) and not declared(flag):
                setattr(cls, flag, True)  # a plugin written before the flag
                derived.add(flag)
            if getattr(cls, flag) and not overrides(method):
                raise TypeError(
                    f"{cls.__qualname__} sets {flag} = True but keeps the base class's "
                    f"{method}(): define {method}() or leave {flag} False"
                )
        config_cls = _config_class(cls)
        endpoint = getattr(config_cls, "EMBEDDINGS_ENDPOINT", None)
        if not declared("takes_embeddings"):
            cls.takes_embeddings = endpoint is not None
            derived.add("takes_embeddings")
        elif cls.takes_embeddings and config_cls is not None and endpoint is None:
            raise TypeError(
                f"{cls.__qualname__} sets takes_embeddings = True but its config class "
                f"{config_cls.__qualname__} names no EMBEDDINGS_ENDPOINT"
            )
        if cls.sends_requests_inline and hasattr(cls, "upload_file"):
            raise TypeError(
                f"{cls.__qualname__} sets sends_requests_inline = True but uploads a file "
                "(upload_file): leave sends_requests_inline False"
            )
        owner = next((k for k in mro if k.__dict__.get("streams_staged_file")), base)
        below = cls.__mro__[: cls.__mro__.index(owner)]
        cls.submits_its_own_way = any(
            name in k.__dict__ for k in below for name in ("submit_chunk", "submit_chunk_lines")
        )
        cls.serializes_its_own_way = overrides("serialize_request")
        cls.estimates_its_own_size = overrides("estimate_request_bytes")
        cls._derived_capabilities = frozenset(derived)

    #: the run being submitted; set by the submit step before ``submit_chunk``.
    run_id: Optional[str] = None

    #: Retry policy of every provider call (see :mod:`mmirage_beam.providers.retrying`):
    #: attempts in all, then the full-jitter backoff in seconds, and the longest
    #: server-requested wait (``retry-after-ms`` / ``retry-after``) honoured, in seconds.
    #: Class attributes, so a subclass or a test can tune them.
    RETRY_MAX_ATTEMPTS: ClassVar[int] = 6
    RETRY_INITIAL_DELAY_SECS: ClassVar[float] = 0.5
    RETRY_FACTOR: ClassVar[float] = 2.0
    RETRY_MAX_DELAY_SECS: ClassVar[float] = 30.0
    RETRY_MAX_RETRY_AFTER_SECS: ClassVar[float] = 120.0
    #: called with each retry delay in seconds; None means ``time.sleep``.
    RETRY_SLEEP: ClassVar[Optional[Callable[[float], None]]] = None

    #: the SDK's retry predicate, built in ``setup`` (:meth:`is_retryable` uses it).
    _retry_filter: Optional[Callable[[BaseException], bool]] = None

    def __init__(self, credentials: Optional[Mapping[str, str]] = None) -> None:
        self.credentials: Dict[str, str] = dict(credentials or {})

    def __getstate__(self) -> Dict[str, Any]:
        # Never pickle credentials or live clients.
        return {}

    def __setstate__(self, state: Dict[str, Any]) -> None:
        self.credentials = {}

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"

    # -- lifecycle (optional) -------------------------------------------------------
    def setup(self, config: ConfigT) -> None:
        """Open clients; called once per worker before any submission. Default: no-op."""

    def teardown(self) -> None:
        """Close clients. Default: no-op."""

    def _close_client(
        self, close: Callable[[Any], Any] = lambda client: client.close(), quietly: bool = False
    ) -> None:
        """Close the SDK client ``setup`` kept as ``self._client`` (if any) with
        ``close(client)``, then forget it; a failure to close is ignored when
        ``quietly``, else raised (the client then kept)."""
        client = getattr(self, "_client", None)
        if client is None:
            return
        with contextlib.suppress(Exception) if quietly else contextlib.nullcontext():
            close(client)
        self._client = None

    # -- retries ----------------------------------------------------------------------
    def retry_policy(self) -> retrying.RetryPolicy:
        """The :class:`~mmirage_beam.providers.retrying.RetryPolicy` of the ``RETRY_*``
        class attributes."""
        cls = type(self)
        return retrying.RetryPolicy(
            max_attempts=cls.RETRY_MAX_ATTEMPTS,
            initial_delay_secs=cls.RETRY_INITIAL_DELAY_SECS,
            factor=cls.RETRY_FACTOR,
            max_delay_secs=cls.RETRY_MAX_DELAY_SECS,
            max_retry_after_secs=cls.RETRY_MAX_RETRY_AFTER_SECS,
        )

    def is_retryable(self, exc: BaseException) -> bool:
        """True when ``exc`` is worth another attempt: this service's retry predicate.

        The adapter's ``_retry_filter`` when its ``setup`` built one from its SDK's
        exception classes (:func:`~mmirage_beam.providers.retrying.make_retry_filter`);
        else duck-typed: connection errors and timeouts, and any error whose
        ``.status_code`` is 408, 409, 429 or >= 500.
        """
        return (self._retry_filter or _DUCK_TYPED_RETRY_FILTER)(exc)

    def call_with_retries(self, what: str, fn: Callable[[], _T]) -> _T:
        """``fn()`` retried with this adapter's policy and :meth:`is_retryable`.

        Build clients with the SDK's own retries off (``max_retries=0``) and wrap every
        provider call in this, so each retry is logged once and follows one policy.
        ``fn`` is repeated unchanged: a create must check for its own earlier success.

        Args:
            what: names the call in logs and errors (no keys, no request bodies).

        Raises:
            mmirage_beam.providers.retrying.ProviderRetriesExhausted: the last attempt
                failed with a retryable error (exit status 1).
        """
        return self._retried(what, fn, self.is_retryable)

    def _retried(
        self, what: str, fn: Callable[[], _T], retry_filter: Callable[[BaseException], bool]
    ) -> _T:
        """``fn()`` retried with :meth:`retry_policy` while ``retry_filter`` says so."""
        return retrying.call_with_retries(
            fn,
            what=what,
            retry_filter=retry_filter,
            policy=self.retry_policy(),
            sleep=type(self).RETRY_SLEEP or time.sleep,
        )

    #: a 404 on looking up a receipted batch (or its results) is retried this many
    #: times, then final: a batch of another endpoint or account is never found there,
    #: and six attempts of each cost about a minute (issue 38)
    LOOKUP_404_RETRIES = 1

    def lookup_retry_filter(self) -> Callable[[BaseException], bool]:
        """A fresh predicate for one lookup: :meth:`is_retryable`, plus HTTP 404 for
        :attr:`LOOKUP_404_RETRIES` retries (a receipted batch exists, so a first 404 may
        be a replica that has not seen it yet); the next 404 is raised unchanged, and
        the report says "not found on this endpoint or account"."""
        left = [type(self).LOOKUP_404_RETRIES]

        def retry(exc: BaseException) -> bool:
            if self.http_status(exc) == 404:
                left[0] -= 1
                return left[0] >= 0
            return self.is_retryable(exc)

        return retry

    def http_status(self, exc: BaseException) -> Optional[int]:
        """The HTTP status of an error of this service's SDK, else None. Default: the
        ``status_code`` attribute (openai, anthropic, mistralai errors)."""
        return retrying.status_code_of(exc)

    def is_retryable_lookup(self, exc: BaseException) -> bool:
        """:meth:`is_retryable`, plus HTTP 404: a batch that was receipted exists, so a
        404 on looking it up (or its results) is transient on the provider's side (e.g.
        a replica that has not seen it yet) and is retried like a 5xx before it is
        reported."""
        return self.is_retryable(exc) or retrying.status_code_of(exc) == 404

    def call_lookup_with_retries(self, what: str, fn: Callable[[], _T]) -> _T:
        """:meth:`call_with_retries` for a lookup of a receipted batch: a 404 is retried
        too, :attr:`LOOKUP_404_RETRIES` times (:meth:`lookup_retry_filter`), with the
        same policy."""
        return self._retried(what, fn, self.lookup_retry_filter())

    def stream_lines_with_retries(
        self,
        what: str,
        open_stream: Callable[[], ContextManager[Iterable[bytes]]],
        retry_filter: Optional[Callable[[BaseException], bool]] = None,
    ) -> Iterator[RawLine]:
        """The lines of a downloaded file (split on ``b"\\n"`` only), streamed, retried.

        ``open_stream()`` opens the download and yields its byte blocks (e.g. an SDK's
        ``with_streaming_response`` call's ``iter_bytes()``). Opening and reading are
        retried with :meth:`retry_policy` and :meth:`is_retryable`, like every other
        call; a retry after lines were already yielded re-opens the download and skips
        the bytes of those lines, so no line is yielded twice; an attempt that read
        something starts a fresh budget of attempts. Memory: one line plus one block,
        never the file. ``retry_filter`` replaces :meth:`is_retryable`
        (e.g. :meth:`is_retryable_lookup` when opening also looks the batch up).

        Raises:
            mmirage_beam.providers.retrying.ProviderRetriesExhausted: the last attempt
                failed with a retryable error.
            Exception: any non-retryable error, at once.
        """
        return retrying.stream_lines_with_retries(
            open_stream,
            what=what,
            retry_filter=retry_filter or self.is_retryable,
            policy=self.retry_policy(),
            sleep=type(self).RETRY_SLEEP or time.sleep,
            logger=_LOG,
        )

    def find_batch(
        self, run_id: str, chunk_id: str, created_after: Optional[float] = None
    ) -> Optional[Union[FoundBatch, Dict[str, Any]]]:
        """The provider's batch created for chunk ``chunk_id`` of run ``run_id``, if any.

        Used to adopt a batch whose create succeeded on the provider's side although the
        call answered an error (or whose receipt was lost in a crash), instead of
        creating a second one. Only providers that store batch metadata can answer;
        override this only if yours can (the resume step treats an adapter that keeps
        this default as "cannot look batches up").

        The default leaves a window: a create the provider stored but answered with a
        retryable error (5xx, 529, or a connection cut after the body was sent) is
        retried and makes a second batch with the same custom_ids; both are processed
        and billed, the receipt names the one whose create answered, and ``merge`` keeps
        the newest successful result per custom_id. Anthropic is such a provider (see
        :mod:`mmirage_beam.providers.anthropic.adapter`).

        Args:
            run_id: the run's id (``mmirage_run_id`` in the batch metadata).
            chunk_id: the chunk's id (``mmirage_chunk_id``).
            created_after: Unix seconds; batches created before this are not looked at
                (None: look at every batch the provider lists).

        Returns:
            The batch as a :class:`FoundBatch` (a plugin may return the raw batch dict,
            which :meth:`parse_submission_result` reads; shared code converts it with
            :meth:`found_batch`), or None: none was found, or this provider cannot tell
            (the default).
        """
        return None

    @staticmethod
    def names_chunk(metadata: Any, run_id: str, chunk_id: str) -> bool:
        """Whether a batch's ``metadata`` (a dict, or anything else: no) names run
        ``run_id``'s chunk ``chunk_id`` (``mmirage_run_id``, ``mmirage_chunk_id``, as
        :meth:`batch_metadata` sets them)."""
        meta = metadata if isinstance(metadata, Mapping) else {}
        return meta.get("mmirage_run_id") == run_id and meta.get("mmirage_chunk_id") == chunk_id

    def batch_metadata(self, chunk_id: str, config: ConfigT) -> Dict[str, str]:
        """The metadata of chunk ``chunk_id``'s batch: the config's ``metadata`` (if it
        has any), ``mmirage_chunk_id`` and, when the run is known, ``mmirage_run_id``:
        what :meth:`find_batch` finds a lost create by."""
        metadata = dict(getattr(config, "metadata", {}) or {})
        metadata["mmirage_chunk_id"] = chunk_id
        if self.run_id:
            metadata["mmirage_run_id"] = self.run_id
        return metadata

    #: a retried create looks (:meth:`find_batch`) at batches created up to this long
    #: before its chunk's first create attempt (clock skew between us and the
    #: provider), in seconds.
    FIND_BATCH_MARGIN_SECS: ClassVar[float] = 300.0

    def create_once(
        self,
        what: str,
        chunk_id: str,
        create: Callable[[], Submission],
        request_count: Optional[int] = None,
    ) -> SubmittedBatch:
        """``create()`` (one provider create of chunk ``chunk_id``'s batch; returns the
        batch, a record or the raw dict) with this adapter's retries
        (:meth:`call_with_retries`), where every attempt after the first first looks for
        the batch an earlier attempt may have made (:meth:`adopt_lost_create`) and
        returns it instead of creating a second:
        the one place a retried create adopts, for every adapter.

        Args:
            what: the call, for logs and errors ("OpenAI batches.create (chunk c1)").
            chunk_id: the chunk (``mmirage_chunk_id`` in the batch's metadata).
            create: one attempt at the create.
            request_count: the chunk's requests (an adoption by shape matches on it).

        Returns:
            The :class:`SubmittedBatch` created, or adopted (a dict ``create()`` returned
            converted by :meth:`submitted_batch`).

        Raises:
            mmirage_beam.providers.retrying.ProviderRetriesExhausted: the create or a
                lookup still failed after the last attempt.
            Exception: a non-retryable answer of the provider, at once.
        """
        first_attempt_at = time.time()
        attempts = 0

        def attempt() -> SubmittedBatch:
            nonlocal attempts
            attempts += 1
            if attempts > 1:
                found = self.adopt_lost_create(what, chunk_id, first_attempt_at, request_count)
                if found is not None:  # a plugin's override may still return the dict
                    return self.submitted_batch(found)
            return self.submitted_batch(create())

        return self.call_with_retries(what, attempt)

    def adopt_lost_create(
        self,
        what: str,
        chunk_id: str,
        first_attempt_at: float,
        request_count: Optional[int] = None,
    ) -> Optional[SubmittedBatch]:
        """The batch an earlier attempt of this create made (its answer was an error),
        or None: create again. By metadata (``adopts_by_metadata``): :meth:`find_batch`
        for ``self.run_id`` since ``first_attempt_at - FIND_BATCH_MARGIN_SECS``. An
        adapter adopting by shape overrides this (Anthropic's). A failed lookup fails
        the attempt, which is retried."""
        if not (self.adopts_by_metadata and self.run_id):
            return None
        raw = self.find_batch(
            self.run_id, chunk_id, created_after=first_attempt_at - self.FIND_BATCH_MARGIN_SECS
        )
        if raw is None:
            return None
        found = self.found_batch(raw)
        _LOG.warning(
            "%s: adopted %s, created by an earlier attempt that answered an error; "
            "not creating a second batch",
            what,
            found.batch_id,
        )
        return found.adopted(fields=self.BATCH_FIELDS)

    def find_candidate_batches(
        self,
        request_count: int,
        created_after: float,
        created_before: Optional[float] = None,
        exclude_ids: Iterable[str] = (),
        retries: bool = True,
    ) -> list[FoundBatch]:
        """Batches that may be a chunk's lost create, matched by shape: created in
        ``[created_after, created_before]`` (Unix seconds; None: up to now), holding
        ``request_count`` requests, not in ``exclude_ids`` nor claimed (:meth:`claim_batch`).
        Only an adapter that declares ``adopts_by_shape`` answers; the default finds none.

        Returns:
            :class:`FoundBatch` records, newest first (a plugin's raw dicts are converted
            by shared code with :meth:`found_batch`).
        """
        return []

    # -- the batch records, the one place a plugin's dicts are converted -------------------
    def submitted_batch(self, raw: Union[SubmittedBatch, Mapping[str, Any]]) -> SubmittedBatch:
        """What ``submit_chunk*`` or a create returned, as a :class:`SubmittedBatch`: a
        record as it is, a dict (a plugin's: the provider's batch object, with
        ``mmirage_adoption`` when adopted) through :meth:`SubmittedBatch.from_json`, its
        id and status read by :meth:`parse_submission_result`.

        Raises:
            TypeError: ``raw`` is neither a record nor a mapping.
            Exception: whatever :meth:`parse_submission_result` raises on a dict that is
                not this provider's batch (e.g. ``KeyError``: no id).
        """
        return self._batch_record(SubmittedBatch, raw, "submitted", "a submission")

    def found_batch(
        self, raw: Union[FoundBatch, Mapping[str, Any]], request_count: Optional[int] = None
    ) -> FoundBatch:
        """What ``find_batch`` or ``find_candidate_batches`` found, as a
        :class:`FoundBatch`: a record as it is, a dict (the provider's batch object)
        through :meth:`FoundBatch.from_json`, read as :meth:`submitted_batch` reads one;
        ``request_count`` when the lookup counted its requests.

        Raises:
            TypeError: ``raw`` is neither a record nor a mapping.
        """
        more = {"request_count": request_count} if request_count is not None else {}
        return self._batch_record(FoundBatch, raw, "found", "a found batch", **more)

    def _batch_record(
        self, record_cls: type[_R], raw: Any, verb: str, what: str, **more: Any
    ) -> _R:
        """``raw`` as a ``record_cls``: a record as it is, a mapping through
        ``record_cls.from_json`` (id and status by :meth:`parse_submission_result`, the
        rest where :attr:`BATCH_FIELDS` says; ``more``: the record's own fields).

        Raises:
            TypeError: ``raw`` is neither (the message says what the adapter ``verb``).
        """
        if isinstance(raw, record_cls):
            return raw
        if not isinstance(raw, Mapping):
            raise TypeError(
                f"{type(self).__name__} {verb} a {type(raw).__name__}; {what} is a "
                f"{record_cls.__name__} or the provider's batch as a dict"
            )
        parsed = self.parse_submission_result(dict(raw))
        return record_cls.from_json(raw, parsed, self.BATCH_FIELDS, **more)

    def submit_staged_chunk(self, chunk_id: str, path: str, config: ConfigT) -> SubmittedBatch:
        """Submit the staged chunk file ``path`` (:meth:`submit_chunk_file`, or whichever
        level the adapter overrides) and return the batch as a :class:`SubmittedBatch`:
        what the submit step calls.

        Raises:
            mmirage_beam.providers.retrying.ProviderRetriesExhausted: the provider still
                failed after the last attempt.
            Exception: a non-retryable answer of the provider, at once.
        """
        return self.submitted_batch(self.submit_chunk_file(chunk_id, path, config))

    @classmethod
    def claim_batch(cls, batch_id: str) -> None:
        """Record, in this process, that ``batch_id`` belongs to a receipt, so that no
        shape match (:meth:`find_candidate_batches`) adopts it for another chunk.
        Default: nothing to record (adoption by metadata names its chunk)."""

    # -- provider knowledge shared code asks for (every hook has a default) ----------
    def request_without_id(self, request: Dict[str, Any]) -> RequestLine:
        """``request`` (what :meth:`build_request` returned) without the field that holds
        its custom_id, for the answer key of :mod:`mmirage_beam.reuse`: two requests
        whose rest is equal get the same answer. Default: the top-level ``custom_id``
        (OpenAI, Mistral, Anthropic); an adapter that puts the id elsewhere overrides it
        (Gemini: ``key``). Never modifies ``request``."""
        return {k: v for k, v in request.items() if k != "custom_id"}

    def results_available(self, provider_batch_id: str, config: ConfigT) -> Optional[str]:
        """Whether an ended batch's results can still be downloaded (answers of a batch
        whose results expired at the provider are not reused; see
        :mod:`mmirage_beam.reuse`). Called once per earlier batch, before a run.

        Default: start :meth:`retrieve_results` and read its first result, then stop.
        An adapter with a cheaper look-up (OpenAI: the output file's metadata) overrides.

        Returns:
            None: available; else why not (e.g. ``"results file file-1 expired (404)"``).
        """
        results = self.retrieve_results(provider_batch_id, config)
        try:
            next(iter(results), None)
        except Exception as exc:  # noqa: BLE001 - any failure: the answer is not reused
            return _short_reason(exc)
        finally:
            close = getattr(results, "close", None)
            if close is not None:
                close()
        return None

    @classmethod
    def check_dependencies(cls) -> None:
        """Fail early, in the launcher, when the provider's SDK is not installed.

        Called before any data is read by a run that will talk to the provider.
        Default: nothing to check.

        Raises:
            mmirage_beam.errors.ConfigError: naming the extra that installs the SDK.
        """

    @classmethod
    def check_credentials(cls) -> None:
        """Fail early, in the launcher, when credentials that are not environment keys
        (``required_credentials``) cannot be found: a cloud SDK's own chain (Google's
        Application Default Credentials, boto3's). Called by
        :func:`~mmirage_beam.providers.credentials.resolve_credentials`, before any data
        is read by a run that will talk to the provider. Default: nothing to check.

        Raises:
            mmirage_beam.errors.CredentialsError: saying where the SDK looked and how to
                give it credentials.
        """

    def count_request_tokens(
        self, request: Dict[str, Any], model: Optional[str] = None
    ) -> Optional[TokenCount]:
        """The input tokens and output limit of one built request line, offline.

        ``request`` is what :meth:`build_request` returned; ``model`` is the config's
        model, for lines that do not name one. The built-ins count with their
        provider's tokenizer where one is published, else give a labelled estimate
        (``TokenCount.exact`` False, ``notes`` saying why).

        Returns:
            A :class:`~mmirage_beam.providers.tokens.TokenCount`, or None: this provider
            cannot count (the default), and the summaries say "unknown", never 0.

        Raises:
            ValueError: ``request`` is not this provider's request shape.
        """
        return None

    def exact_token_counter(self, config: ConfigT) -> Optional[Callable[[Dict[str, Any]], int]]:
        """A callable(request line) -> exact input tokens through the provider's own
        (free) counting endpoint, used with ``exact_tokens`` / ``--exact-tokens``; None
        when the provider has none (the default: the offline count is kept). Shared code
        asks only an adapter declaring :attr:`counts_tokens_exactly` (which an override
        sets).

        The callable is built here without a client or a key (it is pickled with the
        DoFn) and opens its client, reading the key from the worker's environment, on
        first use. A call that fails after retries makes that request an estimate; a
        missing key (:class:`~mmirage_beam.errors.CredentialsError`) fails the run.
        """
        return None

    @classmethod
    def price_table(cls) -> Optional[Mapping[str, Any]]:
        """This provider's price rows: ``{"batch_discount": {"fraction", "source",
        "checked"}, "models": [{"model", "input", "output", "official_page", "checked",
        ...}]}``, standard prices in USD per million tokens (see
        :mod:`mmirage_beam.costs.prices`).

        The default reads ``prices.json`` beside the adapter's module, if there is one
        (each built-in package ships its own); None: no prices ("price unknown").
        """
        from importlib import resources

        package = cls.__module__.rpartition(".")[0]
        if not package:
            return None
        try:
            text = resources.files(package).joinpath("prices.json").read_text("utf-8")
        except (FileNotFoundError, ModuleNotFoundError, TypeError, OSError):
            return None
        return json.loads(text)

    def price_key(self, config: ConfigT) -> Optional[str]:
        """The model name to look up in :meth:`price_table` for ``config`` (default: its
        ``model``; e.g. a gateway whose ``model`` is a deployment name maps it here)."""
        model = getattr(config, "model", None)
        return str(model) if model else None

    def limits(self, config: ConfigT) -> ProviderLimits:
        """Requests and bytes per batch, with their source. Default: the config class's
        ``PROVIDER_MAX_REQUESTS_PER_BATCH``, ``PROVIDER_MAX_BATCH_BYTES`` and
        ``PROVIDER_LIMITS_SOURCE`` (checked against the config at load)."""
        klass = type(config)
        return ProviderLimits(
            klass.PROVIDER_MAX_REQUESTS_PER_BATCH,
            klass.PROVIDER_MAX_BATCH_BYTES,
            klass.PROVIDER_LIMITS_SOURCE,
        )

    # -- the MMIRAGE contract -------------------------------------------------------
    @abc.abstractmethod
    def build_request(
        self, custom_id: str, payload: Dict[str, Any], config: ConfigT
    ) -> RequestLine:
        """Turn a neutral payload into one provider batch request line: a JSON object,
        typed by the adapter as a TypedDict of its wire shape (:data:`RequestLine`; a
        plugin may return a plain dict).

        Raises:
            mmirage_beam.errors.RequestBuildError: when the row can never be accepted
                (e.g. an image type the provider refuses).
        """

    def serialize_request(self, request: Dict[str, Any]) -> bytes:
        """The exact bytes of ``request`` as one JSONL line: compact UTF-8 JSON + ``\\n``."""
        return _REQUEST_LINE(request).encode("utf-8") + b"\n"

    def estimate_request_bytes(self, request: Dict[str, Any]) -> int:
        """Serialised UTF-8 size of ``request``, in bytes, used for chunking."""
        return len(self.serialize_request(request))

    @abc.abstractmethod
    def submit_chunk(
        self, chunk_id: str, requests: Sequence[Dict[str, Any]], config: ConfigT
    ) -> Submission:
        """Submit one chunk as one provider batch; return it as a :class:`SubmittedBatch`
        (or, as plugins written before the record do, the provider's raw response)."""

    def submit_chunk_lines(
        self, chunk_id: str, lines: Sequence[bytes], config: ConfigT
    ) -> Submission:
        """Submit already-serialised request lines (each ``serialize_request`` output).

        The default decodes them and calls :meth:`submit_chunk`; adapters that upload a
        file override it to send exactly these bytes.
        """
        return self.submit_chunk(chunk_id, [json.loads(line) for line in lines], config)

    def submit_chunk_file(self, chunk_id: str, path: str, config: ConfigT) -> Submission:
        """Submit the staged chunk file ``path`` (request lines exactly as built, see
        :mod:`mmirage_beam.run.staging`) as one batch.

        The default reads its lines and calls :meth:`submit_chunk_lines` (one chunk in
        memory); adapters that upload a file override it to stream the file.
        """
        return self.submit_chunk_lines(chunk_id, list(iter_chunk_lines(path)), config)

    #: a callable giving the staged chunk file afresh for each upload attempt, for the
    #: adapters that upload a file (:func:`~mmirage_beam.providers.chunk_files.staged_upload`).
    _staged_upload = staticmethod(staged_upload)

    def parse_submission_result(self, raw_result: Dict[str, Any]) -> BatchSubmissionResult:
        """Wrap a raw submission/status response in a :class:`BatchSubmissionResult`.

        The default reads the id and the status word where :attr:`BATCH_FIELDS` says
        (``id``, ``status``) and normalises the word (:meth:`_normalize_status`).

        Raises:
            KeyError: the response holds no id there.
        """
        fields = self.BATCH_FIELDS
        batch_id = fields.read(raw_result, fields.batch_id)
        if batch_id is None:
            raise KeyError(fields.batch_id[-1] if fields.batch_id else "id")
        return BatchSubmissionResult(
            provider_batch_id=batch_id,
            status=self._normalize_status(fields.read(raw_result, fields.status)),
            raw_response=raw_result,
        )

    @abc.abstractmethod
    def check_batch_status(self, provider_batch_id: str, config: ConfigT) -> BatchSubmissionResult:
        """Query the provider for the batch's current status."""

    @abc.abstractmethod
    def retrieve_results(
        self, provider_batch_id: str, config: ConfigT
    ) -> Iterable[Union[ProviderResult, Dict[str, Any]]]:
        """Download results, one :class:`~mmirage_beam.records.ProviderResult` per result
        line: ``custom_id`` and ``generated_text`` or ``error``, plus ``input_tokens`` /
        ``output_tokens`` when reported (:mod:`mmirage_beam.results`). A plugin may
        yield the neutral dicts of ``ProviderResult.to_json`` instead: ``FetchResults``
        converts them with ``ProviderResult.from_json``. Prefer a generator that streams the
        provider's file (:meth:`stream_lines_with_retries` +
        :func:`mmirage_beam.results.results_from_lines`): it is consumed once, by one
        DoFn call per batch, and need not fit in memory."""

    def cancel_batch(self, provider_batch_id: str, config: ConfigT) -> BatchSubmissionResult:
        """Ask the provider to cancel the batch (``mmirage cancel``); the batch then ends
        cancelled, keeping the results of the requests already processed. Shared code
        calls it only on an adapter declaring :attr:`cancels_batches` (which an override
        sets).

        Returns:
            The batch as the cancel call answered it (often still ``cancelling``).

        Raises:
            NotImplementedError: this provider has no cancel call (the default).
            Exception: the provider refused (e.g. the batch has already ended).
        """
        raise NotImplementedError(f"{type(self).__name__} cannot cancel batches")

    def _normalize_status(self, status: Optional[str]) -> str:
        """Map a provider status word to ``completed | failed | in_progress | unknown``."""
        return normalize_status(status, self.STATUS_MAP)

    def describe_batch(self, result: BatchSubmissionResult) -> BatchProgress:
        """Progress of a batch from its :meth:`check_batch_status` result, for reports.

        The default reads the common fields of ``result.raw_response``: a ``status``
        word (else the normalised status), ``request_counts.{completed, failed, total}``
        and ``created_at``. Adapters override it to map their provider's own fields.
        """
        raw = result.raw_response or {}
        counts = raw.get("request_counts")
        counts = counts if isinstance(counts, dict) else {}
        return BatchProgress(
            provider_status=str(raw.get("status") or result.status),
            completed=optional_int(counts.get("completed")),
            failed=optional_int(counts.get("failed")),
            total=optional_int(counts.get("total")),
            created_at=parse_timestamp(raw.get("created_at")),
        )


def _config_class(adapter_cls: type) -> Optional[type]:
    """The config class an adapter class is written for: the ``ConfigT`` argument of the
    nearest parameterised base (``FileUploadAdapter[OpenAIBatchConfig]``), None when no
    base names one (a plugin subclassing the bare ``BatchSubmissionAdapter``)."""
    for klass in adapter_cls.__mro__:
        for orig in klass.__dict__.get("__orig_bases__", ()):
            for arg in getattr(orig, "__args__", ()):
                if isinstance(arg, type) and issubclass(arg, BatchProviderConfig):
                    return arg
    return None


_DUCK_TYPED_RETRY_FILTER = retrying.make_retry_filter((), (Exception,))


def open_adapter(
    adapter_cls: type[BatchSubmissionAdapter[ConfigT]],
    config: ConfigT,
    run_id: Optional[str] = None,
    credentials: Optional[Mapping[str, str]] = None,
) -> BatchSubmissionAdapter[ConfigT]:
    """An adapter of ``adapter_cls`` with its client open: its key read from the
    environment (:func:`resolve_credentials`; or the ``credentials`` given), ``run_id``
    set, ``setup(config)`` called. The one way shared code and every DoFn open one; close
    it with :func:`close_adapter` (or use :func:`opened_adapter`).

    Raises:
        mmirage_beam.errors.CredentialsError: the key is missing (naming its variable).
        mmirage_beam.errors.ConfigError: the provider's SDK is not installed.
    """
    if credentials is None:
        credentials = resolve_credentials(adapter_cls, config.provider)
    adapter = adapter_cls(credentials)
    adapter.run_id = run_id
    adapter.setup(config)
    return adapter


def close_adapter(
    adapter: Optional[BatchSubmissionAdapter],
    describe: Callable[[BaseException], str] = str,
) -> None:
    """``adapter.teardown()`` (None: nothing); a failure to close is logged (as
    ``describe(exc)``: a caller holding keys redacts them), never raised, so it cannot
    hide what the caller was doing."""
    if adapter is None:
        return
    try:
        adapter.teardown()
    except Exception as exc:
        _LOG.warning("closing the %s adapter failed: %s", type(adapter).__name__, describe(exc))


@contextlib.contextmanager
def opened_adapter(
    adapter_cls: type[BatchSubmissionAdapter[ConfigT]],
    config: ConfigT,
    run_id: Optional[str] = None,
) -> Iterator[BatchSubmissionAdapter[ConfigT]]:
    """:func:`open_adapter` for a ``with`` block; closed at its end."""
    adapter = open_adapter(adapter_cls, config, run_id)
    try:
        yield adapter
    finally:
        close_adapter(adapter)


class OpenedAdapters(Mapping[str, BatchSubmissionAdapter[Any]]):
    """Adapters with their clients open, by provider name: how a DoFn or a lookup that
    talks to several providers opens them (:meth:`open`, through :func:`open_adapter`)
    and closes them (:meth:`close`, through :func:`close_adapter`), so none keeps a loop
    of its own. Read like a dict (``adapters["openai"]``).

    Args:
        describe: how a failure to close is logged (a caller holding keys redacts them).
    """

    def __init__(self, describe: Callable[[BaseException], str] = str) -> None:
        self._describe = describe
        self._open: Dict[str, BatchSubmissionAdapter[Any]] = {}

    def open(
        self,
        name: str,
        adapter_cls: type[BatchSubmissionAdapter[ConfigT]],
        config: ConfigT,
        run_id: Optional[str] = None,
        credentials: Optional[Mapping[str, str]] = None,
    ) -> BatchSubmissionAdapter[Any]:
        """The adapter of provider ``name``, opened by :func:`open_adapter` unless it is
        open already.

        Raises:
            mmirage_beam.errors.CredentialsError: the key is missing (naming its variable).
        """
        if name not in self._open:
            self._open[name] = open_adapter(adapter_cls, config, run_id, credentials)
        return self._open[name]

    def close(self) -> None:
        """:func:`close_adapter` every adapter (a failure is logged, never raised) and
        forget them all: safe after a setup that failed half-way, and twice."""
        adapters, self._open = self._open, {}
        for adapter in adapters.values():
            close_adapter(adapter, self._describe)

    def __getitem__(self, name: str) -> BatchSubmissionAdapter[Any]:
        return self._open[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._open)

    def __len__(self) -> int:
        return len(self._open)


def _short_reason(exc: BaseException) -> str:
    """The last line of ``exc``'s message, with its type, for one-line reports."""
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[-1]}" if text else type(exc).__name__


class BatchAdapterRegistry(ProviderRegistry):
    """Maps a provider name to its :class:`BatchSubmissionAdapter` subclass.

    ``register(name, adapter_cls)`` (TypeError for a non-subclass) and ``get(name)``
    (ConfigError naming ``provider``). The built-in adapters register themselves when
    :mod:`mmirage_beam.providers` is imported (which importing this module does first),
    so the contract depends on nothing below it.
    """

    base_class = BatchSubmissionAdapter
    unknown_message = "no adapter registered for {name!r}; registered: {known}"

    @classmethod
    def register(cls, name: str, klass: type) -> None:
        """Register ``klass`` for ``provider: name``, and its ``takes_embeddings`` for the
        configs' output check (:data:`mmirage_beam.providers.config.ADAPTER_TAKES_EMBEDDINGS`).

        Raises:
            TypeError: if ``klass`` is not a :class:`BatchSubmissionAdapter` subclass.
        """
        super().register(name, klass)
        ADAPTER_TAKES_EMBEDDINGS[name] = bool(klass.takes_embeddings)


def register_provider(name: str, config_cls: type, adapter_cls: type) -> None:
    """Register a provider under ``provider: name``: its config class with
    :class:`~mmirage_beam.providers.config.BatchProviderConfigRegistry`, then its adapter
    class with :class:`BatchAdapterRegistry` (what each built-in provider package does
    when imported; a plugin may too).

    Raises:
        TypeError: ``config_cls`` is not a
            :class:`~mmirage_beam.providers.config.BatchProviderConfig` subclass, or
            ``adapter_cls`` not a :class:`BatchSubmissionAdapter` subclass.
    """
    BatchProviderConfigRegistry.register(name, config_cls)
    BatchAdapterRegistry.register(name, adapter_cls)
