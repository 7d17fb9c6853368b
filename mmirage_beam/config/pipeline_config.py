"""The validated config: :class:`PipelineConfig` and the records it is made of.

Frozen dataclasses, one per YAML block (``loading_params.datasets[i]``,
``processing_params.inputs[i]`` and ``outputs[i]``, ``execution_params``), and the
values the YAML may name. :mod:`mmirage_beam.config.validation` builds them from the
parsed YAML; :mod:`mmirage_beam.config.loader` reads the file and re-exports them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Optional

from mmirage_beam.providers.config import BatchProviderConfig
from mmirage_beam.results import EMBEDDING

__all__ = [
    "DATASET_TYPES",
    "INPUT_TYPES",
    "OUTPUT_TYPES",
    "EMBEDDING",
    "OUTPUT_NAME_RE",
    "DatasetConfig",
    "InputConfig",
    "OutputConfig",
    "ExecutionConfig",
    "NOTIFY_EVENTS",
    "NOTIFY_FORMATS",
    "NotifyTarget",
    "DEFAULT_RETRIES",
    "PipelineConfig",
]

DATASET_TYPES = {"jsonl": "JSONL", "loadable": "loadable", "parquet": "parquet"}
INPUT_TYPES = ("text", "image")
OUTPUT_TYPES = ("plain", "JSON", EMBEDDING)
OUTPUT_NAME_RE = re.compile(r"^[A-Za-z0-9_-]+$")


@dataclass(frozen=True)
class DatasetConfig:
    """``loading_params.datasets[i]``.

    Attributes:
        path: file (JSONL, Parquet) or directory (``loadable``: HF ``save_to_disk``).
        type: ``"JSONL"``, ``"parquet"`` or ``"loadable"`` (case-insensitive in YAML).
        output_dir: where placeholder rows go (``<output_dir>/shard_<shard_id>/``).
        image_base_path: directory that relative image paths resolve against.
        allow_images_outside_base: let rows name image files outside
            ``image_base_path`` (absolute paths, ``..``, symlinks leading out, storage
            URIs); off by default, as a dataset is data, not code (docs/security.md).
    """

    path: str
    type: str
    output_dir: str = ""
    image_base_path: Optional[str] = None
    allow_images_outside_base: bool = False


@dataclass(frozen=True)
class InputConfig:
    """``processing_params.inputs[i]``: ``key`` is a JMESPath expression."""

    name: str
    key: str
    type: str = "text"
    default: Any = None
    has_default: bool = False


@dataclass(frozen=True)
class OutputConfig:
    """``processing_params.outputs[i]`` with ``type: batch_api``.

    Attributes:
        name: output name, ``[A-Za-z0-9_-]+``; also the Jinja2 variable of the result.
        prompt: Jinja2 template rendered with the row's inputs.
        output_type: ``"plain"``, ``"JSON"`` or ``"embedding"`` (the rendered prompt is
            the text to embed; the answer is a list of floats).
        output_schema: for JSON outputs, a list of field names or a mapping
            ``field: type`` / ``field: {type, min, max}``.
        dimensions: for embedding outputs, the vector length the processor's
            ``dimensions`` asks for (None: the model's own, not known from the config).
    """

    name: str
    prompt: str
    output_type: str = "plain"
    output_schema: Any = None
    type: str = "batch_api"
    dimensions: Optional[int] = None


#: the run events a webhook may ask for (``execution_params.notify[i].events``), in the
#: order a run's events are listed (:mod:`mmirage_beam.notify`).
NOTIFY_EVENTS = ("completed", "failed", "expired", "cancelled", "budget_reached")
#: ``execution_params.notify[i].format``: the JSON document, or Slack's ``{"text": ...}``.
NOTIFY_FORMATS = ("json", "slack")


@dataclass(frozen=True)
class NotifyTarget:
    """``execution_params.notify[i]``: one webhook told when a run ends.

    Attributes:
        url: an ``http://`` or ``https://`` URL the event is POSTed to.
        events: the events it wants, a subset of :data:`NOTIFY_EVENTS` (default: all).
        format: ``json`` (the event document) or ``slack`` (``{"text": ...}``, as a
            Slack incoming webhook takes it).
        secret_env: the environment variable holding the HMAC-SHA256 key that signs the
            body (``X-Mmirage-Signature``); None: unsigned. The secret itself is never
            in the config.
    """

    url: str
    events: tuple[str, ...] = NOTIFY_EVENTS
    format: str = "json"
    secret_env: Optional[str] = None


@dataclass(frozen=True)
class ExecutionConfig:
    """``execution_params``: ``mode`` (only ``local``), ``retry``, ``merge``, the rest kept.

    ``chunking_parallelism``: how many independent chunkers each ``(output, modality)``
    is spread over (requests go to one by a stable hash of their custom_id); ``None``
    sizes it to the job's workers (see ``pipeline.default_chunking_parallelism``).
    ``submit_concurrency``: chunks each submitting worker uploads and creates at the same
    time (default 4).
    ``retry`` (``false``, ``true`` or a count) and ``merge`` (with ``merge_output_path``)
    make ``mmirage run`` do the whole cycle, as ``--wait --retries N --output-path P``
    (:mod:`mmirage_beam.cycle.loop`); :attr:`retries` is the count.
    """

    mode: str = "local"
    retry: bool | int = False
    merge: bool = False
    merge_output_path: Optional[str] = None
    skip_invalid_rows: bool = False
    chunking_parallelism: Optional[int] = None
    submit_concurrency: int = 4
    #: reuse answers earlier runs under the same metadata base paid for (``--no-reuse``
    #: turns it off for one run; :mod:`mmirage_beam.reuse`)
    reuse_answers: bool = True
    #: webhooks told when a run ends (:mod:`mmirage_beam.notify`, docs/notifications.md)
    notify: tuple[NotifyTarget, ...] = ()
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def retries(self) -> int:
        """Re-sends of the retryable failures: ``retry: true`` is
        :data:`DEFAULT_RETRIES`, ``false`` 0, an int itself."""
        if self.retry is True:
            return DEFAULT_RETRIES
        return int(self.retry or 0)

    @property
    def cycle(self) -> bool:
        """Whether ``mmirage run`` follows, merges and re-sends (``merge`` or ``retry``)."""
        return bool(self.merge or self.retries)


#: ``execution_params.retry: true`` (and ``mmirage run --wait`` without ``--retries``).
DEFAULT_RETRIES = 2


@dataclass(frozen=True)
class PipelineConfig:
    """The whole validated config.

    Attributes:
        processor: the ``batch_api`` processor's provider config.
        datasets: datasets in config order (their concatenation defines source_index).
        num_shards / shard_id: this run handles the ``shard_id``-th of ``num_shards``
            contiguous slices of rows.
        inputs, outputs: processing inputs and batch outputs.
        output_schema: top-level Jinja2 template tree rendered per row (None: keep inputs
            and outputs as they are).
        remove_columns: drop the source columns from output rows (default ``False``).
        config_path: the YAML file the config came from (for messages).
        row_limit: only the first ``row_limit`` rows of the shard by source_index
            (``mmirage run --limit N``, recorded in the run record; never from YAML).
    """

    processor: BatchProviderConfig
    datasets: tuple[DatasetConfig, ...]
    inputs: tuple[InputConfig, ...]
    outputs: tuple[OutputConfig, ...]
    output_schema: Any = None
    remove_columns: bool = False
    num_shards: int = 1
    shard_id: int = 0
    state_dir: Optional[str] = None
    batch_size: Optional[int] = None
    execution: ExecutionConfig = field(default_factory=ExecutionConfig)
    config_path: Optional[str] = None
    row_limit: Optional[int] = None
