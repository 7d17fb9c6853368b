"""The settings of one submit or merge pipeline, as one frozen, picklable value each.

A front end (``mmirage run``, ``mmirage resubmit``, ``mmirage merge``, the Beam YAML
transforms) builds one :class:`SubmitSettings` or :class:`MergeSettings`; it is checked
once, here, and handed down as it is (``build_submit_pipeline`` -> ``SubmitRows`` ->
``SubmitChunks`` -> the submit DoFn) instead of a list of a dozen arguments repeated at
every level. Both are frozen dataclasses of plain values, so they pickle to workers.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Optional

from mmirage_beam.costs.tokens import check_sample_fraction
from mmirage_beam.errors import ConfigError

__all__ = ["ROWS_PER_PARTITION", "MergeSettings", "SubmitSettings", "errors_path_for"]

#: Default rows per merge range partition. A partition is what one worker holds while it
#: joins (about 1.6 KB of rows, results and lines per row, measured by hand on the scale
#: benchmark's 200,000 rows: peak 508 MiB with 3 partitions, 467 with 4, 428 with 8); the
#: number of partitions is the ceiling of the receipts' source_index span over it, so a
#: partition never grows with the dataset.
ROWS_PER_PARTITION = 25_000


@dataclasses.dataclass(frozen=True)
class SubmitSettings:
    """What one submit (or dry-run) pipeline does beyond its config.

    Attributes:
        run_id: the run's id (file names, receipts, OpenAI batch metadata).
        export_prompts: dry run: write requests here instead of submitting.
        skip_invalid_rows: override ``execution_params.skip_invalid_rows``; None: the
            config's (:meth:`resolved` fills it in).
        attempt: the submission attempt of ``run_id`` (>= 1; resumes count up, and chunk
            ids of a later attempt never reuse an earlier one's).
        exclude_custom_ids: requests already submitted in this run (a resume).
        only_custom_ids: send only these requests (a resubmission); placeholder rows are
            not written again. None: every request.
        parent_run_id: for a resubmission, the run it re-sends failures of.
        chunking_parallelism: chunkers per ``(output, modality)`` (>= 1); None:
            ``execution_params.chunking_parallelism``, else the job's worker count.
        reuse_files: earlier runs' answers files: requests they answered are not sent
            (:mod:`mmirage_beam.reuse`); empty: reuse off.
        stale_batches: earlier batches whose results expired (their answers are sent
            again).
        estimate_fraction: ``--estimate sample``: count the tokens of only this share of
            the requests, in (0, 1], and extrapolate; None: count every request.

    Raises:
        ConfigError: ``estimate_fraction`` is not a number in (0, 1] (the message names
            ``--estimate-fraction``), ``attempt`` or ``chunking_parallelism`` is below 1,
            or ``run_id`` is empty.
    """

    run_id: str
    export_prompts: Optional[str] = None
    skip_invalid_rows: Optional[bool] = None
    attempt: int = 1
    exclude_custom_ids: frozenset[str] = frozenset()
    only_custom_ids: Optional[frozenset[str]] = None
    parent_run_id: Optional[str] = None
    chunking_parallelism: Optional[int] = None
    reuse_files: tuple[str, ...] = ()
    stale_batches: frozenset[str] = frozenset()
    estimate_fraction: Optional[float] = None

    def __post_init__(self) -> None:
        if not isinstance(self.run_id, str) or not self.run_id:
            raise ConfigError("run_id", f"must be a non-empty string, got {self.run_id!r}")
        if isinstance(self.attempt, bool) or not isinstance(self.attempt, int) or self.attempt < 1:
            raise ConfigError("attempt", f"must be an integer >= 1, got {self.attempt!r}")
        if self.chunking_parallelism is not None and (
            isinstance(self.chunking_parallelism, bool)
            or not isinstance(self.chunking_parallelism, int)
            or self.chunking_parallelism < 1
        ):
            raise ConfigError(
                "chunking_parallelism",
                f"must be an integer >= 1, got {self.chunking_parallelism!r}",
            )
        _set(self, "exclude_custom_ids", frozenset(self.exclude_custom_ids))
        if self.only_custom_ids is not None:
            _set(self, "only_custom_ids", frozenset(self.only_custom_ids))
        _set(self, "reuse_files", tuple(self.reuse_files))
        _set(self, "stale_batches", frozenset(self.stale_batches))
        if self.estimate_fraction is not None:
            _set(self, "estimate_fraction", check_sample_fraction(self.estimate_fraction))

    @property
    def dry_run(self) -> bool:
        """Whether the requests are exported (``export_prompts``) rather than sent."""
        return self.export_prompts is not None

    @property
    def selection(self) -> Optional[tuple[frozenset[str], bool]]:
        """``(ids, keep_listed)`` when only some requests are sent: the resubmitted ids
        (kept) or a resume's receipted ids (dropped); None: every request is sent."""
        if self.only_custom_ids is not None:
            return self.only_custom_ids, True
        if self.exclude_custom_ids:
            return self.exclude_custom_ids, False
        return None

    def resolved(self, config_skip_invalid_rows: bool) -> SubmitSettings:
        """These settings with ``skip_invalid_rows`` decided (the config's value when it
        is None)."""
        if self.skip_invalid_rows is not None:
            return self
        return dataclasses.replace(self, skip_invalid_rows=bool(config_skip_invalid_rows))

    def for_submit_step(self) -> SubmitSettings:
        """What the submit DoFn is pickled with: these settings less the custom_id sets,
        which it never reads (a resumed run's can hold millions of ids; the selection
        step has its own copy)."""
        if not self.exclude_custom_ids and self.only_custom_ids is None:
            return self
        return dataclasses.replace(self, exclude_custom_ids=frozenset(), only_custom_ids=None)


@dataclasses.dataclass(frozen=True)
class MergeSettings:
    """What one merge pipeline writes and how, beyond its config and the batches.

    Attributes:
        output_path: the merged JSONL file (absolute or a URI).
        num_partitions: ordered-write partitions (>= 1); None: as many as it takes for
            none to hold more than ``rows_per_partition`` of the receipts' source_index
            range.
        rows_per_partition: the default partition's width, in rows (>= 1).
        verify_source: rebuild the requests and compare their hashes with the receipts.
        invalid_rows_files: the runs' ``<base>.invalid_rows.<run_id>.jsonl`` files; their
            rows (skipped at submission) are written marked ``mmirage_skipped``.
        unsubmitted_run: ``(run_id, resume command)``: report every rebuilt request that
            no receipt holds as ``never_submitted`` of that run.
        errors_path: the errors file; None: :func:`errors_path_for` ``output_path``
            (:attr:`errors_file` is the one used).
        answers_path: where to write the merge's answers file (:mod:`mmirage_beam.reuse`);
            None: none.

    Raises:
        ConfigError: ``output_path`` is empty, or ``num_partitions`` /
            ``rows_per_partition`` is below 1.
    """

    output_path: str
    num_partitions: Optional[int] = None
    rows_per_partition: int = ROWS_PER_PARTITION
    verify_source: bool = True
    invalid_rows_files: tuple[str, ...] = ()
    unsubmitted_run: Optional[tuple[str, str]] = None
    errors_path: Optional[str] = None
    answers_path: Optional[str] = None

    def __post_init__(self) -> None:
        if not isinstance(self.output_path, str) or not self.output_path:
            raise ConfigError("output_path", f"must be a path, got {self.output_path!r}")
        for key in ("num_partitions", "rows_per_partition"):
            value = getattr(self, key)
            if value is None and key == "num_partitions":
                continue
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(key, f"must be an integer >= 1, got {value!r}")
        _set(self, "invalid_rows_files", tuple(self.invalid_rows_files))
        if self.unsubmitted_run is not None:
            _set(self, "unsubmitted_run", tuple(self.unsubmitted_run))

    @property
    def errors_file(self) -> str:
        """The errors file written: ``errors_path``, else ``OUT.errors.jsonl``."""
        return self.errors_path or errors_path_for(self.output_path)


def errors_path_for(output_path: str) -> str:
    """``OUT.jsonl`` (or ``OUT.parquet``) -> ``OUT.errors.jsonl`` (any other name, such as
    an hf folder: ``.errors.jsonl`` added)."""
    stem = output_path.rstrip("/")
    for suffix in (".jsonl", ".parquet"):
        if stem.endswith(suffix):
            stem = stem[: -len(suffix)]
            break
    return f"{stem}.errors.jsonl"


def settings_from(cls: type, first: Any, given: dict[str, Any], defaults: dict[str, Any]) -> Any:
    """The settings object of a transform called either with one (``first`` an instance
    of ``cls``, every keyword left at its default) or the old way (``first`` the first
    field, ``given`` the other keywords).

    Raises:
        TypeError: a settings object and keyword settings were both given.
    """
    if isinstance(first, cls):
        extra = sorted(k for k, v in given.items() if v != defaults[k])
        if extra:
            raise TypeError(
                f"pass either a {cls.__name__} or keyword settings, not both (got "
                f"{', '.join(extra)})"
            )
        return first
    return cls(first, **given)


def _set(obj: Any, name: str, value: Any) -> None:
    object.__setattr__(obj, name, value)
