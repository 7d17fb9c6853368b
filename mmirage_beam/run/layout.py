"""The files of one run, named once (DESIGN.md "Identifiers and files").

Every file a run writes sits beside its receipts, under the receipts base ``<base>`` (the
processor's ``metadata_output_path`` without ``.jsonl``, :func:`receipts_base`), and
carries the run id in its name. :class:`RunLayout` is the one place these names are
formatted; the path helpers of the other modules (``receipt_path``, ``lease_path``,
``run_record_path``, ``staging_dir``, ...) ask it.
"""

from __future__ import annotations

import dataclasses
from typing import Optional

DEFAULT_METADATA_BASE = "batch_metadata"


def receipts_base(metadata_output_path: str, state_dir: Optional[str] = None) -> str:
    """``metadata_output_path`` without a trailing ``.jsonl``.

    An empty ``metadata_output_path`` (MMIRAGE's default) means
    ``<state_dir or .>/batch_metadata``.
    """
    path = metadata_output_path
    if not path:
        from mmirage_beam.io.filesystems import FileSystems

        path = FileSystems.join(state_dir or ".", DEFAULT_METADATA_BASE)
    return path[: -len(".jsonl")] if path.endswith(".jsonl") else path


def parts_dir(receipt_file: str) -> str:
    """``<receipt file>.parts``: one durable file per receipt of ``receipt_file``."""
    return receipt_file + ".parts"


def intent_path(receipt_file: str, chunk_id: str) -> str:
    """``<receipt file>.parts/<chunk_id>.intent``: written just before a chunk is
    submitted (see :mod:`mmirage_beam.run.resume`)."""
    return f"{parts_dir(receipt_file)}/{chunk_id}.intent"


def part_path(receipt_file: str, chunk_id: str) -> str:
    """``<receipt file>.parts/<chunk_id>.json``: the durable receipt of one chunk."""
    return f"{parts_dir(receipt_file)}/{chunk_id}.json"


def part_chunk_id(path: str) -> str:
    """The chunk id a part file is named after: :func:`part_path` read backwards."""
    name = path.replace("\\", "/").rsplit("/", 1)[-1]
    return name[: -len(".json")] if name.endswith(".json") else name


def export_file_for(export_prompts: str, run_id: str) -> str:
    """DESIGN.md: ``P.jsonl`` -> ``P.<run_id>.jsonl``; any other ``P`` is a directory."""
    if export_prompts.endswith(".jsonl"):
        return f"{export_prompts[: -len('.jsonl')]}.{run_id}.jsonl"
    return f"{export_prompts.rstrip('/')}/exported_prompts.{run_id}.jsonl"


@dataclasses.dataclass(frozen=True)
class RunLayout:
    """The files of run ``run_id`` beside the receipts base ``base`` (paths or URIs, str).

    ``run_id`` may also be a glob (``"*"``) to match the files of every run.
    """

    base: str
    run_id: str

    def receipt(self, modality: str, dry_run: bool = False) -> str:
        """``<base>.<modality>.<run_id>.jsonl`` (``<base>.dry-run.<modality>...`` in a dry run)."""
        middle = f"dry-run.{modality}" if dry_run else modality
        return f"{self.base}.{middle}.{self.run_id}.jsonl"

    def parts(self, modality: str, dry_run: bool = False) -> str:
        """The receipt parts folder of ``modality``: ``<receipt>.parts``."""
        return parts_dir(self.receipt(modality, dry_run))

    def intent(self, modality: str, chunk_id: str) -> str:
        """``<receipt>.parts/<chunk_id>.intent``."""
        return intent_path(self.receipt(modality), chunk_id)

    def part(self, modality: str, chunk_id: str, dry_run: bool = False) -> str:
        """``<receipt>.parts/<chunk_id>.json``."""
        return part_path(self.receipt(modality, dry_run), chunk_id)

    @property
    def lease(self) -> str:
        """``<base>.lease.<run_id>``: the lease of the process that runs it."""
        return f"{self.base}.lease.{self.run_id}"

    @property
    def run_record(self) -> str:
        """``<base>.run.<run_id>.json``: fingerprint, start, finish."""
        return f"{self.base}.run.{self.run_id}.json"

    @property
    def submitted_marker(self) -> str:
        """``<base>.submitted.<run_id>.json``: every chunk of the attempt is receipted."""
        return f"{self.base}.submitted.{self.run_id}.json"

    @property
    def stop_marker(self) -> str:
        """``<base>.stop.<run_id>``: once it exists, the run submits nothing more."""
        return f"{self.base}.stop.{self.run_id}"

    @property
    def staging(self) -> str:
        """``<base>.staged.<run_id>``: the staged chunks and temp outputs."""
        return f"{self.base}.staged.{self.run_id}"

    @property
    def invalid_rows(self) -> str:
        """``<base>.invalid_rows.<run_id>.jsonl``."""
        return f"{self.base}.invalid_rows.{self.run_id}.jsonl"

    @property
    def merge_record(self) -> str:
        """``<base>.merge.<run_id>.json``: written by merge (``run_id``: the chain's root)."""
        return f"{self.base}.merge.{self.run_id}.json"

    @property
    def cancel_record(self) -> str:
        """``<base>.cancel.<run_id>.json``: the batches cancel stopped."""
        return f"{self.base}.cancel.{self.run_id}.json"

    @property
    def cycle_state(self) -> str:
        """``<base>.cycle.<run_id>.json``: where ``run --wait`` is in its cycle."""
        return f"{self.base}.cycle.{self.run_id}.json"

    @property
    def notifications(self) -> str:
        """``<base>.notifications.<run_id>.jsonl``: one line per webhook event delivered
        (:mod:`mmirage_beam.notify`)."""
        return f"{self.base}.notifications.{self.run_id}.jsonl"

    @property
    def resubmit_ids(self) -> str:
        """``<base>.resubmit-ids.<run_id>.txt``: the failed custom_ids a resubmission
        sends, one a line (written by the workers, read by the launcher)."""
        return f"{self.base}.resubmit-ids.{self.run_id}.txt"

    @property
    def probe(self) -> str:
        """``<base>.probe.<run_id>``: the write-read-delete probe of the receipts place."""
        return f"{self.base}.probe.{self.run_id}"

    def export(self, export_prompts: str) -> str:
        """The dry run's export file for the ``--export-prompts`` value ``export_prompts``."""
        return export_file_for(export_prompts, self.run_id)
