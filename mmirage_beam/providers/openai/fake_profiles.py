"""OpenAI-compatible batch services (the ``azure-openai``, ``groq`` and ``together``
profiles of the OpenAI adapter), each served under its own path prefix on the fake's
port by the OpenAI Files + Batches handlers with that service's rules.

=================  =========================  ==========================================
profile            SDK base URL               rules that differ from OpenAI's
=================  =========================  ==========================================
``azure-openai``   ``<base>/azure/openai/v1``  ``api-key`` header or ``Authorization:
                                               Bearer`` (401 in Azure's
                                               ``{"error": {"code": "401", "message"}}``
                                               shape without either); the data-plane
                                               paths ``<base>/azure/openai/files``,
                                               ``/batches`` with ``?api-version=`` too
                                               (``AzureOpenAI(azure_endpoint=...)``);
                                               ``endpoint`` and line ``url`` with or
                                               without ``/v1`` (``/chat/completions``);
                                               every line's
                                               ``body.model`` names the one deployment of
                                               the file; ``completion_window`` ``24h``;
                                               100,000 requests, 200 MB per file; an
                                               overrunning job is not expired (the
                                               ``expire_after_requests`` script key leaves
                                               it ``in_progress`` until cancelled)
``groq``           ``<base>/groq/openai/v1``   ``completion_window`` ``24h`` .. ``7d``
``together``       ``<base>/together/v1``      lines need ``custom_id`` and ``body`` only
                                               (``method``/``url`` optional and ignored);
                                               ``completion_window`` ``24h``; 50,000
                                               requests, 100 MB per file
=================  =========================  ==========================================

Every script key and prompt marker works as on the OpenAI API; ``leading_errors.paths``
take OpenAI's endpoint names (``batches_create``...), which match the same endpoint of
every profile; :meth:`FakeProviderServer.call_counts` counts a profile's calls as
``<profile>:<endpoint>`` (``groq:batches_create``).

Sources (also rows of the refusal table in ``tests/spec/README.md``):

- Azure: "Getting started with Azure OpenAI global batch deployments"
  (https://learn.microsoft.com/azure/ai-foundry/openai/how-to/batch): "We aim to process
  batch requests within 24 hours; we don't expire the jobs that take longer. You can
  cancel the job anytime"; the ``model`` of each line is the global batch deployment's
  name, the same on every line; 100,000 requests and 200 MB per file; the ``api-key``
  header; its examples create batches with ``endpoint="/chat/completions"`` and lines
  with ``"url": "/chat/completions"``, as does the REST reference's sample ("Batch -
  Create", https://learn.microsoft.com/rest/api/azureopenai/batch/create, api-version
  2024-10-21: ``POST {endpoint}/openai/batches?api-version=...`` answering
  ``"endpoint": "/chat/completions"``; ``api-version`` is a required query parameter of
  those data-plane paths). The 401 body is Azure's widely quoted "Access denied due to
  invalid subscription key or wrong API endpoint" object.
- Azure v1 API: "API version lifecycle"
  (https://learn.microsoft.com/azure/ai-foundry/openai/api-version-lifecycle): the plain
  ``OpenAI(api_key=..., base_url="https://RESOURCE.openai.azure.com/openai/v1/")`` client
  works with an API key (the openai SDK sends it as ``Authorization: Bearer``), and
  Entra ID tokens go in the same header; so Bearer is accepted beside ``api-key``.
- Groq: Groq Batch API docs (https://console.groq.com/docs/batch) and the groq SDK's
  ``batches.create`` (``completion_window``: "24h" to "7d"); lines carry ``custom_id``,
  ``method``, ``url`` and ``body`` ("The structure for each line must include"), as
  OpenAI's.
- Together: batch inference docs (https://docs.together.ai/docs/batch-inference and
  /docs/inference/batch/tutorial): "A request has two fields: a custom_id you choose,
  and a body", both required; 50,000 requests and 100 MB per file; "the completion
  window defaults to 24h and cannot be changed". The docs do not say what happens to a
  line that also has ``method`` and ``url``, but the together-python SDK's own batch
  examples send such lines, so the fake accepts them (never stricter than the service).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from mmirage_beam.testing.fake_provider.wire import ApiError

_WINDOW_RE = re.compile(r"^([1-9][0-9]*)([hd])$")


def window_hours(value: Any) -> int | None:
    """Hours of a ``completion_window`` like ``24h`` or ``7d``; None if unreadable."""
    match = _WINDOW_RE.match(value) if isinstance(value, str) else None
    if match is None:
        return None
    n = int(match.group(1))
    return n * 24 if match.group(2) == "d" else n


@dataclass
class Profile:
    """One OpenAI-compatible service's rules (see the module docstring for sources).
    Read at call time, so tests may lower a limit with ``monkeypatch.setattr``.

    Attributes:
        name: the provider name (``azure-openai``, ``groq``, ``together``).
        prefix: path prefix on the fake's port; the SDK base URL is
            ``base_url + prefix + "/v1"``.
        min_window_hours, max_window_hours: accepted ``completion_window`` range, hours.
        window_text: the accepted windows, as the refusal names them.
        max_lines: most requests per input file.
        max_file_bytes: largest ``purpose=batch`` upload, bytes (decimal MB as documented).
        api_key_header: whether the ``api-key`` header is accepted beside
            ``Authorization: Bearer`` (Azure; a missing key gets Azure's 401 object).
        bare_endpoints: whether a batch ``endpoint`` and a line ``url`` may leave out
            ``/v1`` (Azure: ``/chat/completions``).
        data_plane_paths: whether ``prefix + "/files"``, ``"/batches"`` are served too,
            with a required ``api-version`` query (Azure's versioned data-plane API).
        deployment_model: whether every line must name the one deployment (Azure).
        optional_line_keys: line keys OpenAI requires that this service does not.
        expires: whether a job that overruns its window is expired.
    """

    name: str
    prefix: str
    min_window_hours: int
    max_window_hours: int
    window_text: str
    max_lines: int
    max_file_bytes: int
    api_key_header: bool = False
    bare_endpoints: bool = False
    data_plane_paths: bool = False
    deployment_model: bool = False
    optional_line_keys: frozenset[str] = frozenset()
    expires: bool = True

    @property
    def api_prefix(self) -> str:
        """``prefix + "/v1"``: where the SDK's paths (``/files``, ``/batches``) start."""
        return self.prefix + "/v1"

    def canonical_endpoint(self, endpoint: Any) -> Any:
        """``endpoint`` as OpenAI spells it: ``/chat/completions`` -> ``/v1/chat/completions``
        where this service accepts the bare form; anything else unchanged."""
        if self.bare_endpoints and isinstance(endpoint, str) and endpoint.startswith("/"):
            if not endpoint.startswith("/v1/"):
                return "/v1" + endpoint
        return endpoint

    def check_window(self, window: Any) -> None:
        """Raises a 400 :class:`ApiError` for a window this service refuses."""
        hours = window_hours(window)
        if hours is None or not self.min_window_hours <= hours <= self.max_window_hours:
            raise ApiError(
                400,
                "invalid_request_error",
                f"Invalid value: {window!r}. Supported values are: {self.window_text}.",
                param="completion_window",
                code="invalid_value",
            )


AZURE = Profile(
    name="azure-openai",
    prefix="/azure/openai",
    min_window_hours=24,
    max_window_hours=24,  # Azure batch guide: completion_window "24h" only
    window_text="'24h'",
    max_lines=100_000,  # Azure batch guide: "100,000 requests" per file
    max_file_bytes=200 * 1000 * 1000,  # Azure batch guide: 200 MB per file
    api_key_header=True,  # Azure batch guide (REST tab): the api-key header
    bare_endpoints=True,  # Azure batch guide + REST sample: endpoint "/chat/completions"
    data_plane_paths=True,  # REST reference: {endpoint}/openai/batches?api-version=
    deployment_model=True,  # "the same Global Batch deployment name ... on each line"
    expires=False,  # "we don't expire the jobs that take longer"
)
GROQ = Profile(
    name="groq",
    prefix="/groq/openai",
    min_window_hours=24,  # console.groq.com/docs/batch: "24h" to "7d"
    max_window_hours=7 * 24,
    window_text="'24h' to '7d'",
    # The Groq docs record no per-file limit; OpenAI's count and size stand in.
    max_lines=50_000,
    max_file_bytes=200_000_000,
)
TOGETHER = Profile(
    name="together",
    prefix="/together",
    min_window_hours=24,  # docs.together.ai batch: "defaults to 24h and cannot be changed"
    max_window_hours=24,
    window_text="'24h'",
    max_lines=50_000,  # docs.together.ai batch: 50,000 requests per file
    max_file_bytes=100 * 1000 * 1000,  # docs.together.ai batch: 100 MB per file
    optional_line_keys=frozenset({"method", "url"}),  # "two fields: custom_id ... body"
)
#: provider name -> its profile, in the order the banner lists them.
PROFILES: dict[str, Profile] = {p.name: p for p in (AZURE, GROQ, TOGETHER)}
